// The fused LSTM cell (core/ops/recurrent.h) against the formulas element by element.
#include <catch2/catch.hpp>

#include <cmath>

#include <omp.h>

#include "core/ops.h"
#include "core/cpu/cpu_backend.h"
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

namespace {

// One layer's recurrence written out in double precision over the packed batch (step t: rows
// offset_t .. offset_t + sizes[t]): the forward's activations, c and h of every row, and the
// backward's ggates and the gradients of h0 and c0.
struct RecurrenceReference {
  std::vector<double> act, cs, hs, ggates, dh, dc;
};

RecurrenceReference recurrence_reference(const std::vector<std::int64_t>& sizes, const Tensor& gates_in,
                                         const Tensor& wh, const Tensor& h0, const Tensor& c0, const Tensor& ghs,
                                         const Tensor& dh_in, const Tensor& dc_in) {
  const std::int64_t H = wh.size(1), N = gates_in.size(0);
  const auto w = values(wh), hx = values(h0), cx = values(c0), gy = values(ghs);
  RecurrenceReference r;
  r.act = values(gates_in);
  r.cs.assign(N * H, 0);
  r.hs.assign(N * H, 0);
  std::vector<std::int64_t> offsets(sizes.size(), 0);
  for (std::size_t t = 1; t < sizes.size(); ++t) offsets[t] = offsets[t - 1] + sizes[t - 1];
  auto prev_h = [&](std::size_t t, std::int64_t b) { return t == 0 ? &hx[b * H] : &r.hs[(offsets[t - 1] + b) * H]; };
  auto prev_c = [&](std::size_t t, std::int64_t b) { return t == 0 ? &cx[b * H] : &r.cs[(offsets[t - 1] + b) * H]; };
  for (std::size_t t = 0; t < sizes.size(); ++t)
    for (std::int64_t b = 0; b < sizes[t]; ++b) {
      const std::int64_t row = offsets[t] + b;
      double* g = &r.act[row * 4 * H];
      for (std::int64_t k = 0; k < 4 * H; ++k)
        for (std::int64_t j = 0; j < H; ++j) g[k] += prev_h(t, b)[j] * w[k * H + j];
      for (std::int64_t u = 0; u < H; ++u) {
        g[u] = sigmoid(g[u]);
        g[H + u] = sigmoid(g[H + u]);
        g[2 * H + u] = std::tanh(g[2 * H + u]);
        g[3 * H + u] = sigmoid(g[3 * H + u]);
        r.cs[row * H + u] = g[H + u] * prev_c(t, b)[u] + g[u] * g[2 * H + u];
        r.hs[row * H + u] = g[3 * H + u] * std::tanh(r.cs[row * H + u]);
      }
    }
  r.dh = values(dh_in);
  r.dc = values(dc_in);
  r.ggates.assign(N * 4 * H, 0);
  for (std::size_t t = sizes.size(); t-- > 0;)
    for (std::int64_t b = 0; b < sizes[t]; ++b) {
      const std::int64_t row = offsets[t] + b;
      const double* g = &r.act[row * 4 * H];
      double* gg = &r.ggates[row * 4 * H];
      for (std::int64_t u = 0; u < H; ++u) {
        const double i = g[u], f = g[H + u], a = g[2 * H + u], o = g[3 * H + u];
        const double dh = r.dh[b * H + u] + gy[row * H + u], tc = std::tanh(r.cs[row * H + u]);
        const double gct = r.dc[b * H + u] + dh * o * (1 - tc * tc);
        gg[u] = gct * a * i * (1 - i);
        gg[H + u] = gct * prev_c(t, b)[u] * f * (1 - f);
        gg[2 * H + u] = gct * i * (1 - a * a);
        gg[3 * H + u] = dh * tc * o * (1 - o);
        r.dc[b * H + u] = gct * f;
      }
      for (std::int64_t j = 0; j < H; ++j) {
        double sum = 0;
        for (std::int64_t k = 0; k < 4 * H; ++k) sum += gg[k] * w[k * H + j];
        r.dh[b * H + j] = sum;
      }
    }
  return r;
}

}  // namespace

// On the CPU with two or more threads the recurrence runs as one parallel region, each thread
// its share of the hidden units (core/cpu/lstm_recurrence.cc); on one thread, cell by cell. Both
// against the double-precision loop, on packed batches whose steps shrink, with a unit count that
// does not split evenly into vectors of 8 and a team of three (more threads than this machine's
// cores: the barrier must yield).
TEST_CASE("lstm recurrence on one thread and split over threads matches the formulas", "[recurrent]") {
  struct Case {
    std::vector<std::int64_t> sizes;
    std::int64_t H;
    int threads;
  };
  const int saved_threads = omp_get_max_threads();
  for (const Case& s : {Case{{40, 40, 33, 20, 7, 1}, 64, 1}, Case{{40, 40, 33, 20, 7, 1}, 64, 2},
                        Case{{96, 96, 96}, 44, 3}, Case{{96, 60}, 44, 2}}) {
    for (DType dtype : {DType::f64, DType::f32}) {
      INFO("H " << s.H << ", " << s.sizes.size() << " steps, " << s.threads << " threads, " << dtype);
      omp_set_num_threads(s.threads);
      std::int64_t N = 0;
      for (std::int64_t b : s.sizes) N += b;
      const std::int64_t B = s.sizes[0] + 2, H = s.H;  // states with rows past the first step's
      const Tensor gates_in = uniform({N, 4 * H}, 11, -1, 1, dtype), wh = uniform({4 * H, H}, 12, -0.3, 0.3, dtype);
      const Tensor h0 = uniform({B, H}, 13, -1, 1, dtype), c0 = uniform({B, H}, 14, -1, 1, dtype);
      const Tensor ghs = uniform({N, H}, 15, -1, 1, dtype);
      const Tensor dh_in = uniform({B, H}, 16, -1, 1, dtype), dc_in = uniform({B, H}, 17, -1, 1, dtype);
      const RecurrenceReference want = recurrence_reference(s.sizes, gates_in, wh, h0, c0, ghs, dh_in, dc_in);
      const double tol = dtype == DType::f64 ? 1e-11 : 2e-5;

      Tensor gates = gates_in.clone(), hs = empty({N, H}, dtype), cs = empty({N, H}, dtype);
      // The split kernel runs exactly where there are threads to split over.
      const bool split = cpu_backend().lstm_recurrence_forward(s.sizes, gates, wh, h0, c0, hs, cs);
      REQUIRE(split == (s.threads > 1));
      if (!split) lstm_recurrence_forward_(s.sizes, gates, wh, h0, c0, hs, cs);
      REQUIRE_VALUES(gates, want.act, tol, tol);
      REQUIRE_VALUES(cs, want.cs, tol, tol);
      REQUIRE_VALUES(hs, want.hs, tol, tol);

      Tensor dh = dh_in.clone(), dc = dc_in.clone(), ggates = empty({N, 4 * H}, dtype);
      REQUIRE(cpu_backend().lstm_recurrence_backward(s.sizes, gates, cs, c0, wh, ghs, dh, dc, ggates) == split);
      if (!split) lstm_recurrence_backward_(s.sizes, gates, cs, c0, wh, ghs, dh, dc, ggates);
      REQUIRE_VALUES(ggates, want.ggates, tol * 10, tol * 10);
      REQUIRE_VALUES(dh, want.dh, tol * 10, tol * 10);
      REQUIRE_VALUES(dc, want.dc, tol * 10, tol * 10);
      // Rows past the first step's are no sequence's: untouched.
      REQUIRE_VALUES(dh.slice_rows(s.sizes[0], B), values(dh_in.slice_rows(s.sizes[0], B)));
    }
  }
  omp_set_num_threads(saved_threads);
}

TEST_CASE("lstm recurrence names the argument that does not fit", "[recurrent][errors]") {
  const std::vector<std::int64_t> sizes{3, 2};
  Tensor gates = zeros({5, 16}), hs = zeros({5, 4}), cs = zeros({5, 4});
  const Tensor wh = zeros({16, 4}), h0 = zeros({3, 4}), c0 = zeros({3, 4});
  REQUIRE_THROWS_WITH(lstm_recurrence_forward_({2, 3}, gates, wh, h0, c0, hs, cs),
                      Contains("decreasing") && Contains("step 1"));
  REQUIRE_THROWS_WITH(lstm_recurrence_forward_({3, 3}, gates, wh, h0, c0, hs, cs), Contains("[N, 4H] = [6, 16]"));
  REQUIRE_THROWS_WITH(lstm_recurrence_forward_(sizes, gates, zeros({16, 5}), h0, c0, hs, cs),
                      Contains("wh f32[16, 5] must be [4H, H]"));
  REQUIRE_THROWS_WITH(lstm_recurrence_forward_(sizes, gates, wh, zeros({2, 4}), c0, hs, cs),
                      Contains("h0 f32[2, 4]") && Contains("B >= 3"));
  Tensor short_cs = zeros({4, 4});
  REQUIRE_THROWS_WITH(lstm_recurrence_forward_(sizes, gates, wh, h0, c0, hs, short_cs), Contains("cs f32[4, 4]"));
  Tensor dh = zeros({3, 4}), dc = zeros({3, 4}, DType::f64), ggates = zeros({5, 16});
  REQUIRE_THROWS_WITH(lstm_recurrence_backward_(sizes, gates, cs, c0, wh, hs, dh, dc, ggates), Contains("dtypes"));
}

TEST_CASE("lstm cell rejects mismatched shapes and dtypes", "[recurrent][errors]") {
  const Tensor c_prev = zeros({2, 3});
  REQUIRE_THROWS_WITH(lstm_cell(zeros({2, 11}), c_prev), Contains("[B, 4H]") && Contains("[2, 11]"));
  REQUIRE_THROWS_WITH(lstm_cell(zeros({2, 12}, DType::f64), c_prev), Contains("dtypes"));
  REQUIRE_THROWS_WITH(lstm_cell(zeros({2, 12}, DType::i32), zeros({2, 3}, DType::i32)), Contains("floating"));
  Tensor g = zeros({2, 12}), c = zeros({2, 3}), h = zeros({3, 3});
  REQUIRE_THROWS_WITH(lstm_cell_forward_(g, c_prev, c, h), Contains("h f32[3, 3]"));
}
