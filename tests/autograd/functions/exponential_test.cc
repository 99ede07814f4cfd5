// Gradients and behaviour of autograd/functions/exponential.h: exp, log, sqrt, square.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using gc_util::uniform;

namespace {

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> list = {{3, 4}, {}, {1}, {1, 5}, {2, 2, 3}};
  return list;
}

}  // namespace

TEST_CASE("exp and square gradients", "[exponential][gradcheck]") {
  std::uint64_t seed = 1;
  for (const Shape& shape : shapes()) {
    INFO("shape " << shape_str(shape));
    const Tensor x = uniform(shape, seed++, -2, 2);
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::exp(v[0])}; }, {x});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::square(v[0])}; }, {x});
  }
}

TEST_CASE("exp gradients for large inputs", "[exponential][gradcheck]") {
  // exp(x) in [e^5, e^10]: the central-difference truncation error is eps^2/6 * exp(x),
  // i.e. a relative 1.7e-7, and the rounding error ~1e-16 * exp(x) / eps: both well inside the
  // default rtol 1e-4, so the defaults hold even here (atol is irrelevant at this magnitude).
  const Tensor x = uniform({2, 3}, 50, 5, 10);
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::exp(v[0])}; }, {x});
}

TEST_CASE("log and sqrt gradients on positive inputs", "[exponential][gradcheck]") {
  std::uint64_t seed = 100;
  for (const Shape& shape : shapes()) {
    INFO("shape " << shape_str(shape));
    // x in [0.2, 3]: far from the pole at 0 compared with eps = 1e-3.
    const Tensor x = uniform(shape, seed++, 0.2, 3);
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::log(v[0])}; }, {x});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::sqrt(v[0])}; }, {x});
  }
  // Large magnitudes too.
  const Tensor big = uniform({4}, 150, 10, 1000);
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::log(v[0])}; }, {big});
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::sqrt(v[0])}; }, {big});
}

TEST_CASE("compositions: log(exp(x)), sqrt(square(x)), exp(log(x))", "[exponential][gradcheck]") {
  const Tensor x = uniform({3, 3}, 200, 0.3, 2);
  auto fn = [](const Variables& v) -> Variables {
    return {F::log(F::exp(v[0])), F::sqrt(F::square(v[0])), F::exp(F::log(v[0])), F::log(F::sqrt(v[0]))};
  };
  REQUIRE_GRADCHECK(fn, {x});
  // All four are x (or log(x)/2) and have gradient 1 (or 1/(2x)).
  Variable xv(gc_util::f64({0.5, 2}, {2}), true);
  F::sum(F::add(F::log(F::exp(xv)), F::log(F::sqrt(xv)))).backward();
  REQUIRE_NEAR_VALUES(xv.grad(), {1 + 1.0, 1 + 0.25}, 1e-12);
}

TEST_CASE("exponential forward values", "[exponential]") {
  const Variable x(gc_util::f64({0.25, 1, 4}, {3}));
  REQUIRE_NEAR_VALUES(F::exp(x).data(), {std::exp(0.25), std::exp(1.0), std::exp(4.0)});
  REQUIRE_NEAR_VALUES(F::log(x).data(), {std::log(0.25), 0, std::log(4.0)});
  REQUIRE_NEAR_VALUES(F::sqrt(x).data(), {0.5, 1, 2});
  REQUIRE_NEAR_VALUES(F::square(x).data(), {0.0625, 1, 16});
  const Variable s(gc_util::f64({-3}, {}));
  REQUIRE(F::square(s).shape() == Shape{});
  REQUIRE(F::square(s).data().item() == Approx(9));
}

TEST_CASE("exponential gradients by hand", "[exponential]") {
  Variable x(gc_util::f64({0.25, 1, 4}, {3}), true);
  F::sum(F::exp(x)).backward();
  REQUIRE_NEAR_VALUES(x.grad(), {std::exp(0.25), std::exp(1.0), std::exp(4.0)});
  x.cleargrad();
  F::sum(F::log(x)).backward();
  REQUIRE_NEAR_VALUES(x.grad(), {4, 1, 0.25});
  x.cleargrad();
  F::sum(F::sqrt(x)).backward();
  REQUIRE_NEAR_VALUES(x.grad(), {1, 0.5, 0.25});
  x.cleargrad();
  F::sum(F::square(x)).backward();
  REQUIRE_NEAR_VALUES(x.grad(), {0.5, 2, 8});

  // A constant factor in the graph gets nothing.
  x.cleargrad();
  const Variable c(gc_util::f64({2, 2, 2}, {3}));
  F::sum(F::mul(F::exp(c), F::log(x))).backward();
  REQUIRE_FALSE(c.grad().defined());
  REQUIRE_NEAR_VALUES(x.grad(), {std::exp(2.0) * 4, std::exp(2.0), std::exp(2.0) * 0.25});
}

TEST_CASE("exponential functions reject integer inputs", "[exponential][errors]") {
  const Variable t(gc_util::i64({1, 2}, {2}));
  REQUIRE_THROWS_AS(F::exp(t), Error);
  REQUIRE_THROWS_AS(F::log(t), Error);
  REQUIRE_THROWS_AS(F::sqrt(t), Error);
}

TEST_CASE("exponential functions in f32 agree with f64", "[exponential][f32]") {
  const Tensor x = uniform({4, 5}, 300, 0.2, 3);
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::exp(v[0])}; }, {x});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::log(v[0])}; }, {x});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::sqrt(v[0])}; }, {x});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::square(v[0])}; }, {x});
}
