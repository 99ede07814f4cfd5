// Gradients and behaviour of autograd/functions/linalg.h: matmul (1-D promotion, batch
// broadcasting, transpose flags) and linear.
#include <catch2/catch.hpp>

#include <vector>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using gc_util::uniform;

namespace {

struct MatmulCase {
  Shape a, b, out;
  bool ta = false, tb = false;
};

}  // namespace

TEST_CASE("matmul gradients over 1-D, 2-D and batched operands", "[linalg][gradcheck]") {
  const std::vector<MatmulCase> cases = {
      {{3, 4}, {4, 5}, {3, 5}},
      {{1, 4}, {4, 1}, {1, 1}},              // batch 1, one output column
      {{4}, {4, 5}, {5}},                    // 1-D @ 2-D
      {{3, 4}, {4}, {3}},                    // 2-D @ 1-D
      {{4}, {4}, {}},                        // 1-D @ 1-D: a scalar
      {{2, 3, 4}, {2, 4, 5}, {2, 3, 5}},     // batched
      {{2, 3, 4}, {4, 5}, {2, 3, 5}},        // batched @ matrix (b broadcast over the batch)
      {{3, 4}, {2, 4, 5}, {2, 3, 5}},        // matrix @ batched
      {{2, 1, 3, 4}, {3, 4, 5}, {2, 3, 3, 5}},  // batch axes broadcast against each other
      {{1, 3, 4}, {2, 4, 2}, {2, 3, 2}},     // batch extent 1 broadcast
      {{2, 3, 4}, {4}, {2, 3}},              // batched @ 1-D
      {{4}, {2, 4, 5}, {2, 5}},              // 1-D @ batched
      {{4}, {1, 4, 5}, {1, 5}},              // 1-D @ batched with batch 1
  };
  std::uint64_t seed = 1;
  for (const MatmulCase& c : cases) {
    INFO(shape_str(c.a) << " @ " << shape_str(c.b));
    const Tensor a = uniform(c.a, seed++);
    const Tensor b = uniform(c.b, seed++);
    auto fn = [](const Variables& v) -> Variables { return {F::matmul(v[0], v[1])}; };
    REQUIRE(fn({Variable(a), Variable(b)})[0].shape() == c.out);
    REQUIRE_GRADCHECK(fn, {a, b});
  }
}

TEST_CASE("matmul gradients with all four transpose-flag combinations", "[linalg][gradcheck]") {
  // op(a) is [3, 4] and op(b) is [4, 5] in every case; the stored operands are transposed where
  // the flag is set. The batched cases also broadcast the batch axes.
  const std::vector<MatmulCase> cases = {
      {{3, 4}, {4, 5}, {3, 5}, false, false},
      {{4, 3}, {4, 5}, {3, 5}, true, false},
      {{3, 4}, {5, 4}, {3, 5}, false, true},
      {{4, 3}, {5, 4}, {3, 5}, true, true},
      {{2, 4, 3}, {4, 5}, {2, 3, 5}, true, false},
      {{2, 3, 4}, {1, 5, 4}, {2, 3, 5}, false, true},
      {{4, 3}, {2, 5, 4}, {2, 3, 5}, true, true},
      {{2, 1, 4, 3}, {3, 5, 4}, {2, 3, 3, 5}, true, true},
      {{1, 4, 1}, {4, 5}, {1, 1, 5}, true, false},  // batch 1, a single row
  };
  std::uint64_t seed = 100;
  for (const MatmulCase& c : cases) {
    INFO(shape_str(c.a) << (c.ta ? "^T" : "") << " @ " << shape_str(c.b) << (c.tb ? "^T" : ""));
    const Tensor a = uniform(c.a, seed++);
    const Tensor b = uniform(c.b, seed++);
    auto fn = [&c](const Variables& v) -> Variables { return {F::matmul(v[0], v[1], c.ta, c.tb)}; };
    REQUIRE(fn({Variable(a), Variable(b)})[0].shape() == c.out);
    REQUIRE_GRADCHECK(fn, {a, b});
  }
}

TEST_CASE("matmul transpose flags on a 1-D operand are ignored, as in numpy.matmul", "[linalg][gradcheck]") {
  const Tensor v = uniform({4}, 150);
  const Tensor m = uniform({4, 5}, 151);
  const Tensor mt = uniform({5, 4}, 152);
  auto left = [](const Variables& x) -> Variables { return {F::matmul(x[0], x[1], true, false)}; };
  auto right = [](const Variables& x) -> Variables { return {F::matmul(x[0], x[1], true, true)}; };
  REQUIRE(left({Variable(v), Variable(m)})[0].shape() == Shape{5});
  REQUIRE(right({Variable(m), Variable(v)})[0].shape() == Shape{5});  // m^T [5, 4] @ v
  REQUIRE(right({Variable(v), Variable(mt)})[0].shape() == Shape{5});  // v @ mt^T [4, 5]
  REQUIRE_GRADCHECK(left, {v, m});
  REQUIRE_GRADCHECK(right, {m, v});
  REQUIRE_GRADCHECK(right, {v, mt});
}

TEST_CASE("matmul forward values", "[linalg]") {
  const Variable a(gc_util::f64({1, 2, 3, 4, 5, 6}, {2, 3}));
  const Variable b(gc_util::f64({1, 0, 0, 1, 1, 1}, {3, 2}));
  REQUIRE_NEAR_VALUES(F::matmul(a, b).data(), {4, 5, 10, 11});
  // a^T @ a^T^T ... op(a) = a^T [3, 2], op(b) = b^T [2, 3].
  const Variable ab = F::matmul(a, b, true, true);
  REQUIRE(ab.shape() == Shape{3, 3});
  // a^T = [[1,4],[2,5],[3,6]], b^T = [[1,0,1],[0,1,1]]
  REQUIRE_NEAR_VALUES(ab.data(), {1, 4, 5, 2, 5, 7, 3, 6, 9});
  const Variable v(gc_util::f64({1, -1, 2}, {3}));
  REQUIRE_NEAR_VALUES(F::matmul(a, v).data(), {5, 11});
  REQUIRE_NEAR_VALUES(F::matmul(v, b).data(), {3, 1});
  const Variable dot = F::matmul(v, v);
  REQUIRE(dot.shape() == Shape{});
  REQUIRE(dot.data().item() == Approx(6));
}

TEST_CASE("matmul gradients by hand, with one operand constant", "[linalg]") {
  Variable a(gc_util::f64({1, 2, 3, 4, 5, 6}, {2, 3}), true);
  const Variable b(gc_util::f64({1, 0, 0, 1, 1, 1}, {3, 2}));
  F::sum(F::matmul(a, b)).backward();
  // d sum(a b) / da = ones[2, 2] b^T: each row is the row sums of b.
  REQUIRE_NEAR_VALUES(a.grad(), {1, 1, 2, 1, 1, 2});
  REQUIRE_FALSE(b.grad().defined());

  const Variable c(gc_util::f64({1, 2, 3, 4, 5, 6}, {2, 3}));
  Variable d(gc_util::f64({1, 0, 0, 1, 1, 1}, {3, 2}), true);
  F::sum(F::matmul(c, d)).backward();
  // d sum(c d) / dd = c^T ones[2, 2]: each row holds the column sums of c.
  REQUIRE_NEAR_VALUES(d.grad(), {5, 5, 7, 7, 9, 9});
  REQUIRE_FALSE(c.grad().defined());
}

TEST_CASE("linear gradients with and without bias", "[linalg][gradcheck]") {
  std::uint64_t seed = 200;
  for (std::int64_t n : {1, 4}) {
    INFO("batch " << n);
    const Tensor x = uniform({n, 3}, seed++);
    const Tensor W = uniform({5, 3}, seed++);
    const Tensor b = uniform({5}, seed++);
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::linear(v[0], v[1], v[2])}; }, {x, W, b});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::linear(v[0], v[1])}; }, {x, W});
  }
  SECTION("x of shape [N, 2, 3] is flattened to [N, 6]") {
    const Tensor x = uniform({4, 2, 3}, seed++);
    const Tensor W = uniform({5, 6}, seed++);
    const Tensor b = uniform({5}, seed++);
    auto with_bias = [](const Variables& v) -> Variables { return {F::linear(v[0], v[1], v[2])}; };
    REQUIRE(with_bias({Variable(x), Variable(W), Variable(b)})[0].shape() == Shape{4, 5});
    REQUIRE_GRADCHECK(with_bias, {x, W, b});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::linear(v[0], v[1])}; }, {x, W});
    const Tensor x1 = uniform({1, 2, 3}, seed++);
    REQUIRE_GRADCHECK(with_bias, {x1, W, b});
  }
  SECTION("one output unit, one input feature") {
    const Tensor x = uniform({3, 1}, seed++);
    const Tensor W = uniform({1, 1}, seed++);
    const Tensor b = uniform({1}, seed++);
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::linear(v[0], v[1], v[2])}; }, {x, W, b});
  }
}

TEST_CASE("linear forward values match x W^T + b", "[linalg]") {
  const Variable x(gc_util::f64({1, 2, 3, 4, 5, 6}, {2, 3}));
  const Variable W(gc_util::f64({1, 0, -1, 0.5, 0.5, 0.5}, {2, 3}));
  const Variable b(gc_util::f64({10, -10}, {2}));
  REQUIRE_NEAR_VALUES(F::linear(x, W, b).data(), {8, -7, 8, -2.5});
  REQUIRE_NEAR_VALUES(F::linear(x, W).data(), {-2, 3, -2, 7.5});
  // The same numbers with x given as [2, 3, 1] and as [2, 1, 3].
  REQUIRE_NEAR_VALUES(F::linear(F::reshape(x, {2, 3, 1}), W, b).data(), {8, -7, 8, -2.5});
  const Variable y = F::linear(F::reshape(x, {2, 1, 3}), W, b);
  REQUIRE(y.shape() == Shape{2, 2});
  REQUIRE_NEAR_VALUES(y.data(), {8, -7, 8, -2.5});
}

TEST_CASE("linear with constant parameters", "[linalg]") {
  SECTION("constant W and b: only x gets a gradient") {
    Variable x(gc_util::f64({1, 2, 3, 4, 5, 6}, {2, 3}), true);
    const Variable W(gc_util::f64({1, 0, -1, 0.5, 0.5, 0.5}, {2, 3}));
    const Variable b(gc_util::f64({10, -10}, {2}));
    F::sum(F::linear(x, W, b)).backward();
    REQUIRE_FALSE(W.grad().defined());
    REQUIRE_FALSE(b.grad().defined());
    REQUIRE_NEAR_VALUES(x.grad(), {1.5, 0.5, -0.5, 1.5, 0.5, -0.5});  // column sums of W
  }
  SECTION("constant x [N, 2, 2]: W and b get gradients") {
    const Variable x(gc_util::f64({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}));
    Variable W(gc_util::f64({1, 1, 1, 1}, {1, 4}), true);
    Variable b(gc_util::f64({0}, {1}), true);
    F::sum(F::linear(x, W, b)).backward();
    REQUIRE_FALSE(x.grad().defined());
    REQUIRE_NEAR_VALUES(W.grad(), {6, 8, 10, 12});
    REQUIRE_NEAR_VALUES(b.grad(), {2});
  }
  SECTION("gradcheck with each input held constant") {
    const Tensor x = uniform({3, 2, 2}, 300);
    const Tensor W = uniform({2, 4}, 301);
    const Tensor b = uniform({2}, 302);
    for (int constant = 0; constant < 3; ++constant) {
      INFO("input " << constant << " constant");
      GradcheckOptions options;
      options.no_grad = {constant == 0, constant == 1, constant == 2};
      REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::linear(v[0], v[1], v[2])}; }, {x, W, b},
                        options);
    }
  }
}

TEST_CASE("matmul and linear reject mismatched shapes", "[linalg][errors]") {
  const Variable a(uniform({3, 4}, 400), true);
  const Variable b(uniform({5, 6}, 401), true);
  REQUIRE_THROWS_AS(F::matmul(a, b), Error);
  REQUIRE_THROWS_WITH(F::matmul(a, b), Contains("inner dimensions") && Contains("[3, 4]") && Contains("[5, 6]"));
  // The transpose flag makes the inner dimensions 3 and 5.
  const Variable c(uniform({4, 5}, 402), true);
  REQUIRE_NOTHROW(F::matmul(a, c));
  REQUIRE_THROWS_AS(F::matmul(a, c, true, false), Error);
  const Variable v(uniform({5}, 403), true);
  REQUIRE_THROWS_AS(F::matmul(a, v), Error);
  REQUIRE_THROWS_AS(F::matmul(v, a), Error);

  const Variable x(uniform({2, 3}, 404), true);
  const Variable W(uniform({4, 5}, 405), true);
  REQUIRE_THROWS_AS(F::linear(x, W), Error);
  REQUIRE_THROWS_WITH(F::linear(x, W), Contains("linear") && Contains("[2, 3]") && Contains("[4, 5]"));
  // [2, 2, 2] flattens to 4 features, W expects 5.
  const Variable x3(uniform({2, 2, 2}, 406), true);
  REQUIRE_THROWS_WITH(F::linear(x3, W), Contains("[2, 2, 2]") && Contains("[4, 5]"));

  const Variable W35(uniform({5, 3}, 407), true);
  const Variable bad_bias(uniform({4}, 408), true);
  REQUIRE_THROWS_AS(F::linear(x, W35, bad_bias), Error);
  REQUIRE_THROWS_WITH(F::linear(x, W35, bad_bias), Contains("[4]") && Contains("[5, 3]"));
  const Variable W1d(uniform({3}, 409), true);
  REQUIRE_THROWS_WITH(F::linear(x, W1d), Contains("2-D"));
}

TEST_CASE("matmul and linear with dtype mismatches name the function", "[linalg][errors]") {
  const Variable x(uniform({2, 3}, 410), true);
  const Variable W32(uniform({4, 3}, 411, -1, 1, DType::f32), true);
  const Variable W64(uniform({4, 3}, 412), true);
  const Variable b32(uniform({4}, 413, -1, 1, DType::f32), true);
  REQUIRE_THROWS_AS(F::matmul(x, W32, false, true), Error);
  REQUIRE_THROWS_WITH(F::matmul(x, W32, false, true), Contains("matmul") && Contains("different dtypes"));
  REQUIRE_THROWS_WITH(F::linear(x, W32), Contains("different dtypes") && Contains("f32") && Contains("f64"));
  REQUIRE_THROWS_AS(F::linear(x, W64, b32), Error);
  REQUIRE_THROWS_WITH(F::linear(x, W64, b32), Contains("linear") && Contains("different dtypes"));
}

TEST_CASE("matmul and linear with an empty batch or inner dimension", "[linalg]") {
  // Inner dimension 0: the product is all zeros, not uninitialised memory.
  const Variable a(uniform({2, 0}, 420), true), c(uniform({0, 3}, 421), true);
  const Variable m = F::matmul(a, c);
  REQUIRE(m.shape() == Shape{2, 3});
  REQUIRE_NEAR_VALUES(m.data(), std::vector<double>(6, 0.0), 0);
  // Batch 0: W and b get zero gradients of their own shapes.
  Variable x(uniform({0, 3}, 422), true), W(uniform({4, 3}, 423), true), b(uniform({4}, 424), true);
  const Variable y = F::linear(x, W, b);
  REQUIRE(y.shape() == Shape{0, 4});
  F::sum(y).backward();
  REQUIRE_NEAR_VALUES(W.grad(), std::vector<double>(12, 0.0), 0);
  REQUIRE_NEAR_VALUES(b.grad(), std::vector<double>(4, 0.0), 0);
  REQUIRE(x.grad().shape() == Shape{0, 3});
}

TEST_CASE("matmul and linear in f32 agree with f64", "[linalg][f32]") {
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::matmul(v[0], v[1])}; },
                                 {uniform({2, 3, 8}, 500), uniform({8, 4}, 501)});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::matmul(v[0], v[1], true, true)}; },
                                 {uniform({8, 3}, 502), uniform({4, 8}, 503)});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::linear(v[0], v[1], v[2])}; },
                                 {uniform({5, 2, 3}, 504), uniform({4, 6}, 505), uniform({4}, 506)});
}

TEST_CASE("linear rejects an input without a feature axis", "[linalg][errors]") {
  tandem::Variable x(tandem::zeros({4}, tandem::DType::f64));
  tandem::Variable W(tandem::zeros({3, 1}, tandem::DType::f64), true);
  REQUIRE_THROWS_WITH(tandem::F::linear(x, W), Catch::Contains("linear") && Catch::Contains("[4]"));
}

TEST_CASE("linear: a parameter's gradient accumulates in place across backward calls", "[linalg]") {
  namespace F = tandem::functions;
  const Tensor x1 = uniform({3, 5}, 1), x2 = uniform({2, 5}, 2);
  Variable W(uniform({4, 5}, 3), true), b(uniform({4}, 4), true);
  // Each backward's contribution to W's gradient: sum over rows of x (the seed is ones).
  const Tensor g1 = matmul(ones({3, 4}, DType::f64), x1, true, false), g2 = matmul(ones({2, 4}, DType::f64), x2, true, false);
  F::sum(F::linear(Variable(x1), W, b)).backward();
  const void* memory = W.grad().raw_data();
  F::sum(F::linear(Variable(x2), W, b)).backward();
  // Added into the same memory (fused), with the same value as two separate gradients summed.
  CHECK(W.grad().raw_data() == memory);
  const std::vector<double> got = W.grad().to_vector<double>(), want = add(g1, g2).to_vector<double>();
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-14));
  // A gradient the user holds is not written into: the next backward makes a new one.
  const Tensor held = W.grad();
  F::sum(F::linear(Variable(x1), W, b)).backward();
  CHECK(held.to_vector<double>() == got);
  const std::vector<double> three = W.grad().to_vector<double>(), want3 = add(add(g1, g2), g1).to_vector<double>();
  for (std::size_t i = 0; i < three.size(); ++i) CHECK(three[i] == Approx(want3[i]).epsilon(1e-14));
}
