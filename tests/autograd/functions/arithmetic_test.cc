// Gradients and behaviour of autograd/functions/arithmetic.h: the broadcasting binary
// functions, the scalar variants, pow, and the operators.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using gc_util::away_from_zero;
using gc_util::uniform;

namespace {

using BinaryFn = std::function<Variable(const Variable&, const Variable&)>;

struct NamedBinary {
  const char* name;
  BinaryFn fn;
  bool positive_denominator;  // keep b away from zero (div)
};

const std::vector<NamedBinary>& binaries() {
  static const std::vector<NamedBinary> list = {
      {"add", [](const Variable& a, const Variable& b) { return F::add(a, b); }, false},
      {"sub", [](const Variable& a, const Variable& b) { return F::sub(a, b); }, false},
      {"mul", [](const Variable& a, const Variable& b) { return F::mul(a, b); }, false},
      {"div", [](const Variable& a, const Variable& b) { return F::div(a, b); }, true},
  };
  return list;
}

struct ShapePair {
  Shape a, b;
};

// Same shapes, batch 1, trailing-axis broadcast, broadcast on both sides, scalars on either
// side, and a size-1 vector against a matrix.
const std::vector<ShapePair>& shape_pairs() {
  static const std::vector<ShapePair> list = {
      {{2, 3}, {2, 3}}, {{1, 4}, {1, 4}}, {{3, 4}, {4}},    {{4}, {3, 4}},   {{2, 1, 4}, {3, 1}},
      {{3, 1}, {2, 1, 4}}, {{}, {2, 3}},  {{2, 3}, {}},     {{}, {}},        {{1}, {2, 5}},
      {{2, 3, 1}, {1, 3, 4}}, {{5}, {5}},
  };
  return list;
}

}  // namespace

TEST_CASE("binary arithmetic gradients with broadcasting", "[arithmetic][gradcheck]") {
  std::uint64_t seed = 1;
  for (const NamedBinary& op : binaries()) {
    for (const ShapePair& shapes : shape_pairs()) {
      INFO(op.name << " " << shape_str(shapes.a) << " with " << shape_str(shapes.b));
      const Tensor a = uniform(shapes.a, seed++);
      // Division: |b| in [0.5, 1.5] keeps 1/b and a/b^2 well conditioned for the differences.
      const Tensor b = op.positive_denominator ? away_from_zero(shapes.b, seed++, 0.5, 1.5) : uniform(shapes.b, seed++);
      auto fn = [&](const Variables& v) -> Variables { return {op.fn(v[0], v[1])}; };
      REQUIRE_GRADCHECK(fn, {a, b});
    }
  }
}

TEST_CASE("binary arithmetic forward values broadcast like NumPy", "[arithmetic]") {
  const Variable a(gc_util::f64({1, 2, 3, 4, 5, 6}, {2, 3}));
  const Variable b(gc_util::f64({10, 20, 30}, {3}));
  const Variable c(gc_util::f64({2, 4}, {2, 1}));
  const Variable s(gc_util::f64({0.5}, {}));

  const Variable sum = F::add(a, b);
  REQUIRE(sum.shape() == Shape{2, 3});
  REQUIRE_NEAR_VALUES(sum.data(), {11, 22, 33, 14, 25, 36});
  REQUIRE_NEAR_VALUES(F::sub(a, c).data(), {-1, 0, 1, 0, 1, 2});
  REQUIRE_NEAR_VALUES(F::mul(c, b).data(), {20, 40, 60, 40, 80, 120});
  REQUIRE_NEAR_VALUES(F::div(a, c).data(), {0.5, 1, 1.5, 1, 1.25, 1.5});
  const Variable scaled = F::mul(s, a);
  REQUIRE(scaled.shape() == Shape{2, 3});
  REQUIRE_NEAR_VALUES(scaled.data(), {0.5, 1, 1.5, 2, 2.5, 3});
  // [2, 1] with [3] broadcasts to [2, 3].
  REQUIRE(F::add(c, b).shape() == Shape{2, 3});
  REQUIRE_NEAR_VALUES(F::add(c, b).data(), {12, 22, 32, 14, 24, 34});
}

TEST_CASE("unary and scalar arithmetic gradients", "[arithmetic][gradcheck]") {
  const std::vector<Shape> shapes = {{2, 3}, {}, {1}, {1, 5}, {2, 1, 3}};
  std::uint64_t seed = 100;
  for (const Shape& shape : shapes) {
    INFO("shape " << shape_str(shape));
    const Tensor x = uniform(shape, seed++);
    const Tensor nz = away_from_zero(shape, seed++, 0.5, 1.5);
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::neg(v[0])}; }, {x});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::add(v[0], 2.5)}; }, {x});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::add(v[0], 0.0)}; }, {x});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::mul(v[0], -3.0)}; }, {x});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::mul(v[0], 1.0)}; }, {x});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::mul(v[0], 0.0)}; }, {x});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::rsub(1.5, v[0])}; }, {x});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::rdiv(2.0, v[0])}; }, {nz});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::rdiv(-0.5, v[0])}; }, {nz});
  }
}

TEST_CASE("unary and scalar arithmetic forward values", "[arithmetic]") {
  const Variable x(gc_util::f64({-2, 0.5, 4}, {3}));
  REQUIRE_NEAR_VALUES(F::neg(x).data(), {2, -0.5, -4});
  REQUIRE_NEAR_VALUES(F::add(x, 1.5).data(), {-0.5, 2, 5.5});
  REQUIRE_NEAR_VALUES(F::mul(x, -2.0).data(), {4, -1, -8});
  REQUIRE_NEAR_VALUES(F::rsub(1.0, x).data(), {3, 0.5, -3});
  REQUIRE_NEAR_VALUES(F::rdiv(2.0, x).data(), {-1, 4, 0.5});
  REQUIRE_NEAR_VALUES(F::pow(x, 2.0).data(), {4, 0.25, 16});
  REQUIRE_NEAR_VALUES(F::pow(x, 3.0).data(), {-8, 0.125, 64});
  REQUIRE_NEAR_VALUES(F::pow(F::neg(F::neg(x)), 1.0).data(), {-2, 0.5, 4});
  const Variable p(gc_util::f64({0.25, 4, 9}, {3}));
  REQUIRE_NEAR_VALUES(F::pow(p, 0.5).data(), {0.5, 2, 3});
  REQUIRE_NEAR_VALUES(F::pow(p, -1.0).data(), {4, 0.25, 1.0 / 9});
  REQUIRE_NEAR_VALUES(F::pow(p, 0.0).data(), {1, 1, 1});
}

TEST_CASE("pow gradients for several exponents", "[arithmetic][gradcheck]") {
  // Any real exponent on positive inputs (x in [0.5, 2]: x^(p-1) stays moderate).
  for (double p : {2.0, 3.0, 1.0, 0.0, 0.5, -0.5, -1.0, -2.0, 1.5, 2.7, -3.3}) {
    INFO("exponent " << p);
    const Tensor x = uniform({3, 4}, 200, 0.5, 2.0);
    REQUIRE_GRADCHECK([p](const Variables& v) -> Variables { return {F::pow(v[0], p)}; }, {x});
    const Tensor s = uniform({}, 201, 0.5, 2.0);
    REQUIRE_GRADCHECK([p](const Variables& v) -> Variables { return {F::pow(v[0], p)}; }, {s});
  }
  // Integer exponents are defined for negative inputs too (kept away from 0 for the negative ones).
  for (double p : {2.0, 3.0, 4.0, -1.0, -2.0}) {
    INFO("integer exponent " << p << " on signed inputs");
    const Tensor x = away_from_zero({2, 3}, 202, 0.5, 1.5);
    REQUIRE_GRADCHECK([p](const Variables& v) -> Variables { return {F::pow(v[0], p)}; }, {x});
  }
}

TEST_CASE("the operators build the same graph as the functions", "[arithmetic][gradcheck]") {
  const Tensor a = uniform({2, 3}, 300);
  const Tensor b = away_from_zero({3}, 301, 0.5, 1.5);
  const Tensor c = away_from_zero({2, 1}, 302, 0.5, 1.5);
  auto fn = [](const Variables& v) -> Variables {
    const Variable& x = v[0];
    const Variable& y = v[1];
    const Variable& z = v[2];
    return {x + y, x - z, x * y, x / z, -x, x + 2.0, 2.0 + x, x - 1.5, 1.5 - x, x * 3.0, 3.0 * x, x / 4.0,
            4.0 / y, (x * y - z) / (y + 3.0)};
  };
  REQUIRE_GRADCHECK(fn, {a, b, c});

  const Variable x(gc_util::f64({1, 2}, {2}));
  REQUIRE_NEAR_VALUES((x / 4.0).data(), {0.25, 0.5});
  REQUIRE_NEAR_VALUES((4.0 / x).data(), {4, 2});
  REQUIRE_NEAR_VALUES((1.5 - x).data(), {0.5, -0.5});
  REQUIRE_NEAR_VALUES((x - 1.5).data(), {-0.5, 0.5});
}

TEST_CASE("a variable used twice accumulates both gradients", "[arithmetic][gradcheck]") {
  const Tensor x = uniform({2, 3}, 400);
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::mul(v[0], v[0])}; }, {x});
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::sub(v[0], v[0])}; }, {x});
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::add(F::mul(v[0], v[0]), v[0])}; }, {x});
  const Tensor nz = away_from_zero({2, 3}, 401, 0.5, 1.5);
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::div(v[0], v[0])}; }, {nz});

  // Explicitly: d/dx sum(x * x + x) = 2x + 1.
  Variable v(gc_util::f64({1, -2, 3}, {3}), true);
  F::sum(F::add(F::mul(v, v), v)).backward();
  REQUIRE_NEAR_VALUES(v.grad(), {3, -3, 7});
}

TEST_CASE("constant operands get no gradient and do not disturb the others", "[arithmetic]") {
  SECTION("mul by a constant variable, with broadcasting") {
    Variable x(gc_util::f64({1, 2, 3, 4, 5, 6}, {2, 3}), true);
    const Variable c(gc_util::f64({2, -1, 0.5}, {3}));  // requires_grad = false
    const Variable y = F::mul(x, c);
    REQUIRE(y.requires_grad());
    F::sum(y).backward();
    REQUIRE_FALSE(c.grad().defined());
    REQUIRE_NEAR_VALUES(x.grad(), {2, -1, 0.5, 2, -1, 0.5});
  }
  SECTION("the constant on the left, the variable broadcast") {
    const Variable c(gc_util::f64({1, 2, 3, 4, 5, 6}, {2, 3}));
    Variable x(gc_util::f64({2, -1, 0.5}, {3}), true);
    F::sum(F::mul(c, x)).backward();
    REQUIRE_FALSE(c.grad().defined());
    REQUIRE_NEAR_VALUES(x.grad(), {5, 7, 9});
  }
  SECTION("div by a constant, and a constant divided by a variable") {
    Variable x(gc_util::f64({1, 2}, {2}), true);
    const Variable c(gc_util::f64({4, -2}, {2}));
    F::sum(F::div(x, c)).backward();
    REQUIRE_FALSE(c.grad().defined());
    REQUIRE_NEAR_VALUES(x.grad(), {0.25, -0.5});
    x.cleargrad();
    F::sum(F::div(c, x)).backward();  // d(c/x)/dx = -c / x^2
    REQUIRE_FALSE(c.grad().defined());
    REQUIRE_NEAR_VALUES(x.grad(), {-4, 0.5});
  }
  SECTION("add and sub with a constant scalar variable") {
    Variable x(gc_util::f64({1, 2, 3}, {3}), true);
    const Variable c(gc_util::f64({10}, {}));
    F::sum(F::sub(c, x)).backward();
    REQUIRE_FALSE(c.grad().defined());
    REQUIRE_NEAR_VALUES(x.grad(), {-1, -1, -1});
  }
  SECTION("nothing requires grad: no graph is recorded") {
    const Variable a(gc_util::f64({1, 2}, {2}));
    const Variable b(gc_util::f64({3, 4}, {2}));
    const Variable y = F::mul(a, b);
    REQUIRE_FALSE(y.requires_grad());
    REQUIRE(y.is_leaf());
    REQUIRE_NEAR_VALUES(y.data(), {3, 8});
  }
  SECTION("gradcheck with each operand held constant in turn") {
    const Tensor a = uniform({3, 4}, 500);
    const Tensor b = away_from_zero({4}, 501, 0.5, 1.5);
    for (int constant = 0; constant < 2; ++constant) {
      GradcheckOptions options;
      options.no_grad = {constant == 0, constant == 1};
      for (const NamedBinary& op : binaries()) {
        INFO(op.name << " with input " << constant << " constant");
        REQUIRE_GRADCHECK([&](const Variables& v) -> Variables { return {op.fn(v[0], v[1])}; }, {a, b}, options);
      }
    }
  }
}

TEST_CASE("binary arithmetic rejects mismatched dtypes and shapes", "[arithmetic][errors]") {
  const Variable a32(gc_util::uniform({2, 3}, 600, -1, 1, DType::f32), true);
  const Variable b64(gc_util::uniform({2, 3}, 601), true);
  REQUIRE_THROWS_AS(F::add(a32, b64), Error);
  REQUIRE_THROWS_WITH(F::add(a32, b64), Contains("different dtypes") && Contains("f32") && Contains("f64"));
  REQUIRE_THROWS_WITH(F::sub(a32, b64), Contains("different dtypes"));
  REQUIRE_THROWS_WITH(F::mul(b64, a32), Contains("different dtypes"));
  REQUIRE_THROWS_WITH(F::div(b64, a32), Contains("different dtypes"));

  const Variable c(gc_util::uniform({2, 4}, 602), true);
  REQUIRE_THROWS_AS(F::add(b64, c), Error);
  REQUIRE_THROWS_WITH(F::add(b64, c), Contains("[2, 3]") && Contains("[2, 4]"));
  REQUIRE_THROWS_WITH(F::mul(b64, c), Contains("[2, 3]") && Contains("[2, 4]"));
}

TEST_CASE("arithmetic in f32 agrees with f64", "[arithmetic][f32]") {
  const Tensor a = uniform({3, 4}, 700);
  const Tensor b = away_from_zero({4}, 701, 0.5, 1.5);
  const Tensor p = uniform({3, 4}, 702, 0.5, 2.0);
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::add(v[0], v[1])}; }, {a, b});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::mul(v[0], v[1])}; }, {a, b});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::div(v[0], v[1])}; }, {a, b});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::pow(v[0], 1.5)}; }, {p});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::rdiv(3.0, v[0])}; }, {p});
}
