// The fused LSTM cell (core/ops/recurrent.h) against the formulas element by element.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/ops.h"
#include "core/ops/recurrent.h"
#include "tests/core/test_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using test_util::uniform;
using test_util::values;

namespace {

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

struct Reference {
  std::vector<double> c, h, act, ggates, gc_prev;
};

// Gate blocks i, f, a, o of each row; gradients by the chain rule written out per element.
Reference reference(const Tensor& gates, const Tensor& c_prev, const Tensor& gh, const Tensor& gc) {
  const std::int64_t B = c_prev.size(0), H = c_prev.size(1);
  const auto g = values(gates), cp = values(c_prev), dh = values(gh), dc = values(gc);
  Reference r;
  r.c.resize(B * H);
  r.h.resize(B * H);
  r.act.resize(B * 4 * H);
  r.ggates.resize(B * 4 * H);
  r.gc_prev.resize(B * H);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t u = 0; u < H; ++u) {
      const std::int64_t row = b * 4 * H, k = b * H + u;
      const double i = sigmoid(g[row + u]), f = sigmoid(g[row + H + u]);
      const double a = std::tanh(g[row + 2 * H + u]), o = sigmoid(g[row + 3 * H + u]);
      const double c = f * cp[k] + i * a, tc = std::tanh(c);
      r.c[k] = c;
      r.h[k] = o * tc;
      r.act[row + u] = i;
      r.act[row + H + u] = f;
      r.act[row + 2 * H + u] = a;
      r.act[row + 3 * H + u] = o;
      const double gct = dc[k] + dh[k] * o * (1 - tc * tc);
      r.ggates[row + u] = gct * a * i * (1 - i);
      r.ggates[row + H + u] = gct * cp[k] * f * (1 - f);
      r.ggates[row + 2 * H + u] = gct * i * (1 - a * a);
      r.ggates[row + 3 * H + u] = dh[k] * tc * o * (1 - o);
      r.gc_prev[k] = gct * f;
    }
  return r;
}

}  // namespace

TEST_CASE("lstm cell forward and backward match the formulas", "[recurrent]") {
  struct Case { std::int64_t B, H; };
  for (const Case& s : {Case{1, 1}, Case{3, 5}, Case{2, 17}, Case{200, 64}}) {
    for (DType dtype : {DType::f64, DType::f32}) {
      INFO("B " << s.B << " H " << s.H << " " << dtype);
      const double tol = dtype == DType::f64 ? 1e-13 : 2e-6;
      const Tensor gates = uniform({s.B, 4 * s.H}, 1, -3, 3, dtype);
      const Tensor c_prev = uniform({s.B, s.H}, 2, -2, 2, dtype);
      const Tensor gh = uniform({s.B, s.H}, 3, -1, 1, dtype), gc = uniform({s.B, s.H}, 4, -1, 1, dtype);
      const Reference want = reference(gates, c_prev, gh, gc);

      const LstmCellResult r = lstm_cell(gates, c_prev);
      REQUIRE_VALUES(r.c, want.c, tol, tol);
      REQUIRE_VALUES(r.h, want.h, tol, tol);
      REQUIRE_VALUES(r.activations, want.act, tol, tol);

      Tensor g = gates.clone(), c = empty({s.B, s.H}, dtype), h = empty({s.B, s.H}, dtype);
      lstm_cell_forward_(g, c_prev, c, h);
      REQUIRE_VALUES(g, want.act, tol, tol);
      REQUIRE_VALUES(h, want.h, tol, tol);

      Tensor ggates = empty({s.B, 4 * s.H}, dtype), gc_prev = empty({s.B, s.H}, dtype);
      lstm_cell_backward_(r.activations, c_prev, r.c, gh, gc, ggates, gc_prev);
      REQUIRE_VALUES(ggates, want.ggates, tol * 10, tol * 10);
      REQUIRE_VALUES(gc_prev, want.gc_prev, tol * 10, tol * 10);
      // gc_prev may be gc itself.
      Tensor gc_inout = gc.clone();
      lstm_cell_backward_(r.activations, c_prev, r.c, gh, gc_inout, ggates, gc_inout);
      REQUIRE_VALUES(gc_inout, want.gc_prev, tol * 10, tol * 10);
    }
  }
}

TEST_CASE("lstm cell backward agrees with central differences of the forward", "[recurrent]") {
  const Tensor gates = uniform({2, 12}, 5, -2, 2, DType::f64), c_prev = uniform({2, 3}, 6, -2, 2, DType::f64);
  const Tensor gh = uniform({2, 3}, 7, -1, 1, DType::f64), gc = uniform({2, 3}, 8, -1, 1, DType::f64);
  auto loss = [&](const Tensor& g, const Tensor& cp) {
    const LstmCellResult r = lstm_cell(g, cp);
    return sum(r.h * gh + r.c * gc).item();
  };
  const LstmCellResult r = lstm_cell(gates, c_prev);
  Tensor ggates = empty({2, 12}, DType::f64), gc_prev = empty({2, 3}, DType::f64);
  lstm_cell_backward_(r.activations, c_prev, r.c, gh, gc, ggates, gc_prev);
  const double eps = 1e-6;
  for (int which = 0; which < 2; ++which) {
    const Tensor& x = which == 0 ? gates : c_prev;
    const std::vector<double> analytic = values(which == 0 ? ggates : gc_prev);
    for (std::int64_t j = 0; j < x.numel(); ++j) {
      Tensor plus = x.clone(), minus = x.clone();
      plus.data<double>()[j] += eps;
      minus.data<double>()[j] -= eps;
      const double numeric = which == 0 ? (loss(plus, c_prev) - loss(minus, c_prev)) / (2 * eps)
                                        : (loss(gates, plus) - loss(gates, minus)) / (2 * eps);
      INFO("input " << which << " element " << j);
      REQUIRE(analytic[j] == Approx(numeric).margin(1e-8));
    }
  }
}

TEST_CASE("lstm cell rejects mismatched shapes and dtypes", "[recurrent][errors]") {
  const Tensor c_prev = zeros({2, 3});
  REQUIRE_THROWS_WITH(lstm_cell(zeros({2, 11}), c_prev), Contains("[B, 4H]") && Contains("[2, 11]"));
  REQUIRE_THROWS_WITH(lstm_cell(zeros({2, 12}, DType::f64), c_prev), Contains("dtypes"));
  REQUIRE_THROWS_WITH(lstm_cell(zeros({2, 12}, DType::i32), zeros({2, 3}, DType::i32)), Contains("floating"));
  Tensor g = zeros({2, 12}), c = zeros({2, 3}), h = zeros({3, 3});
  REQUIRE_THROWS_WITH(lstm_cell_forward_(g, c_prev, c, h), Contains("h f32[3, 3]"));
}
