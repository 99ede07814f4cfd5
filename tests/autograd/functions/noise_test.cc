// Gradients and behaviour of autograd/functions/noise.h: dropout.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using gc_util::uniform;

namespace {

// Dropout whose mask is the same on every call: the generator is created inside with a fixed
// seed, so gradcheck's repeated evaluations (and the f32/f64 comparison) all see one mask.
tandem::GradcheckFunction fixed_mask_dropout(double ratio, std::uint64_t seed) {
  return [ratio, seed](const Variables& v) -> Variables {
    Generator generator(seed);
    return {F::dropout(v[0], ratio, &generator)};
  };
}

}  // namespace

TEST_CASE("dropout gradients with a fixed mask", "[noise][gradcheck]") {
  std::uint64_t seed = 1;
  for (double ratio : {0.5, 0.1, 0.8, 0.0}) {
    for (const Shape& shape : {Shape{4, 5}, Shape{}, Shape{1, 7}, Shape{2, 3, 4}}) {
      INFO("ratio " << ratio << " shape " << shape_str(shape));
      const Tensor x = uniform(shape, seed++);
      REQUIRE_GRADCHECK(fixed_mask_dropout(ratio, 42), {x});
    }
  }
  SECTION("inside a larger graph, with a constant operand") {
    const Tensor x = uniform({3, 4}, 50), w = uniform({4}, 51);
    auto fn = [](const Variables& v) -> Variables {
      Generator generator(7);
      return {F::mul(F::dropout(F::tanh(v[0]), 0.4, &generator), v[1])};
    };
    REQUIRE_GRADCHECK(fn, {x, w});
  }
  SECTION("test mode: the identity") {
    TrainModeGuard test_mode(false);
    REQUIRE_GRADCHECK(fixed_mask_dropout(0.5, 42), {uniform({3, 4}, 52)});
  }
}

TEST_CASE("dropout in test mode returns x unchanged", "[noise]") {
  Variable x(uniform({3, 4}, 100), true);
  {
    TrainModeGuard test_mode(false);
    REQUIRE_FALSE(train_mode());
    Generator generator(3);
    const Variable y = F::dropout(x, 0.5, &generator);
    REQUIRE(y.same_as(x));
    REQUIRE_NEAR_VALUES(y.data(), x.data(), 0);
    const Variable z = F::dropout(x, 0.9);
    REQUIRE_NEAR_VALUES(z.data(), x.data(), 0);
    F::sum(z).backward();
    REQUIRE_NEAR_VALUES(x.grad(), std::vector<double>(12, 1.0), 0);
  }
  REQUIRE(train_mode());  // the guard restored train mode
  // ratio 0 is also the identity in train mode.
  REQUIRE(F::dropout(x, 0.0).same_as(x));
}

TEST_CASE("dropout in train mode zeroes about ratio of the elements and scales the rest", "[noise]") {
  const std::int64_t n = 100000;
  for (double ratio : {0.5, 0.2, 0.75}) {
    INFO("ratio " << ratio);
    Variable x(full({200, n / 200}, 3.0, DType::f64), true);
    Generator generator(11);
    const Variable y = F::dropout(x, ratio, &generator);
    REQUIRE(y.shape() == x.shape());
    REQUIRE(y.requires_grad());
    const std::vector<double> values = y.data().to_vector<double>();
    const double kept_value = 3.0 / (1 - ratio);
    std::int64_t zeros = 0, others = 0;
    for (double v : values) {
      if (v == 0) {
        ++zeros;
      } else if (std::abs(v - kept_value) > 1e-12 * kept_value) {
        ++others;
      }
    }
    REQUIRE(others == 0);
    // The fraction of zeros is binomial with std sqrt(r (1 - r) / n) <= 0.0016: allow ~6 sigma.
    REQUIRE(static_cast<double>(zeros) / n == Approx(ratio).margin(0.01));
    // The gradient is the same mask: 1 / (1 - ratio) where kept, 0 where dropped.
    F::sum(y).backward();
    const std::vector<double> g = x.grad().to_vector<double>();
    for (std::size_t i = 0; i < g.size(); i += 997) {
      INFO("element " << i);
      REQUIRE(g[i] == Approx(values[i] / 3.0).epsilon(1e-12));
    }
  }
}

TEST_CASE("dropout masks are reproducible from the generator", "[noise]") {
  const Variable x(uniform({10, 10}, 200));
  Generator g1(5), g2(5), g3(6);
  const Variable a = F::dropout(x, 0.5, &g1);
  const Variable b = F::dropout(x, 0.5, &g2);
  const Variable c = F::dropout(x, 0.5, &g3);
  REQUIRE_NEAR_VALUES(a.data(), b.data(), 0);
  REQUIRE_FALSE(gc_util::mismatch(a.data(), c.data(), 0).empty());
  // A second draw from the same generator gives a new mask.
  const Variable d = F::dropout(x, 0.5, &g1);
  REQUIRE_FALSE(gc_util::mismatch(a.data(), d.data(), 0).empty());
  // Without a generator, the global one is used: manual_seed makes it reproducible.
  manual_seed(123);
  const Variable e = F::dropout(x, 0.5);
  manual_seed(123);
  const Variable f = F::dropout(x, 0.5);
  REQUIRE_NEAR_VALUES(e.data(), f.data(), 0);
  // Dropout of a constant records no graph.
  REQUIRE_FALSE(e.requires_grad());
}

TEST_CASE("dropout rejects a ratio outside [0, 1) and integer inputs", "[noise][errors]") {
  const Variable x(uniform({2, 3}, 300), true);
  REQUIRE_THROWS_AS(F::dropout(x, 1.0), Error);
  REQUIRE_THROWS_WITH(F::dropout(x, 1.0), Contains("dropout") && Contains("ratio") && Contains("1"));
  REQUIRE_THROWS_AS(F::dropout(x, 1.5), Error);
  REQUIRE_THROWS_AS(F::dropout(x, -0.1), Error);
  REQUIRE_THROWS_WITH(F::dropout(x, -0.1), Contains("-0.1"));
  {
    // The ratio is checked in test mode too.
    TrainModeGuard test_mode(false);
    REQUIRE_THROWS_AS(F::dropout(x, 1.0), Error);
  }
  const Variable t(gc_util::i32({1, 2}, {2}));
  REQUIRE_THROWS_AS(F::dropout(t, 0.5), Error);
  REQUIRE_THROWS_WITH(F::dropout(t, 0.5), Contains("floating"));
}

TEST_CASE("dropout in f32 agrees with f64 (same seed, same mask)", "[noise][f32]") {
  gc_util::check_f32_against_f64(fixed_mask_dropout(0.3, 9), {uniform({5, 6}, 400)});
}
