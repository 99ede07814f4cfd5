// Gradients and behaviour of autograd/functions/softmax.h: softmax and log_softmax.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using gc_util::uniform;

namespace {

// Reference softmax of a row-major [rows, cols] matrix along axis 1, with std::exp.
std::vector<double> softmax_rows(const std::vector<double>& x, int rows, int cols, bool log) {
  std::vector<double> out(x.size());
  for (int r = 0; r < rows; ++r) {
    double total = 0;
    for (int c = 0; c < cols; ++c) total += std::exp(x[r * cols + c]);
    for (int c = 0; c < cols; ++c)
      out[r * cols + c] = log ? x[r * cols + c] - std::log(total) : std::exp(x[r * cols + c]) / total;
  }
  return out;
}

}  // namespace

TEST_CASE("softmax and log_softmax gradients on axes 0, 1 and -1", "[softmax][gradcheck]") {
  struct Case {
    Shape x;
    std::int64_t axis;
  };
  const std::vector<Case> cases = {
      {{3, 4}, 0}, {{3, 4}, 1}, {{3, 4}, -1}, {{2, 3, 4}, 0}, {{2, 3, 4}, 1}, {{2, 3, 4}, -1}, {{2, 3, 4}, 2},
      {{1, 5}, 1}, {{1, 5}, 0},  // batch 1; along an axis of extent 1 softmax is constant 1
      {{5}, 0},    {{5}, -1},   {{4, 1}, 1},
  };
  std::uint64_t seed = 1;
  for (const Case& c : cases) {
    INFO(shape_str(c.x) << " axis " << c.axis);
    const Tensor x = uniform(c.x, seed++, -2, 2);
    REQUIRE_GRADCHECK([&c](const Variables& v) -> Variables { return {F::softmax(v[0], c.axis)}; }, {x});
    REQUIRE_GRADCHECK([&c](const Variables& v) -> Variables { return {F::log_softmax(v[0], c.axis)}; }, {x});
  }
  SECTION("the default axis is 1") {
    const Tensor x = uniform({2, 3, 2}, 50, -2, 2);
    const Variable a = F::softmax(Variable(x));
    const Variable b = F::softmax(Variable(x), 1);
    REQUIRE_NEAR_VALUES(a.data(), b.data());
    REQUIRE_NEAR_VALUES(F::log_softmax(Variable(x)).data(), F::log_softmax(Variable(x), 1).data());
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::softmax(v[0]), F::log_softmax(v[0])}; }, {x});
  }
  SECTION("large scores: the stable forms stay finite and differentiable") {
    const Tensor x = gc_util::f64({1000, 1001, 999, -1000, -1002, -1001}, {2, 3});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::softmax(v[0], 1)}; }, {x});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::log_softmax(v[0], 1)}; }, {x});
  }
}

TEST_CASE("softmax and log_softmax forward values", "[softmax]") {
  const std::vector<double> raw = {1, 2, 3, -1, 0, 0.5};
  const Variable x(gc_util::f64(raw, {2, 3}));
  REQUIRE_NEAR_VALUES(F::softmax(x, 1).data(), softmax_rows(raw, 2, 3, false));
  REQUIRE_NEAR_VALUES(F::log_softmax(x, -1).data(), softmax_rows(raw, 2, 3, true));
  // Along axis 0: the columns [1, -1], [2, 0], [3, 0.5] — the transpose of the row version.
  const std::vector<double> columns = softmax_rows({1, -1, 2, 0, 3, 0.5}, 3, 2, false);
  REQUIRE_NEAR_VALUES(F::softmax(x, 0).data(),
                      {columns[0], columns[2], columns[4], columns[1], columns[3], columns[5]});
  // Rows sum to 1; shifting a row by a constant changes nothing, even by 1000.
  REQUIRE_NEAR_VALUES(F::sum(F::softmax(x, 1), {1}).data(), {1, 1});
  REQUIRE_NEAR_VALUES(F::softmax(F::add(x, 1000.0), 1).data(), softmax_rows(raw, 2, 3, false));
  REQUIRE_NEAR_VALUES(F::log_softmax(F::add(x, -1000.0), 1).data(), softmax_rows(raw, 2, 3, true), 1e-10);
  const Variable big(gc_util::f64({1000, 0}, {1, 2}));
  REQUIRE_NEAR_VALUES(F::softmax(big, 1).data(), {1, 0});
  REQUIRE_NEAR_VALUES(F::log_softmax(big, 1).data(), {0, -1000});
}

TEST_CASE("softmax gradients by hand", "[softmax]") {
  // d/dx sum_j w_j softmax_j = y * (w - sum(w * y)); d/dx sum_j w_j log_softmax_j = w - y sum(w).
  const std::vector<double> raw = {0.5, -1, 2};
  const std::vector<double> w = {1, 2, -3};
  const std::vector<double> y = softmax_rows(raw, 1, 3, false);
  double wy = 0, wsum = 0;
  for (int j = 0; j < 3; ++j) wy += w[j] * y[j], wsum += w[j];
  Variable x(gc_util::f64(raw, {1, 3}), true);
  const Variable weights(gc_util::f64(w, {1, 3}));
  F::sum(F::mul(F::softmax(x, 1), weights)).backward();
  REQUIRE_NEAR_VALUES(x.grad(), {y[0] * (w[0] - wy), y[1] * (w[1] - wy), y[2] * (w[2] - wy)});
  x.cleargrad();
  F::sum(F::mul(F::log_softmax(x, 1), weights)).backward();
  REQUIRE_NEAR_VALUES(x.grad(), {w[0] - y[0] * wsum, w[1] - y[1] * wsum, w[2] - y[2] * wsum});
  REQUIRE_FALSE(weights.grad().defined());
  REQUIRE_FALSE(F::softmax(weights, 1).requires_grad());
}

TEST_CASE("softmax and log_softmax reject bad axes and integer inputs", "[softmax][errors]") {
  const Variable x(uniform({2, 3}, 200), true);
  REQUIRE_THROWS_AS(F::softmax(x, 2), Error);
  REQUIRE_THROWS_WITH(F::softmax(x, 2), Contains("softmax") && Contains("axis 2"));
  REQUIRE_THROWS_AS(F::log_softmax(x, -3), Error);
  REQUIRE_THROWS_WITH(F::log_softmax(x, -3), Contains("log_softmax"));
  const Variable t(gc_util::i64({1, 2}, {1, 2}));
  REQUIRE_THROWS_AS(F::softmax(t, 1), Error);
  REQUIRE_THROWS_WITH(F::softmax(t, 1), Contains("floating"));
  REQUIRE_THROWS_AS(F::log_softmax(t, 1), Error);
}

TEST_CASE("softmax and log_softmax in f32 agree with f64", "[softmax][f32]") {
  const Tensor x = uniform({4, 6}, 300, -3, 3);
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::softmax(v[0], 1)}; }, {x});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::log_softmax(v[0], 0)}; }, {x});
}

TEST_CASE("scaled_softmax: gradients, the causal mask, and softmax over the last axis", "[softmax][gradcheck]") {
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    REQUIRE_GRADCHECK([causal](const Variables& v) -> Variables { return {F::scaled_softmax(v[0], 0.3, causal)}; },
                      {gc_util::uniform({2, 3, 5}, 90 + causal, -2, 2)});
  }
  // scale 1 without a mask is softmax over the last axis.
  const Tensor x = gc_util::uniform({4, 6}, 92, -3, 3);
  const std::vector<double> a = F::scaled_softmax(Variable(x)).data().to_vector<double>(),
                            b = F::softmax(Variable(x), -1).data().to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-15));
  // Causal over [3, 5]: query 0 sees keys 0..2 (the last 3 of 5 positions).
  const std::vector<double> y = F::scaled_softmax(Variable(gc_util::uniform({3, 5}, 93)), 1.0, true).data().to_vector<double>();
  CHECK(y[3] == 0.0);
  CHECK(y[4] == 0.0);
  CHECK(y[2] > 0.0);
}
