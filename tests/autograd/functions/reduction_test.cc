// Gradients and behaviour of autograd/functions/reduction.h: sum and mean over axes.
#include <catch2/catch.hpp>

#include <vector>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using gc_util::uniform;

namespace {

struct ReduceCase {
  Shape x;
  std::vector<std::int64_t> axes;
  bool keepdims;
  Shape out;
};

const std::vector<ReduceCase>& cases() {
  static const std::vector<ReduceCase> list = {
      {{2, 3, 4}, {0}, false, {3, 4}},
      {{2, 3, 4}, {1}, false, {2, 4}},
      {{2, 3, 4}, {2}, false, {2, 3}},
      {{2, 3, 4}, {-1}, false, {2, 3}},
      {{2, 3, 4}, {0}, true, {1, 3, 4}},
      {{2, 3, 4}, {1}, true, {2, 1, 4}},
      {{2, 3, 4}, {-1}, true, {2, 3, 1}},
      {{2, 3, 4}, {0, 2}, false, {3}},
      {{2, 3, 4}, {2, 0}, true, {1, 3, 1}},
      {{2, 3, 4}, {-3, -2}, false, {4}},
      {{2, 3, 4}, {}, false, {}},
      {{2, 3, 4}, {}, true, {1, 1, 1}},
      {{2, 3, 4}, {0, 1, 2}, false, {}},
      {{2, 3, 4}, {0, 1, 2}, true, {1, 1, 1}},
      {{1, 5}, {0}, false, {5}},  // batch 1
      {{1, 5}, {1}, true, {1, 1}},
      {{5}, {0}, false, {}},
      {{}, {}, false, {}},  // a scalar
      {{}, {}, true, {}},
  };
  return list;
}

std::string describe(const ReduceCase& c) {
  std::ostringstream out;
  out << shape_str(c.x) << " axes " << shape_str(c.axes) << (c.keepdims ? " keepdims" : "");
  return out.str();
}

}  // namespace

TEST_CASE("sum and mean gradients over each axis, several axes and all axes", "[reduction][gradcheck]") {
  std::uint64_t seed = 1;
  for (const ReduceCase& c : cases()) {
    INFO(describe(c));
    const Tensor x = uniform(c.x, seed++);
    auto sum_fn = [&c](const Variables& v) -> Variables { return {F::sum(v[0], c.axes, c.keepdims)}; };
    auto mean_fn = [&c](const Variables& v) -> Variables { return {F::mean(v[0], c.axes, c.keepdims)}; };
    REQUIRE(sum_fn({Variable(x)})[0].shape() == c.out);
    REQUIRE(mean_fn({Variable(x)})[0].shape() == c.out);
    REQUIRE_GRADCHECK(sum_fn, {x});
    REQUIRE_GRADCHECK(mean_fn, {x});
  }
}

TEST_CASE("sum and mean forward values", "[reduction]") {
  const Variable x(gc_util::f64({1, 2, 3, 4, 5, 6}, {2, 3}));
  REQUIRE_NEAR_VALUES(F::sum(x).data(), {21});
  REQUIRE_NEAR_VALUES(F::mean(x).data(), {3.5});
  REQUIRE_NEAR_VALUES(F::sum(x, {0}).data(), {5, 7, 9});
  REQUIRE_NEAR_VALUES(F::sum(x, {1}).data(), {6, 15});
  REQUIRE_NEAR_VALUES(F::mean(x, {0}).data(), {2.5, 3.5, 4.5});
  REQUIRE_NEAR_VALUES(F::mean(x, {-1}, true).data(), {2, 5});
  REQUIRE(F::mean(x, {-1}, true).shape() == Shape{2, 1});
  REQUIRE(F::sum(x).shape() == Shape{});
}

TEST_CASE("sum and mean gradients by hand", "[reduction]") {
  Variable x(gc_util::f64({1, 2, 3, 4, 5, 6}, {2, 3}), true);
  // sum over axis 1, weighted by [1, 10]: each row's elements get its weight.
  F::sum(F::mul(F::sum(x, {1}), Variable(gc_util::f64({1, 10}, {2})))).backward();
  REQUIRE_NEAR_VALUES(x.grad(), {1, 1, 1, 10, 10, 10});
  x.cleargrad();
  // mean over axis 0 weighted by [1, 2, 3]: gradient w / 2 in each row.
  F::sum(F::mul(F::mean(x, {0}, true), Variable(gc_util::f64({1, 2, 3}, {1, 3})))).backward();
  REQUIRE_NEAR_VALUES(x.grad(), {0.5, 1, 1.5, 0.5, 1, 1.5});
  x.cleargrad();
  F::mean(x).backward();
  REQUIRE_NEAR_VALUES(x.grad(), {1.0 / 6, 1.0 / 6, 1.0 / 6, 1.0 / 6, 1.0 / 6, 1.0 / 6});
  x.cleargrad();
  F::mean(x, {0, 1}, true).backward();  // a [1, 1] output is a scalar for backward()
  REQUIRE_NEAR_VALUES(x.grad(), {1.0 / 6, 1.0 / 6, 1.0 / 6, 1.0 / 6, 1.0 / 6, 1.0 / 6});
}

TEST_CASE("reductions of a constant record no graph", "[reduction]") {
  const Variable c(gc_util::f64({1, 2}, {2}));
  REQUIRE_FALSE(F::sum(c).requires_grad());
  REQUIRE_FALSE(F::mean(c).requires_grad());
  Variable x(gc_util::f64({3, 4}, {2}), true);
  F::sum(F::mul(x, F::sum(c))).backward();  // the constant factor sum(c) = 3
  REQUIRE_NEAR_VALUES(x.grad(), {3, 3});
  REQUIRE_FALSE(c.grad().defined());
}

TEST_CASE("sum and mean reject axes out of range", "[reduction][errors]") {
  const Variable x(uniform({2, 3}, 400), true);
  REQUIRE_THROWS_AS(F::sum(x, {2}), Error);
  REQUIRE_THROWS_WITH(F::sum(x, {2}), Contains("axis 2"));
  REQUIRE_THROWS_AS(F::mean(x, {-3}), Error);
  REQUIRE_THROWS_AS(F::mean(Variable(gc_util::i64({1, 2}, {2})), {0}), Error);  // mean is floating only
}

TEST_CASE("sum and mean in f32 agree with f64", "[reduction][f32]") {
  const Tensor x = uniform({3, 4, 5}, 500);
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::sum(v[0], {1})}; }, {x});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::mean(v[0], {0, 2}, true)}; }, {x});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::mean(v[0])}; }, {x});
}
