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

TEST_CASE("batch-normalisation primitives reject bad operands", "[normalization][errors]") {
  REQUIRE_THROWS_WITH(batch_norm_statistics(zeros({3})), Contains("[N, C, ...]"));
  REQUIRE_THROWS_WITH(batch_norm_statistics(zeros({3, 2}, DType::i32)), Contains("floating"));
  const Tensor x = zeros({4, 3});
  REQUIRE_THROWS_WITH(channel_affine(x, zeros({2}), zeros({3})), Contains("scale f32[2]") && Contains("[C] = [3]"));
  REQUIRE_THROWS_WITH(channel_affine(x, zeros({3}, DType::f64), zeros({3})), Contains("dtypes"));
  REQUIRE_THROWS_WITH(channel_affine(x, zeros({3}), zeros({4, 2}), zeros({3}), zeros({3})), Contains("z f32[4, 2]"));
  REQUIRE_THROWS_WITH(batch_norm_backward_sums(zeros({4, 2}), x, zeros({3})), Contains("gy f32[4, 2]"));
}
