// Gradients and behaviour of autograd/functions/normalization.h: batch_normalization and
// fixed_batch_normalization.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

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
