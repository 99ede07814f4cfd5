// Gradients and behaviour of autograd/functions/array.h: reshape, expand_dims, squeeze,
// transpose, broadcast_to, concat, stack, split_axis and get_item.
#include <catch2/catch.hpp>

#include <vector>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using gc_util::uniform;

namespace {

// 0, 1, 2, ... as f64 in the given shape: forward values are easy to state by hand.
Tensor iota(const Shape& shape) {
  return arange(0, static_cast<double>(shape_numel(shape)), 1, DType::f64).reshape(shape);
}

}  // namespace

TEST_CASE("reshape gradients, with -1", "[array][gradcheck]") {
  struct Case {
    Shape x, target, out;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4}, {-1, 4}, {6, 4}},   {{2, 3, 4}, {4, -1}, {4, 6}}, {{2, 3, 4}, {-1}, {24}},
      {{2, 3, 4}, {2, 1, -1}, {2, 1, 12}}, {{6}, {3, 2}, {3, 2}},   {{}, {1}, {1}},
      {{1}, {}, {}},                  {{}, {-1}, {1}},              {{1, 4}, {4, -1}, {4, 1}},
  };
  std::uint64_t seed = 1;
  for (const Case& c : cases) {
    INFO(shape_str(c.x) << " -> " << shape_str(c.target));
    const Tensor x = uniform(c.x, seed++);
    auto fn = [&c](const Variables& v) -> Variables { return {F::reshape(v[0], c.target)}; };
    REQUIRE(fn({Variable(x)})[0].shape() == c.out);
    REQUIRE_GRADCHECK(fn, {x});
  }
  const Variable y = F::reshape(Variable(iota({2, 3})), {3, -1});
  REQUIRE(y.shape() == Shape{3, 2});
  REQUIRE_NEAR_VALUES(y.data(), {0, 1, 2, 3, 4, 5});
}

TEST_CASE("expand_dims and squeeze gradients", "[array][gradcheck]") {
  const Tensor x = uniform({2, 3}, 10);
  for (std::int64_t axis : {0, 1, 2, -1, -3}) {
    INFO("expand_dims axis " << axis);
    REQUIRE_GRADCHECK([axis](const Variables& v) -> Variables { return {F::expand_dims(v[0], axis)}; }, {x});
  }
  REQUIRE(F::expand_dims(Variable(x), 0).shape() == Shape{1, 2, 3});
  REQUIRE(F::expand_dims(Variable(x), 1).shape() == Shape{2, 1, 3});
  REQUIRE(F::expand_dims(Variable(x), -1).shape() == Shape{2, 3, 1});
  const Tensor s = uniform({}, 11);
  REQUIRE(F::expand_dims(Variable(s), 0).shape() == Shape{1});
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::expand_dims(v[0], 0)}; }, {s});

  const Tensor a = uniform({1, 3}, 12);
  const Tensor b = uniform({2, 1}, 13);
  const Tensor c = uniform({1}, 14);
  const Tensor d = uniform({2, 1, 3}, 15);
  REQUIRE(F::squeeze(Variable(a), 0).shape() == Shape{3});
  REQUIRE(F::squeeze(Variable(b), -1).shape() == Shape{2});
  REQUIRE(F::squeeze(Variable(c), 0).shape() == Shape{});
  REQUIRE(F::squeeze(Variable(d), 1).shape() == Shape{2, 3});
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::squeeze(v[0], 0)}; }, {a});
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::squeeze(v[0], -1)}; }, {b});
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::squeeze(v[0], 0)}; }, {c});
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::squeeze(v[0], 1)}; }, {d});
  // Round trip.
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::squeeze(F::expand_dims(v[0], 1), 1)}; }, {x});
}

TEST_CASE("transpose gradients with permutations", "[array][gradcheck]") {
  struct Case {
    Shape x;
    std::vector<std::int64_t> axes;
    Shape out;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4}, {}, {4, 3, 2}},       {{2, 3, 4}, {1, 2, 0}, {3, 4, 2}}, {{2, 3, 4}, {2, 0, 1}, {4, 2, 3}},
      {{2, 3, 4}, {0, 2, 1}, {2, 4, 3}}, {{2, 3, 4}, {0, 1, 2}, {2, 3, 4}}, {{2, 3}, {1, 0}, {3, 2}},
      {{2, 3}, {}, {3, 2}},             {{5}, {}, {5}},                    {{}, {}, {}},
      {{1, 3}, {}, {3, 1}},             {{2, 3, 4, 1}, {3, 1, 0, 2}, {1, 3, 2, 4}},
      {{2, 3, 4}, {-1, 0, 1}, {4, 2, 3}},  // negative axes
  };
  std::uint64_t seed = 20;
  for (const Case& c : cases) {
    INFO(shape_str(c.x) << " axes " << shape_str(c.axes));
    const Tensor x = uniform(c.x, seed++);
    auto fn = [&c](const Variables& v) -> Variables { return {F::transpose(v[0], c.axes)}; };
    REQUIRE(fn({Variable(x)})[0].shape() == c.out);
    REQUIRE_GRADCHECK(fn, {x});
  }
  // [[0,1,2],[3,4,5]]^T
  REQUIRE_NEAR_VALUES(F::transpose(Variable(iota({2, 3}))).data(), {0, 3, 1, 4, 2, 5});
  // [2, 3, 4] -> axes {1, 2, 0}: y[j, k, i] = x[i, j, k] = 12 i + 4 j + k.
  const Variable y = F::transpose(Variable(iota({2, 3, 4})), {1, 2, 0});
  std::vector<double> want;
  for (int j = 0; j < 3; ++j)
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < 2; ++i) want.push_back(12 * i + 4 * j + k);
  REQUIRE_NEAR_VALUES(y.data(), want);
}

TEST_CASE("broadcast_to gradients", "[array][gradcheck]") {
  struct Case {
    Shape x, target;
  };
  const std::vector<Case> cases = {
      {{3}, {2, 3}}, {{2, 1}, {2, 3}}, {{}, {2, 3}}, {{1, 3}, {4, 2, 3}}, {{2, 3}, {2, 3}}, {{1}, {5}},
      {{2, 1, 3}, {2, 4, 3}}, {{}, {}},
  };
  std::uint64_t seed = 40;
  for (const Case& c : cases) {
    INFO(shape_str(c.x) << " -> " << shape_str(c.target));
    const Tensor x = uniform(c.x, seed++);
    auto fn = [&c](const Variables& v) -> Variables { return {F::broadcast_to(v[0], c.target)}; };
    REQUIRE(fn({Variable(x)})[0].shape() == c.target);
    REQUIRE_GRADCHECK(fn, {x});
  }
  Variable x(gc_util::f64({1, 2}, {2, 1}), true);
  const Variable y = F::broadcast_to(x, {2, 3});
  REQUIRE_NEAR_VALUES(y.data(), {1, 1, 1, 2, 2, 2});
  F::sum(y).backward();
  REQUIRE_NEAR_VALUES(x.grad(), {3, 3});
}

TEST_CASE("concat gradients along axis 0 and 1 with different extents", "[array][gradcheck]") {
  std::uint64_t seed = 60;
  SECTION("axis 0") {
    const Tensor a = uniform({2, 3}, seed++), b = uniform({4, 3}, seed++), c = uniform({1, 3}, seed++);
    auto fn = [](const Variables& v) -> Variables { return {F::concat(v, 0)}; };
    REQUIRE(fn({Variable(a), Variable(b), Variable(c)})[0].shape() == Shape{7, 3});
    REQUIRE_GRADCHECK(fn, {a, b, c});
    REQUIRE_GRADCHECK(fn, {a, b});
  }
  SECTION("axis 1, the default") {
    const Tensor a = uniform({2, 1}, seed++), b = uniform({2, 4}, seed++), c = uniform({2, 2}, seed++);
    auto fn = [](const Variables& v) -> Variables { return {F::concat(v)}; };
    REQUIRE(fn({Variable(a), Variable(b), Variable(c)})[0].shape() == Shape{2, 7});
    REQUIRE_GRADCHECK(fn, {a, b, c});
  }
  SECTION("3-D along axis -1 and 1, 1-D, a single input") {
    const Tensor a = uniform({2, 3, 2}, seed++), b = uniform({2, 3, 5}, seed++);
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::concat(v, -1)}; }, {a, b});
    const Tensor c = uniform({2, 1, 2}, seed++);
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::concat(v, 1)}; }, {a, c});
    const Tensor p = uniform({3}, seed++), q = uniform({1}, seed++);
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::concat(v, 0)}; }, {p, q});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::concat(v, 0)}; }, {p});
  }
  SECTION("an input of extent 0 along the axis") {
    const Tensor a = uniform({2, 0}, seed++), b = uniform({2, 3}, seed++);
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::concat(v, 1)}; }, {a, b});
  }
  SECTION("the same variable twice") {
    const Tensor a = uniform({2, 3}, seed++);
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::concat({v[0], v[0]}, 0)}; }, {a});
  }
  SECTION("forward values, and a constant input") {
    Variable a(iota({2, 2}), true);
    const Variable b(gc_util::f64({10, 11}, {2, 1}));
    const Variable y = F::concat({a, b}, 1);
    REQUIRE(y.shape() == Shape{2, 3});
    REQUIRE_NEAR_VALUES(y.data(), {0, 1, 10, 2, 3, 11});
    F::sum(F::mul(y, Variable(gc_util::f64({1, 2, 3, 4, 5, 6}, {2, 3})))).backward();
    REQUIRE_NEAR_VALUES(a.grad(), {1, 2, 4, 5});
    REQUIRE_FALSE(b.grad().defined());
  }
}

TEST_CASE("stack gradients", "[array][gradcheck]") {
  const Tensor a = uniform({2, 3}, 80), b = uniform({2, 3}, 81), c = uniform({2, 3}, 82);
  for (std::int64_t axis : {0, 1, 2, -1}) {
    INFO("axis " << axis);
    auto fn = [axis](const Variables& v) -> Variables { return {F::stack(v, axis)}; };
    REQUIRE_GRADCHECK(fn, {a, b, c});
  }
  REQUIRE(F::stack({Variable(a), Variable(b), Variable(c)}, 0).shape() == Shape{3, 2, 3});
  REQUIRE(F::stack({Variable(a), Variable(b), Variable(c)}, 1).shape() == Shape{2, 3, 3});
  REQUIRE(F::stack({Variable(a), Variable(b), Variable(c)}, -1).shape() == Shape{2, 3, 3});
  // Scalars stack into a vector; a single input gains an axis of extent 1.
  const Tensor s = uniform({}, 83), t = uniform({}, 84);
  REQUIRE(F::stack({Variable(s), Variable(t)}).shape() == Shape{2});
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::stack(v)}; }, {s, t});
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::stack(v, 1)}; }, {a});

  const Variable y = F::stack({Variable(gc_util::f64({1, 2}, {2})), Variable(gc_util::f64({3, 4}, {2}))}, 1);
  REQUIRE(y.shape() == Shape{2, 2});
  REQUIRE_NEAR_VALUES(y.data(), {1, 3, 2, 4});
}

TEST_CASE("split_axis gradients by sections and by indices, with outputs unused", "[array][gradcheck]") {
  SECTION("three sections along axis 0, the middle one unused") {
    const Tensor x = uniform({6, 2}, 100);
    auto fn = [](const Variables& v) -> Variables {
      const Variables ys = F::split_axis(v[0], 3, 0);
      REQUIRE(ys.size() == 3);
      return {ys[0], ys[2]};
    };
    REQUIRE_GRADCHECK(fn, {x});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return F::split_axis(v[0], 3, 0); }, {x});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::split_axis(v[0], 2, -1)[1]}; }, {x});
  }
  SECTION("by indices along axis 1, only one piece in the loss") {
    const Tensor x = uniform({2, 6}, 101);
    auto fn = [](const Variables& v) -> Variables {
      const Variables ys = F::split_axis(v[0], std::vector<std::int64_t>{1, 4}, 1);
      REQUIRE(ys.size() == 3);
      REQUIRE(ys[0].shape() == Shape{2, 1});
      REQUIRE(ys[1].shape() == Shape{2, 3});
      REQUIRE(ys[2].shape() == Shape{2, 2});
      return {ys[1]};
    };
    REQUIRE_GRADCHECK(fn, {x});
    REQUIRE_GRADCHECK(
        [](const Variables& v) -> Variables { return F::split_axis(v[0], std::vector<std::int64_t>{1, 4}, 1); }, {x});
  }
  SECTION("pieces combined again, with an empty piece and batch 1") {
    const Tensor x = uniform({1, 5, 2}, 102);
    auto fn = [](const Variables& v) -> Variables {
      const Variables ys = F::split_axis(v[0], std::vector<std::int64_t>{2, 2, 4}, 1);
      REQUIRE(ys.size() == 4);
      REQUIRE(ys[1].shape() == Shape{1, 0, 2});
      return {F::mul(ys[0], ys[2]), ys[1], F::sum(ys[3])};
    };
    REQUIRE_GRADCHECK(fn, {x});
  }
  SECTION("by hand: an unused piece gets zero gradient") {
    Variable x(iota({4, 2}), true);
    const Variables ys = F::split_axis(x, std::vector<std::int64_t>{1}, 0);
    REQUIRE(ys.size() == 2);
    REQUIRE_NEAR_VALUES(ys[0].data(), {0, 1});
    REQUIRE_NEAR_VALUES(ys[1].data(), {2, 3, 4, 5, 6, 7});
    F::sum(F::mul(ys[1], 2.0)).backward();
    REQUIRE_NEAR_VALUES(x.grad(), {0, 0, 2, 2, 2, 2, 2, 2});
  }
}

TEST_CASE("get_item gradients with integers, slices, negative steps and new axes", "[array][gradcheck]") {
  struct Case {
    const char* name;
    IndexList indices;
    Shape out;
  };
  const std::vector<Case> cases = {
      {"x[1]", {Index::at(1)}, {5}},
      {"x[-1]", {Index::at(-1)}, {5}},
      {"x[1, 3]", {Index::at(1), Index::at(3)}, {}},
      {"x[-1, 1:4]", {Index::at(-1), Index::range(1, 4)}, {3}},
      {"x[:, ::-1]", {Index::all(), Index::from(4, -1)}, {4, 5}},
      {"x[::-1]", {Index::until(-5, -1)}, {4, 5}},
      {"x[3:0:-2]", {Index::range(3, 0, -2)}, {2, 5}},
      {"x[:, -1:-6:-2]", {Index::all(), Index::range(-1, -6, -2)}, {4, 3}},
      {"x[None, 2]", {Index::new_axis(), Index::at(2)}, {1, 5}},
      {"x[:, None, 0:5:2]", {Index::all(), Index::new_axis(), Index::range(0, 5, 2)}, {4, 1, 3}},
      {"x[1:3, None]", {Index::range(1, 3), Index::new_axis()}, {2, 1, 5}},
      {"x[-10:10]", {Index::range(-10, 10)}, {4, 5}},  // out-of-range bounds clamp
      {"x[:-1, 2:]", {Index::until(-1), Index::from(2)}, {3, 3}},
      {"x[2:3, -2]", {Index::range(2, 3), Index::at(-2)}, {1}},
      {"x[2:2]", {Index::range(2, 2)}, {0, 5}},  // empty selection: zero gradient
      {"x[1:3:5, ::2]", {Index::range(1, 3, 5), Index::until(5, 2)}, {1, 3}},
  };
  std::uint64_t seed = 120;
  for (const Case& c : cases) {
    INFO(c.name);
    const Tensor x = uniform({4, 5}, seed++);
    auto fn = [&c](const Variables& v) -> Variables { return {F::get_item(v[0], c.indices)}; };
    REQUIRE(fn({Variable(x)})[0].shape() == c.out);
    REQUIRE_GRADCHECK(fn, {x});
  }
  SECTION("3-D, with the trailing axes implied") {
    const Tensor x = uniform({2, 3, 4}, 140);
    REQUIRE_GRADCHECK(
        [](const Variables& v) -> Variables { return {F::get_item(v[0], {Index::at(1), Index::from(2, -1)})}; }, {x});
    REQUIRE_GRADCHECK(
        [](const Variables& v) -> Variables {
          return {F::get_item(v[0], {Index::all(), Index::new_axis(), Index::at(-1), Index::range(3, -5, -1)})};
        },
        {x});
  }
  SECTION("two overlapping selections of the same variable add up") {
    const Tensor x = uniform({4, 5}, 141);
    auto fn = [](const Variables& v) -> Variables {
      return {F::add(F::get_item(v[0], {Index::range(0, 3)}), F::get_item(v[0], {Index::from(2, -1)}))};
    };
    REQUIRE_GRADCHECK(fn, {x});
  }
}

TEST_CASE("get_item forward values and gradients by hand", "[array]") {
  Variable x(iota({3, 4}), true);  // [[0,1,2,3],[4,5,6,7],[8,9,10,11]]
  REQUIRE_NEAR_VALUES(F::get_item(x, {Index::at(1)}).data(), {4, 5, 6, 7});
  REQUIRE_NEAR_VALUES(F::get_item(x, {Index::all(), Index::from(3, -1)}).data(),
                      {3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8});
  REQUIRE_NEAR_VALUES(F::get_item(x, {Index::until(-4, -2), Index::at(-1)}).data(), {11, 3});
  REQUIRE_NEAR_VALUES(F::get_item(x, {Index::range(0, 3, 2), Index::range(1, 4, 2)}).data(), {1, 3, 9, 11});
  const Variable y = F::get_item(x, {Index::new_axis(), Index::at(2), Index::until(2)});
  REQUIRE(y.shape() == Shape{1, 2});
  REQUIRE_NEAR_VALUES(y.data(), {8, 9});

  // x[::-2, 1] weighted by [1, 10]: rows 2 and 0 of column 1.
  F::sum(F::mul(F::get_item(x, {Index::until(-4, -2), Index::at(1)}), Variable(gc_util::f64({1, 10}, {2}))))
      .backward();
  REQUIRE_NEAR_VALUES(x.grad(), {0, 10, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0});
}

TEST_CASE("array functions of constants record no graph", "[array]") {
  const Variable c(iota({2, 3}));
  REQUIRE_FALSE(F::reshape(c, {3, 2}).requires_grad());
  REQUIRE_FALSE(F::transpose(c).requires_grad());
  REQUIRE_FALSE(F::get_item(c, {Index::at(0)}).requires_grad());
  for (const Variable& y : F::split_axis(c, 3, 1)) REQUIRE_FALSE(y.requires_grad());
  // Mixed: only the variable that requires grad gets one.
  Variable x(iota({2, 3}), true);
  F::sum(F::stack({x, c}, 0)).backward();
  REQUIRE_NEAR_VALUES(x.grad(), {1, 1, 1, 1, 1, 1});
  REQUIRE_FALSE(c.grad().defined());
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::stack(v, 1), F::concat(v, 0)}; },
                    {uniform({2, 3}, 160), uniform({2, 3}, 161)}, GradcheckOptions{1e-3, 1e-5, 1e-4, 0, {true, false}});
}

TEST_CASE("array functions reject bad shapes and axes", "[array][errors]") {
  const Variable a(uniform({2, 3}, 200), true);
  const Variable b(uniform({2, 4}, 201), true);
  // concat along axis 0 needs equal extents on axis 1.
  REQUIRE_THROWS_AS(F::concat({a, b}, 0), Error);
  REQUIRE_THROWS_WITH(F::concat({a, b}, 0), Contains("concat") && Contains("[2, 4]"));
  REQUIRE_NOTHROW(F::concat({a, b}, 1));
  REQUIRE_THROWS_AS(F::concat({a, Variable(uniform({2, 3, 1}, 202))}, 0), Error);
  REQUIRE_THROWS_AS(F::concat({a, b}, 2), Error);
  REQUIRE_THROWS_AS(F::concat({}, 0), Error);
  REQUIRE_THROWS_AS(F::stack({a, b}), Error);
  REQUIRE_THROWS_WITH(F::stack({a, b}), Contains("stack"));
  REQUIRE_THROWS_AS(F::stack({}), Error);
  REQUIRE_THROWS_AS(F::reshape(a, {4, -1}), Error);
  REQUIRE_THROWS_AS(F::reshape(a, {5}), Error);
  REQUIRE_THROWS_WITH(F::reshape(a, {5}), Contains("[2, 3]"));
  REQUIRE_THROWS_AS(F::squeeze(a, 0), Error);
  REQUIRE_THROWS_WITH(F::squeeze(a, 0), Contains("extent 2"));
  REQUIRE_THROWS_AS(F::expand_dims(a, 4), Error);
  REQUIRE_THROWS_AS(F::transpose(a, {0, 0}), Error);
  REQUIRE_THROWS_AS(F::transpose(a, {0, 1, 2}), Error);
  REQUIRE_THROWS_AS(F::broadcast_to(a, {2, 4}), Error);
  REQUIRE_THROWS_AS(F::broadcast_to(a, {3}), Error);
  REQUIRE_THROWS_AS(F::split_axis(a, 2, 1), Error);  // 3 is not divisible by 2
  REQUIRE_THROWS_AS(F::split_axis(a, 0, 1), Error);
  REQUIRE_THROWS_AS(F::split_axis(a, 1, 2), Error);
  REQUIRE_THROWS_AS(F::get_item(a, {Index::at(2)}), Error);
  REQUIRE_THROWS_WITH(F::get_item(a, {Index::at(2)}), Contains("index 2"));
  REQUIRE_THROWS_AS(F::get_item(a, {Index::at(0), Index::at(0), Index::at(0)}), Error);
  REQUIRE_THROWS_AS(F::get_item(a, {Index::range(0, 2, 0)}), Error);
}

TEST_CASE("array functions in f32 agree with f64", "[array][f32]") {
  const Tensor x = uniform({2, 3, 4}, 300);
  gc_util::check_f32_against_f64(
      [](const Variables& v) -> Variables {
        return {F::transpose(v[0], {2, 0, 1}), F::get_item(v[0], {Index::at(1), Index::from(2, -1)}),
                F::broadcast_to(F::sum(v[0], {1}, true), {2, 3, 4})};
      },
      {x});
  gc_util::check_f32_against_f64(
      [](const Variables& v) -> Variables {
        const Variables pieces = F::split_axis(v[0], 2, 2);
        return {F::concat({pieces[1], v[0]}, 2), F::stack({pieces[0], pieces[1]}, 1)};
      },
      {x});
}
