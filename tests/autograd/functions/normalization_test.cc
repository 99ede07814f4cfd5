// Gradients and behaviour of autograd/functions/normalization.h: batch_normalization,
// fixed_batch_normalization and layer_normalization (with its fused primitives,
// core/ops/normalization.h: layer_norm_forward/_backward).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using gc_util::uniform;

namespace {

Variables bn(const Variables& v) { return {F::batch_normalization(v[0], v[1], v[2])}; }
Variables fixed_bn(const Variables& v) { return {F::fixed_batch_normalization(v[0], v[1], v[2], v[3], v[4])}; }

std::int64_t channel_of(std::int64_t i, const Shape& shape) {
  std::int64_t inner = 1;
  for (std::size_t d = 2; d < shape.size(); ++d) inner *= shape[d];
  return (i / inner) % shape[1];
}

// Per-channel mean and biased variance, by a naive loop.
void naive_stats(const Tensor& x, std::vector<double>& mean, std::vector<double>& var) {
  const Shape& shape = x.shape();
  const std::vector<double> v = x.to_vector<double>();
  const std::int64_t C = shape[1], m = x.numel() / C;
  mean.assign(C, 0);
  var.assign(C, 0);
  for (std::int64_t i = 0; i < x.numel(); ++i) mean[channel_of(i, shape)] += v[i] / m;
  for (std::int64_t i = 0; i < x.numel(); ++i) var[channel_of(i, shape)] += std::pow(v[i] - mean[channel_of(i, shape)], 2) / m;
}

std::vector<double> naive_bn(const Tensor& x, const Tensor& gamma, const Tensor& beta, const std::vector<double>& mean,
                             const std::vector<double>& var, double eps) {
  const std::vector<double> v = x.to_vector<double>(), g = gamma.to_vector<double>(), b = beta.to_vector<double>();
  std::vector<double> y(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::int64_t c = channel_of(static_cast<std::int64_t>(i), x.shape());
    y[i] = g[c] * (v[i] - mean[c]) / std::sqrt(var[c] + eps) + b[c];
  }
  return y;
}

}  // namespace

TEST_CASE("batch_normalization forward uses the batch statistics per channel", "[normalization]") {
  for (const Shape& shape : {Shape{4, 3}, Shape{2, 3, 2, 2}, Shape{3, 2, 5}}) {
    INFO(shape_str(shape));
    const std::int64_t C = shape[1];
    const Tensor x = uniform(shape, 1, -2, 3), gamma = uniform({C}, 2, 0.5, 1.5), beta = uniform({C}, 3);
    std::vector<double> mean, var;
    naive_stats(x, mean, var);
    const Variable y = F::batch_normalization(Variable(x), Variable(gamma), Variable(beta));
    REQUIRE(y.shape() == shape);
    REQUIRE_NEAR_VALUES(y.data(), naive_bn(x, gamma, beta, mean, var, 2e-5), 1e-10);
    // A custom eps, and the same result through fixed_batch_normalization with those statistics.
    const Variable y2 = F::batch_normalization(Variable(x), Variable(gamma), Variable(beta), 0.5);
    REQUIRE_NEAR_VALUES(y2.data(), naive_bn(x, gamma, beta, mean, var, 0.5), 1e-10);
    const Variable yf = F::fixed_batch_normalization(Variable(x), Variable(gamma), Variable(beta),
                                                     Variable(gc_util::f64(mean, {C})), Variable(gc_util::f64(var, {C})), 0.5);
    REQUIRE_NEAR_VALUES(yf.data(), y2.data(), 1e-10);
  }
}

TEST_CASE("batch_normalization gradients for x, gamma and beta", "[normalization][gradcheck]") {
  std::uint64_t seed = 10;
  // eps 0.1 keeps the normalised values of a batch of two away from saturating at +-1, so that
  // the gradient with respect to x is not close to 0.
  auto bn_eps = [](const Variables& v) -> Variables { return {F::batch_normalization(v[0], v[1], v[2], 0.1)}; };
  for (const Shape& shape : {Shape{2, 3}, Shape{2, 3, 2, 2}, Shape{5, 2}, Shape{3, 2, 3, 1}, Shape{2, 1, 3}}) {
    INFO(shape_str(shape));
    const std::int64_t C = shape[1];
    const Tensor x = uniform(shape, seed++, -2, 2), gamma = uniform({C}, seed++, 0.5, 1.5), beta = uniform({C}, seed++);
    REQUIRE_GRADCHECK(bn_eps, {x, gamma, beta});
    // The default eps needs values of a channel well apart (central differences of width 2e-3
    // must not straddle the steep region around equal values): true for >= 4 values here.
    if (shape_numel(shape) / C >= 4) REQUIRE_GRADCHECK(bn, {x, gamma, beta});
  }
  // Batch 2 of [N, C] with the default eps, values of each channel at least 0.5 apart.
  REQUIRE_GRADCHECK(bn, {gc_util::f64({-1.0, 0.3, 2.0, 0.5, -0.4, 1.1}, {2, 3}), uniform({3}, seed++, 0.5, 1.5),
                         uniform({3}, seed++)});
  SECTION("a large eps and a composed graph") {
    auto fn = [](const Variables& v) -> Variables {
      const Variable y = F::batch_normalization(v[0], v[1], v[2], 0.3);
      return {F::tanh(y), F::sum(F::mul(y, y))};
    };
    REQUIRE_GRADCHECK(fn, {uniform({3, 2, 2, 2}, 30, -2, 2), uniform({2}, 31, 0.5, 1.5), uniform({2}, 32)});
  }
  SECTION("by hand: the gradient of sum(y) is beta's count and zero for x") {
    Variable x(uniform({4, 2}, 33), true), gamma(uniform({2}, 34), true), beta(uniform({2}, 35), true);
    F::sum(F::batch_normalization(x, gamma, beta)).backward();
    REQUIRE_NEAR_VALUES(beta.grad(), {4, 4});
    REQUIRE_NEAR_VALUES(x.grad(), std::vector<double>(8, 0.0), 1e-9);
    REQUIRE_NEAR_VALUES(gamma.grad(), {0, 0}, 1e-9);  // sum of xhat is 0
  }
}

TEST_CASE("batch_normalization updates the running statistics as Chainer does", "[normalization]") {
  for (const Shape& shape : {Shape{4, 3}, Shape{2, 3, 2, 2}}) {
    INFO(shape_str(shape));
    const std::int64_t C = shape[1];
    const double m = static_cast<double>(shape_numel(shape) / C);
    const Tensor x = uniform(shape, 40, -2, 3), gamma = uniform({C}, 41, 0.5, 1.5), beta = uniform({C}, 42);
    std::vector<double> mean, var;
    naive_stats(x, mean, var);
    const Tensor rm0 = uniform({C}, 43), rv0 = uniform({C}, 44, 0.5, 2);
    Tensor running_mean = rm0.clone(), running_var = rv0.clone();
    F::batch_normalization(Variable(x), Variable(gamma), Variable(beta), 2e-5, &running_mean, &running_var, 0.8);
    std::vector<double> want_mean, want_var;
    for (std::int64_t c = 0; c < C; ++c) {
      want_mean.push_back(0.8 * rm0.to_vector<double>()[c] + 0.2 * mean[c]);
      want_var.push_back(0.8 * rv0.to_vector<double>()[c] + 0.2 * var[c] * m / (m - 1));
    }
    REQUIRE_NEAR_VALUES(running_mean, want_mean, 1e-12);
    REQUIRE_NEAR_VALUES(running_var, want_var, 1e-12);
    // Only one of them, and the default decay 0.9; gradients are unaffected.
    Tensor only_mean = rm0.clone();
    Variable xv(x, true);
    F::sum(F::batch_normalization(xv, Variable(gamma), Variable(beta), 2e-5, &only_mean)).backward();
    for (std::int64_t c = 0; c < C; ++c)
      REQUIRE(only_mean.to_vector<double>()[c] == Approx(0.9 * rm0.to_vector<double>()[c] + 0.1 * mean[c]).epsilon(1e-12));
    REQUIRE(xv.grad().defined());
  }
  SECTION("a batch of one value per channel: the unbiased correction is capped") {
    const Tensor x = gc_util::f64({1, 2}, {1, 2});
    Tensor running_var = gc_util::f64({1, 1}, {2});
    F::batch_normalization(Variable(x), Variable(gc_util::f64({1, 1}, {2})), Variable(gc_util::f64({0, 0}, {2})),
                           2e-5, nullptr, &running_var);
    REQUIRE_NEAR_VALUES(running_var, {0.9, 0.9});
  }
}

TEST_CASE("fixed_batch_normalization values and gradients for all five inputs", "[normalization][gradcheck]") {
  std::uint64_t seed = 50;
  for (const Shape& shape : {Shape{2, 3}, Shape{2, 3, 2, 2}, Shape{4, 2, 3}}) {
    INFO(shape_str(shape));
    const std::int64_t C = shape[1];
    const Tensor x = uniform(shape, seed++, -2, 2), gamma = uniform({C}, seed++, 0.5, 1.5), beta = uniform({C}, seed++);
    const Tensor mean = uniform({C}, seed++), var = uniform({C}, seed++, 0.5, 1.5);
    REQUIRE_GRADCHECK(fixed_bn, {x, gamma, beta, mean, var});
    const Variable y = F::fixed_batch_normalization(Variable(x), Variable(gamma), Variable(beta), Variable(mean),
                                                    Variable(var), 1e-3);
    REQUIRE_NEAR_VALUES(y.data(), naive_bn(x, gamma, beta, mean.to_vector<double>(), var.to_vector<double>(), 1e-3),
                        1e-12);
  }
}

TEST_CASE("batch normalisation rejects mismatched operands", "[normalization][errors]") {
  const Variable x(uniform({4, 3}, 60), true);
  const Variable g(uniform({3}, 61)), b(uniform({3}, 62));
  REQUIRE_THROWS_WITH(F::batch_normalization(x, Variable(uniform({2}, 63)), b),
                      Contains("batch_normalization") && Contains("gamma") && Contains("[C] = [3]"));
  REQUIRE_THROWS_WITH(F::batch_normalization(x, g, Variable(uniform({3}, 64, -1, 1, DType::f32))),
                      Contains("beta") && Contains("dtypes"));
  REQUIRE_THROWS_WITH(F::batch_normalization(Variable(uniform({3}, 65)), g, b), Contains("[N, C]"));
  REQUIRE_THROWS_WITH(F::batch_normalization(Variable(gc_util::i32({1, 2, 3, 4, 5, 6}, {2, 3})), g, b),
                      Contains("floating"));
  Tensor bad_running = zeros({4}, DType::f64);
  REQUIRE_THROWS_WITH(F::batch_normalization(x, g, b, 2e-5, &bad_running), Contains("running_mean"));
  REQUIRE_THROWS_WITH(F::fixed_batch_normalization(x, g, b, Variable(uniform({3}, 66)), Variable(uniform({4}, 67))),
                      Contains("fixed_batch_normalization") && Contains("var"));
}

TEST_CASE("batch normalisation in f32 agrees with f64", "[normalization][f32]") {
  gc_util::check_f32_against_f64(bn, {uniform({4, 3, 2, 2}, 70, -2, 2), uniform({3}, 71, 0.5, 1.5), uniform({3}, 72)});
  gc_util::check_f32_against_f64(fixed_bn, {uniform({4, 3}, 73, -2, 2), uniform({3}, 74, 0.5, 1.5), uniform({3}, 75),
                                            uniform({3}, 76), uniform({3}, 77, 0.5, 1.5)});
}

TEST_CASE("layer_normalization: each row normalised over its last axis, gradients of x, gamma, beta",
          "[normalization][gradcheck]") {
  for (const Shape& shape : std::vector<Shape>{{4, 5}, {2, 3, 6}, {1, 7}}) {
    INFO("shape " << shape_str(shape));
    const std::int64_t features = shape.back();
    const Tensor x = uniform(shape, 60, -2, 2), gamma = uniform({features}, 61, 0.5, 1.5),
                 beta = uniform({features}, 62, -1, 1);
    REQUIRE_GRADCHECK(
        [](const Variables& v) -> Variables { return {F::layer_normalization(v[0], v[1], v[2], 1e-5)}; },
        {x, gamma, beta});
    // With gamma = 1 and beta = 0 every row has mean 0 and (biased) variance 1 / (1 + eps / var).
    const Tensor y = F::layer_normalization(Variable(x), Variable(ones({features}, DType::f64)),
                                            Variable(zeros({features}, DType::f64)), 1e-12)
                         .data();
    const std::vector<double> v = y.to_vector<double>();
    for (std::size_t row = 0; row < v.size() / features; ++row) {
      double m = 0, s = 0;
      for (std::int64_t j = 0; j < features; ++j) m += v[row * features + j];
      m /= features;
      for (std::int64_t j = 0; j < features; ++j) s += (v[row * features + j] - m) * (v[row * features + j] - m);
      CHECK(std::abs(m) < 1e-12);
      CHECK(s / features == Approx(1).epsilon(1e-9));
    }
  }
  CHECK_THROWS_WITH(F::layer_normalization(Variable(uniform({2, 3}, 1)), Variable(ones({4}, DType::f64)),
                                           Variable(zeros({4}, DType::f64))),
                    Contains("layer_normalization: x must be [..., features] with gamma and beta [features]"));
}

namespace {

struct NaiveLayerNorm {
  std::vector<double> y, mean, rstd;
};

// Each row of x [..., n] by a naive loop in double: two-pass mean and biased variance.
NaiveLayerNorm naive_ln(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  const std::vector<double> v = x.to_vector<double>(), g = gamma.to_vector<double>(), b = beta.to_vector<double>();
  const std::size_t n = static_cast<std::size_t>(x.shape().back()), rows = v.size() / n;
  NaiveLayerNorm out{std::vector<double>(v.size()), std::vector<double>(rows), std::vector<double>(rows)};
  for (std::size_t r = 0; r < rows; ++r) {
    double m = 0, var = 0;
    for (std::size_t j = 0; j < n; ++j) m += v[r * n + j];
    m /= static_cast<double>(n);
    for (std::size_t j = 0; j < n; ++j) var += (v[r * n + j] - m) * (v[r * n + j] - m);
    var /= static_cast<double>(n);
    out.mean[r] = m;
    out.rstd[r] = 1 / std::sqrt(var + eps);
    for (std::size_t j = 0; j < n; ++j) out.y[r * n + j] = g[j] * (v[r * n + j] - m) * out.rstd[r] + b[j];
  }
  return out;
}

// The composed form layer_normalization had before it was fused: an independent reference for
// its gradients.
Variable composed_ln(const Variable& x, const Variable& gamma, const Variable& beta, double eps) {
  const std::int64_t last = static_cast<std::int64_t>(x.dim()) - 1;
  const Variable centred = F::sub(x, F::mean(x, {last}, true));
  const Variable variance = F::mean(F::mul(centred, centred), {last}, true);
  return F::add(F::mul(F::div(centred, F::sqrt(F::add(variance, eps))), gamma), beta);
}

// layer_normalization against naive_ln (values) and composed_ln (the gradients of all three
// inputs for a random output gradient), in f64.
void check_ln_against_references(const Shape& shape, std::uint64_t seed, double eps, double tol) {
  INFO("shape " << shape_str(shape) << ", eps " << eps);
  const std::int64_t n = shape.back();
  const Tensor x = uniform(shape, seed, -2, 3), gamma = uniform({n}, seed + 1, 0.5, 1.5),
               beta = uniform({n}, seed + 2), gy = uniform(shape, seed + 3);
  Variable xs[2] = {Variable(x.clone(), true), Variable(x.clone(), true)};
  Variable gammas[2] = {Variable(gamma.clone(), true), Variable(gamma.clone(), true)};
  Variable betas[2] = {Variable(beta.clone(), true), Variable(beta.clone(), true)};
  const Variable fused = F::layer_normalization(xs[0], gammas[0], betas[0], eps);
  const Variable composed = composed_ln(xs[1], gammas[1], betas[1], eps);
  const NaiveLayerNorm want = naive_ln(x, gamma, beta, eps);
  REQUIRE(fused.shape() == shape);
  REQUIRE_NEAR_VALUES(fused.data(), want.y, tol);
  fused.backward(gy);
  composed.backward(gy);
  REQUIRE_NEAR_VALUES(xs[0].grad(), xs[1].grad(), tol);
  REQUIRE_NEAR_VALUES(gammas[0].grad(), gammas[1].grad(), tol);
  REQUIRE_NEAR_VALUES(betas[0].grad(), betas[1].grad(), tol);
}

Variables ln(const Variables& v) { return {F::layer_normalization(v[0], v[1], v[2])}; }

}  // namespace

TEST_CASE("layer_normalization of a 3-D input against a loop, gradients of x, gamma and beta",
          "[normalization][gradcheck]") {
  const Shape shape{2, 3, 5};
  const Tensor x = uniform(shape, 80, -2, 2), gamma = uniform({5}, 81, 0.5, 1.5), beta = uniform({5}, 82);
  for (double eps : {1e-6, 0.3}) {
    INFO("eps " << eps);
    const Variable y = F::layer_normalization(Variable(x), Variable(gamma), Variable(beta), eps);
    REQUIRE(y.shape() == shape);
    REQUIRE_NEAR_VALUES(y.data(), naive_ln(x, gamma, beta, eps).y, 1e-12);
  }
  REQUIRE_GRADCHECK(ln, {x, gamma, beta});
  check_ln_against_references(shape, 83, 1e-6, 1e-10);
  SECTION("only some inputs need a gradient") {
    Variable xv(x, true), gv(gamma), bv(beta, true);
    F::sum(F::mul(F::layer_normalization(xv, gv, bv), Variable(uniform(shape, 84)))).backward();
    REQUIRE(xv.grad().defined());
    REQUIRE_FALSE(gv.grad().defined());
    REQUIRE(bv.grad().defined());
  }
}

TEST_CASE("layer_normalization primitives: mean and rstd per row, empty inputs", "[normalization]") {
  const Tensor x = uniform({2, 3, 4}, 90, -2, 2), gamma = uniform({4}, 91, 0.5, 1.5), beta = uniform({4}, 92);
  const LayerNormResult r = layer_norm_forward(x, gamma, beta, 1e-5);
  const NaiveLayerNorm want = naive_ln(x, gamma, beta, 1e-5);
  REQUIRE(r.mean.shape() == Shape{6});
  REQUIRE_NEAR_VALUES(r.y, want.y, 1e-12);
  REQUIRE_NEAR_VALUES(r.mean, want.mean, 1e-12);
  REQUIRE_NEAR_VALUES(r.rstd, want.rstd, 1e-12);
  // No rows: nothing to normalise, and gamma's and beta's gradients are sums over nothing.
  const LayerNormResult none = layer_norm_forward(zeros({0, 4}, DType::f64), gamma, beta, 1e-5);
  REQUIRE(none.y.shape() == Shape{0, 4});
  REQUIRE(none.mean.shape() == Shape{0});
  const LayerNormGrads g0 = layer_norm_backward(zeros({0, 4}, DType::f64), zeros({0, 4}, DType::f64), gamma,
                                                none.mean, none.rstd);
  REQUIRE(g0.gx.shape() == Shape{0, 4});
  REQUIRE_NEAR_VALUES(g0.ggamma, {0, 0, 0, 0});
  REQUIRE_NEAR_VALUES(g0.gbeta, {0, 0, 0, 0});
  // No features: rows of zero variance.
  const Tensor empty_params = zeros({0}, DType::f64);
  const LayerNormResult flat = layer_norm_forward(zeros({3, 0}, DType::f64), empty_params, empty_params, 0.25);
  REQUIRE(flat.y.shape() == Shape{3, 0});
  REQUIRE_NEAR_VALUES(flat.mean, {0, 0, 0});
  REQUIRE_NEAR_VALUES(flat.rstd, {2, 2, 2});
  const LayerNormGrads g1 = layer_norm_backward(zeros({3, 0}, DType::f64), zeros({3, 0}, DType::f64), empty_params,
                                                flat.mean, flat.rstd);
  REQUIRE(g1.gx.shape() == Shape{3, 0});
  REQUIRE(g1.ggamma.shape() == Shape{0});
}

TEST_CASE("Backend's default layer-norm kernels (composed, for backends without fused ones) agree with the CPU's",
          "[normalization]") {
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(dtype_name(dtype));
    const double tol = dtype == DType::f32 ? 1e-5 : 1e-12;
    const std::int64_t rows = 6, n = 5;
    const Tensor x = uniform({2, 3, n}, 95, -2, 2, dtype), gy = uniform({2, 3, n}, 96, -1, 1, dtype);
    const Tensor gamma = uniform({n}, 97, 0.5, 1.5, dtype), beta = uniform({n}, 98, -1, 1, dtype);
    const LayerNormResult fused = layer_norm_forward(x, gamma, beta, 1e-5);
    Tensor y(x.shape(), dtype), mean({rows}, dtype), rstd({rows}, dtype);
    // Qualified calls reach the base class's defaults past the CPU backend's overrides.
    Backend& cpu = cpu_backend();
    cpu.Backend::layer_norm_forward(x, gamma, beta, rows, n, 1e-5, y, mean, rstd);
    REQUIRE_NEAR_VALUES(y, fused.y, tol);
    REQUIRE_NEAR_VALUES(mean, fused.mean, tol);
    REQUIRE_NEAR_VALUES(rstd, fused.rstd, tol);
    const LayerNormGrads want = layer_norm_backward(gy, x, gamma, fused.mean, fused.rstd);
    Tensor gx(x.shape(), dtype), ggamma({n}, dtype), gbeta({n}, dtype);
    cpu.Backend::layer_norm_backward(gy, x, gamma, fused.mean, fused.rstd, rows, n, gx, ggamma, gbeta);
    REQUIRE_NEAR_VALUES(gx, want.gx, tol);
    REQUIRE_NEAR_VALUES(ggamma, want.ggamma, tol);
    REQUIRE_NEAR_VALUES(gbeta, want.gbeta, tol);
  }
}

TEST_CASE("layer_normalization of a constant row: y = beta, finite gradients", "[normalization]") {
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(dtype_name(dtype));
    const double eps = 1e-6;
    // Row 0 constant (variance exactly 0), row 1 not.
    const Tensor x = gc_util::f64({2.5, 2.5, 2.5, 2.5, 1, -1, 0.5, 3}, {2, 4}).to(dtype);
    const Tensor gamma = gc_util::f64({0.5, 1.5, -1, 2}, {4}).to(dtype), beta = gc_util::f64({0.1, -0.2, 0.3, 0.4}, {4}).to(dtype);
    Variable xv(x, true), gv(gamma, true), bv(beta, true);
    const Variable y = F::layer_normalization(xv, gv, bv, eps);
    const std::vector<double> yv = y.data().to_vector<double>();
    for (int j = 0; j < 4; ++j) CHECK(yv[j] == beta.to_vector<double>()[j]);
    const Tensor gy = gc_util::f64({1, -2, 0.5, 0.25, 1, 1, 1, 1}, {2, 4}).to(dtype);
    y.backward(gy);
    for (const Variable* v : {&xv, &gv, &bv}) {
      for (double g : v->grad().to_vector<double>()) CHECK(std::isfinite(g));
    }
    // With xhat = 0 the row's gradient is rstd * (g - mean(g)), g = gy * gamma; and it adds
    // nothing to gamma's gradient.
    const double rstd = 1 / std::sqrt(eps);
    const std::vector<double> g = {0.5, -3, -0.5, 0.5};
    const double mean_g = (0.5 - 3 - 0.5 + 0.5) / 4;
    const std::vector<double> gx = xv.grad().to_vector<double>();
    for (int j = 0; j < 4; ++j) CHECK(gx[j] == Approx(rstd * (g[j] - mean_g)).epsilon(dtype == DType::f32 ? 1e-5 : 1e-12));
    const NaiveLayerNorm row1 = naive_ln(gc_util::f64({1, -1, 0.5, 3}, {1, 4}), ones({4}, DType::f64),
                                         zeros({4}, DType::f64), eps);
    for (int j = 0; j < 4; ++j)
      CHECK(gv.grad().to_vector<double>()[j] == Approx(row1.y[j]).epsilon(dtype == DType::f32 ? 1e-5 : 1e-12));
  }
}

TEST_CASE("layer_normalization in f32 agrees with f64", "[normalization][f32]") {
  gc_util::check_f32_against_f64(ln, {uniform({2, 3, 5}, 100, -2, 2), uniform({5}, 101, 0.5, 1.5), uniform({5}, 102)});
  gc_util::check_f32_against_f64(ln, {uniform({64, 300}, 103, -2, 2), uniform({300}, 104, 0.5, 1.5),
                                      uniform({300}, 105)});
}

TEST_CASE("layer_normalization in f32 of rows far from 0 keeps its accuracy", "[normalization][f32]") {
  // 1000 + k / 64: exact in f32, a spread of about 1 around 1000. The statistics accumulate and
  // the rows are centred in double, so y is as accurate as f32 can hold it (centring with an f32
  // mean would be off by up to half an ulp of 1000, 3e-5).
  std::vector<double> values;
  for (int i = 0; i < 8 * 96; ++i) values.push_back(1000 + ((i * 37) % 129) / 64.0);
  const Tensor x = gc_util::f64(values, {8, 96}), gamma = uniform({96}, 106, 0.5, 1.5), beta = uniform({96}, 107);
  const Tensor gamma32 = gamma.to(DType::f32), beta32 = beta.to(DType::f32);
  const Variable y = F::layer_normalization(Variable(x.to(DType::f32)), Variable(gamma32), Variable(beta32));
  REQUIRE_NEAR_VALUES(y.data(), naive_ln(x, gamma32.to(DType::f64), beta32.to(DType::f64), 1e-6).y, 1e-6);
}

TEST_CASE("layer_normalization over long rows and many rows against the references", "[normalization]") {
  check_ln_against_references({5, 1000}, 110, 1e-6, 1e-10);
  check_ln_against_references({4097, 7}, 120, 1e-6, 1e-10);  // rows split over threads
  check_ln_against_references({3, 11, 129}, 130, 1e-3, 1e-10);
}

TEST_CASE("layer_normalization rejects mismatched operands", "[normalization][errors]") {
  const Variable x(uniform({4, 3}, 140), true);
  const Variable g(uniform({3}, 141)), b(uniform({3}, 142));
  CHECK_THROWS_WITH(F::layer_normalization(x, Variable(uniform({2}, 143)), b),
                    Contains("layer_normalization: x must be [..., features] with gamma and beta [features]") &&
                        Contains("gamma f64[2]"));
  CHECK_THROWS_WITH(F::layer_normalization(x, g, Variable(uniform({3, 1}, 144))), Contains("beta f64[3, 1]"));
  CHECK_THROWS_WITH(F::layer_normalization(x, Variable(uniform({3}, 145, -1, 1, DType::f32)), b),
                    Contains("layer_normalization: gamma f32[3] and x f64[4, 3] have different dtypes"));
  CHECK_THROWS_WITH(F::layer_normalization(Variable(uniform({4, 3}, 146, -1, 1, DType::f32)), Variable(g.data().to(DType::f32)), b),
                    Contains("layer_normalization: beta f64[3]") && Contains("different dtypes"));
  CHECK_THROWS_WITH(F::layer_normalization(Variable(gc_util::i32({1, 2, 3}, {1, 3})), g, b), Contains("floating"));
  CHECK_THROWS_WITH(F::layer_normalization(x, g, b, 0), Contains("eps must be positive"));
  // The primitives name themselves and the tensors involved.
  const Tensor xt = x.data(), gt = g.data();
  CHECK_THROWS_WITH(layer_norm_forward(xt, gt, uniform({4}, 147), 1e-5),
                    Contains("layer_norm_forward: beta f64[4] must be [n] = [3] for x f64[4, 3]"));
  CHECK_THROWS_WITH(layer_norm_forward(xt, gt, gt, -1), Contains("layer_norm_forward: eps must not be negative"));
  const LayerNormResult r = layer_norm_forward(xt, gt, gt, 1e-5);
  CHECK_THROWS_WITH(layer_norm_backward(xt, xt, gt, uniform({3}, 148), r.rstd),
                    Contains("layer_norm_backward: mean f64[3] must be [rows] = [4]"));
  CHECK_THROWS_WITH(layer_norm_backward(uniform({4, 3}, 149, -1, 1, DType::f32), xt, gt, r.mean, r.rstd),
                    Contains("layer_norm_backward") && Contains("different dtypes"));
  CHECK_THROWS_WITH(layer_norm_backward(uniform({3, 4}, 150), xt, gt, r.mean, r.rstd),
                    Contains("layer_norm_backward: gy f64[3, 4] must have the shape of x f64[4, 3]"));
}
