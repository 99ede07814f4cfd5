// Batch-normalisation primitives (core/ops/normalization.h) against naive per-channel loops.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/ops.h"
#include "core/ops/normalization.h"
#include "tests/core/test_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using test_util::uniform;
using test_util::values;

namespace {

// Channel of flat element i of an [N, C, inner...] tensor.
std::int64_t channel_of(std::int64_t i, const Shape& shape) {
  std::int64_t inner = 1;
  for (std::size_t d = 2; d < shape.size(); ++d) inner *= shape[d];
  return (i / inner) % shape[1];
}

}  // namespace

TEST_CASE("batch_norm_statistics, channel_affine and backward sums match naive loops", "[normalization]") {
  for (const Shape& shape : {Shape{4, 3}, Shape{1, 5}, Shape{2, 3, 4, 5}, Shape{3, 2, 7}, Shape{512, 40},
                             Shape{8, 4, 32, 32}, Shape{2, 300, 1, 1}}) {
    for (DType dtype : {DType::f64, DType::f32}) {
      INFO(shape_str(shape) << " " << dtype);
      const double tol = dtype == DType::f64 ? 1e-12 : 1e-5;
      const std::int64_t C = shape[1];
      // Offset from zero so that a one-pass variance would lose digits.
      const Tensor x = uniform(shape, 1, 99, 101, dtype);
      const std::vector<double> xv = values(x);
      std::vector<double> mean(C, 0), var(C, 0), count(C, 0);
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        mean[channel_of(i, shape)] += xv[i];
        count[channel_of(i, shape)] += 1;
      }
      for (std::int64_t c = 0; c < C; ++c) mean[c] /= count[c];
      for (std::int64_t i = 0; i < x.numel(); ++i) var[channel_of(i, shape)] += std::pow(xv[i] - mean[channel_of(i, shape)], 2);
      for (std::int64_t c = 0; c < C; ++c) var[c] /= count[c];
      const auto [m, v] = batch_norm_statistics(x);
      REQUIRE(m.shape() == Shape{C});
      REQUIRE_VALUES(m, mean, tol, tol);
      REQUIRE_VALUES(v, var, dtype == DType::f64 ? 1e-9 : 1e-3, 1e-6);

      const Tensor scale = uniform({C}, 2, -2, 2, dtype), shift = uniform({C}, 3, -2, 2, dtype);
      const Tensor z = uniform(shape, 4, -1, 1, dtype), zscale = uniform({C}, 5, -2, 2, dtype);
      const std::vector<double> s = values(scale), t = values(shift), zv = values(z), zs = values(zscale);
      std::vector<double> want1(x.numel()), want2(x.numel());
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        const std::int64_t c = channel_of(i, shape);
        want1[i] = xv[i] * s[c] + t[c];
        want2[i] = xv[i] * s[c] + zv[i] * zs[c] + t[c];
      }
      REQUIRE_VALUES(channel_affine(x, scale, shift), want1, tol, tol * 100);
      REQUIRE_VALUES(channel_affine(x, scale, z, zscale, shift), want2, tol, tol * 100);

      const Tensor gy = uniform(shape, 6, -1, 1, dtype);
      const std::vector<double> g = values(gy), mv = values(m);
      std::vector<double> s0(C, 0), s1(C, 0);
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        const std::int64_t c = channel_of(i, shape);
        s0[c] += g[i];
        s1[c] += g[i] * (xv[i] - mv[c]);
      }
      const auto [sum_gy, sum_gy_xmu] = batch_norm_backward_sums(gy, x, m);
      REQUIRE_VALUES(sum_gy, s0, tol, tol * 10);
      REQUIRE_VALUES(sum_gy_xmu, s1, tol, tol * 10);
    }
  }
}

TEST_CASE("batch_norm_affine and batch_norm_update_running follow Chainer's formulas", "[normalization]") {
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(dtype);
    const double tol = dtype == DType::f64 ? 1e-12 : 1e-5;
    const Shape shape{3, 2, 5};
    const Tensor x = uniform(shape, 1, -3, 3, dtype);
    const Tensor gamma = uniform({2}, 2, -2, 2, dtype), beta = uniform({2}, 3, -2, 2, dtype);
    const Tensor mean = uniform({2}, 4, -1, 1, dtype), var = uniform({2}, 5, 0.5, 2, dtype);
    const double eps = 1e-3;
    const std::vector<double> xv = values(x), g = values(gamma), b = values(beta), m = values(mean), v = values(var);
    std::vector<double> want(x.numel()), invstd(2);
    for (std::int64_t c = 0; c < 2; ++c) invstd[c] = 1 / std::sqrt(v[c] + eps);
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const std::int64_t c = channel_of(i, shape);
      want[i] = g[c] * (xv[i] - m[c]) * invstd[c] + b[c];
    }
    const BatchNormAffine out = batch_norm_affine(x, gamma, beta, mean, var, eps);
    REQUIRE_VALUES(out.y, want, tol * 10, tol * 10);
    REQUIRE_VALUES(out.invstd, invstd, tol, tol);

    Tensor running_mean = full({2}, 1.0, dtype), running_var = full({2}, 2.0, dtype);
    batch_norm_update_running(&running_mean, &running_var, mean, var, 15, 0.75);
    REQUIRE_VALUES(running_mean, {0.75 + 0.25 * m[0], 0.75 + 0.25 * m[1]}, tol, tol);
    REQUIRE_VALUES(running_var, {1.5 + 0.25 * v[0] * 15 / 14, 1.5 + 0.25 * v[1] * 15 / 14}, tol, tol);
    // One value per channel: the unbiased correction divides by max(count - 1, 1); either may be null.
    batch_norm_update_running(nullptr, &running_var, mean, var, 1, 0);
    REQUIRE_VALUES(running_var, {v[0], v[1]}, tol, tol);
    batch_norm_update_running(&running_mean, nullptr, mean, var, 1, 0);
    REQUIRE_VALUES(running_mean, {m[0], m[1]}, tol, tol);
  }
}

TEST_CASE("batch-normalisation primitives reject bad operands", "[normalization][errors]") {
  REQUIRE_THROWS_WITH(batch_norm_statistics(zeros({3})), Contains("[N, C, ...]"));
  REQUIRE_THROWS_WITH(batch_norm_statistics(zeros({3, 2}, DType::i32)), Contains("floating"));
  const Tensor x = zeros({4, 3});
  REQUIRE_THROWS_WITH(channel_affine(x, zeros({2}), zeros({3})), Contains("scale f32[2]") && Contains("[C] = [3]"));
  REQUIRE_THROWS_WITH(channel_affine(x, zeros({3}, DType::f64), zeros({3})), Contains("dtypes"));
  REQUIRE_THROWS_WITH(channel_affine(x, zeros({3}), zeros({4, 2}), zeros({3}), zeros({3})), Contains("z f32[4, 2]"));
  REQUIRE_THROWS_WITH(batch_norm_backward_sums(zeros({4, 2}), x, zeros({3})), Contains("gy f32[4, 2]"));
}
