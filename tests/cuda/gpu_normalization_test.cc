// Batch normalisation on cuda:0 against the CPU: the per-channel primitives (statistics,
// affine maps, backward sums) over [N, C] and [N, C, H, W] layouts small and large, and the
// differentiable batch_normalization (with running statistics) and fixed_batch_normalization.
// Layer normalisation likewise: its fused primitives over rows short (a warp per row) and long
// (a block per row), few and many (the column sums of ggamma and gbeta in several chunks), and
// the differentiable layer_normalization.
#include <catch2/catch.hpp>

#include "core/ops/normalization.h"
#include "tests/cuda/gpu_test_util.h"

using namespace tandem;
using namespace gpu_test;
using Catch::Matchers::Contains;

namespace {

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all = {
      {4, 3},         {1, 5},          {2, 3, 4, 5},      {3, 2, 7},      {512, 40},
      {8, 4, 32, 32}, {2, 300, 1, 1},  {64, 3, 64, 64},  {256, 1, 4096}, {1, 64, 1000},
  };
  return all;
}

}  // namespace

TEST_CASE("statistics, affine maps and backward sums per channel", "[normalization]") {
  for (const Shape& shape : shapes()) {
    for (DType dtype : {DType::f64, DType::f32}) {
      INFO(shape_str(shape) << " " << dtype_name(dtype));
      const std::int64_t C = shape[1];
      // Offset from zero so that a one-pass variance (E[x^2] - E[x]^2) would lose its digits.
      const Tensor x = uniform(shape, 1, 99, 101, dtype);
      {
        INFO("batch_norm_statistics");
        // Accumulated in double on both (the front end's contract): f32 results within an ulp or so.
        check_unary([](const Tensor& t) {
          const auto r = batch_norm_statistics(t);
          return std::vector<Tensor>{r.first, r.second};
        }, x, for_dtype(dtype, Tolerance{1e-6, 1e-6}, near(1e-12)));
      }
      const Tensor scale = uniform({C}, 2, -2, 2, dtype), shift = uniform({C}, 3, -2, 2, dtype);
      const Tensor z = uniform(shape, 4, -1, 1, dtype), zscale = uniform({C}, 5, -2, 2, dtype);
      {
        INFO("channel_affine");
        check_op([](std::vector<Tensor>& v) { return std::vector<Tensor>{channel_affine(v[0], v[1], v[2])}; },
                 {x, scale, shift}, for_dtype(dtype, 1e-6, 1e-14));
        check_op([](std::vector<Tensor>& v) {
          return std::vector<Tensor>{channel_affine(v[0], v[1], v[2], v[3], v[4])};
        }, {x, scale, z, zscale, shift}, for_dtype(dtype, 1e-6, 1e-14));
      }
      {
        INFO("batch_norm_backward_sums (accumulated in double too)");
        const Tensor gy = uniform(shape, 6, -1, 1, dtype);
        const Tensor mean = batch_norm_statistics(x).first;
        const std::int64_t per_channel = x.numel() / C;
        const double scale_of_sums = std::sqrt(static_cast<double>(per_channel));
        check_op([](std::vector<Tensor>& v) {
          const auto r = batch_norm_backward_sums(v[0], v[1], v[2]);
          return std::vector<Tensor>{r.first, r.second};
        }, {gy, x, mean}, for_dtype(dtype, near(1e-6), near(1e-12 * scale_of_sums)));
      }
    }
  }
}

TEST_CASE("batch_norm_grad_x combines the sums into one affine map", "[normalization]") {
  for (DType dtype : {DType::f64, DType::f32}) {
    const Shape shape{16, 8, 10, 10};
    const Tensor x = uniform(shape, 10, -2, 3, dtype), gy = uniform(shape, 11, -1, 1, dtype);
    const Tensor gamma = uniform({8}, 12, 0.5, 1.5, dtype);
    const auto stats = batch_norm_statistics(x);
    const Tensor invstd = rdiv(1, sqrt(stats.second + 2e-5));
    const auto sums = batch_norm_backward_sums(gy, x, stats.first);
    check_op([](std::vector<Tensor>& v) {
      return std::vector<Tensor>{batch_norm_grad_x(v[0], v[1], v[2], v[3], v[4], v[5], v[6], 1600)};
    }, {gy, x, gamma, stats.first, invstd, sums.first, sums.second}, for_dtype(dtype, 1e-5, 1e-13));
  }
}

TEST_CASE("batch_normalization values, gradients and running statistics", "[normalization][autograd]") {
  for (const Shape& shape : {Shape{4, 3}, Shape{2, 3, 2, 2}, Shape{32, 16, 8, 8}, Shape{128, 64}}) {
    for (DType dtype : {DType::f64, DType::f32}) {
      INFO(shape_str(shape) << " " << dtype_name(dtype));
      const std::int64_t C = shape[1];
      const Tensor x = uniform(shape, 20, -2, 3, dtype);
      const Tensor gamma = uniform({C}, 21, 0.5, 1.5, dtype), beta = uniform({C}, 22, -1, 1, dtype);
      check_function([](const Variables& v) -> Variables { return {F::batch_normalization(v[0], v[1], v[2])}; },
                     {x, gamma, beta}, for_dtype(dtype, 1e-5, 1e-12), for_dtype(dtype, 1e-4, 1e-11));
      // The running averages are updated in place on the device of x.
      const Tensor mean0 = uniform({C}, 23, -1, 1, dtype), var0 = uniform({C}, 24, 0.5, 2, dtype);
      check_op([](std::vector<Tensor>& v) {
        Tensor& running_mean = v[3];
        Tensor& running_var = v[4];
        const Variable y = F::batch_normalization(Variable(v[0]), Variable(v[1]), Variable(v[2]), 1e-3,
                                                  &running_mean, &running_var, 0.8);
        return std::vector<Tensor>{y.data()};
      }, {x, gamma, beta, mean0, var0}, for_dtype(dtype, 1e-5, 1e-12));
      const Tensor mean = uniform({C}, 25, -1, 1, dtype), var = uniform({C}, 26, 0.5, 2, dtype);
      check_function([](const Variables& v) -> Variables {
        return {F::fixed_batch_normalization(v[0], v[1], v[2], v[3], v[4])};
      }, {x, gamma, beta, mean, var}, for_dtype(dtype, 1e-5, 1e-12), for_dtype(dtype, 1e-4, 1e-11));
    }
  }
}

TEST_CASE("batch_normalization numerical gradients on the GPU", "[normalization][gradcheck]") {
  REQUIRE_GPU_GRADCHECK([](const Variables& v) -> Variables { return {F::batch_normalization(v[0], v[1], v[2])}; },
                        {uniform({3, 2, 2, 2}, 30, -2, 2, DType::f64), uniform({2}, 31, 0.5, 1.5, DType::f64),
                         uniform({2}, 32, -1, 1, DType::f64)});
  REQUIRE_GPU_GRADCHECK([](const Variables& v) -> Variables {
    return {F::fixed_batch_normalization(v[0], v[1], v[2], v[3], v[4])};
  }, {uniform({4, 3}, 33, -2, 2, DType::f64), uniform({3}, 34, 0.5, 1.5, DType::f64), uniform({3}, 35, -1, 1, DType::f64),
      uniform({3}, 36, -1, 1, DType::f64), uniform({3}, 37, 0.5, 2, DType::f64)});
}

TEST_CASE("layer_norm_forward and layer_norm_backward per row", "[normalization][layer_norm]") {
  // Rows of up to 1024 features take a warp each, longer ones a block; 4097 rows make ggamma's
  // and gbeta's column sums several chunks, the last one short.
  for (const Shape& shape : std::vector<Shape>{{4, 5}, {2, 3, 6}, {1, 7}, {4097, 64}, {300, 1024}, {8, 1025},
                                               {3, 5000}, {70000, 3}}) {
    for (DType dtype : {DType::f64, DType::f32}) {
      INFO(shape_str(shape) << " " << dtype_name(dtype));
      const std::int64_t n = shape.back();
      const Tensor x = uniform(shape, 40, -2, 3, dtype), gy = uniform(shape, 41, -1, 1, dtype);
      const Tensor gamma = uniform({n}, 42, 0.5, 1.5, dtype), beta = uniform({n}, 43, -1, 1, dtype);
      {
        INFO("layer_norm_forward (f32 statistics in float on the GPU, in double on the CPU)");
        check_op([](std::vector<Tensor>& v) {
          const LayerNormResult r = layer_norm_forward(v[0], v[1], v[2], 1e-5);
          return std::vector<Tensor>{r.y, r.mean, r.rstd};
        }, {x, gamma, beta}, for_dtype(dtype, 1e-5, 1e-12));
      }
      {
        INFO("layer_norm_backward");
        const LayerNormResult r = layer_norm_forward(x, gamma, beta, 1e-5);
        check_op([](std::vector<Tensor>& v) {
          const LayerNormGrads g = layer_norm_backward(v[0], v[1], v[2], v[3], v[4]);
          return std::vector<Tensor>{g.gx, g.ggamma, g.gbeta};
        }, {gy, x, gamma, r.mean, r.rstd}, for_dtype(dtype, near(1e-4), near(1e-11)));
      }
    }
  }
}

TEST_CASE("layer_normalization values and gradients, a constant row, numerical gradients",
          "[normalization][layer_norm][autograd]") {
  for (const Shape& shape : std::vector<Shape>{{4, 5}, {2, 3, 6}, {64, 128}, {16, 2000}}) {
    for (DType dtype : {DType::f64, DType::f32}) {
      INFO(shape_str(shape) << " " << dtype_name(dtype));
      const std::int64_t n = shape.back();
      check_function([](const Variables& v) -> Variables { return {F::layer_normalization(v[0], v[1], v[2])}; },
                     {uniform(shape, 50, -2, 3, dtype), uniform({n}, 51, 0.5, 1.5, dtype),
                      uniform({n}, 52, -1, 1, dtype)},
                     for_dtype(dtype, 1e-5, 1e-12), for_dtype(dtype, 1e-4, 1e-11));
    }
  }
  // Variance exactly 0: y = beta and finite gradients on both.
  const Tensor constant_row = tandem::from_vector<double>({2.5, 2.5, 2.5, 2.5, 1, -1, 0.5, 3}, {2, 4});
  for (DType dtype : {DType::f64, DType::f32}) {
    check_function([](const Variables& v) -> Variables { return {F::layer_normalization(v[0], v[1], v[2])}; },
                   {constant_row.to(dtype), uniform({4}, 53, 0.5, 1.5, dtype), uniform({4}, 54, -1, 1, dtype)},
                   for_dtype(dtype, 1e-5, 1e-12), for_dtype(dtype, 1e-4, 1e-11));
  }
  REQUIRE_GPU_GRADCHECK([](const Variables& v) -> Variables { return {F::layer_normalization(v[0], v[1], v[2])}; },
                        {uniform({2, 3, 5}, 55, -2, 2, DType::f64), uniform({5}, 56, 0.5, 1.5, DType::f64),
                         uniform({5}, 57, -1, 1, DType::f64)});
}

TEST_CASE("normalisation errors are the CPU's", "[normalization][errors]") {
  CHECK_THROWS_WITH(batch_norm_statistics(zeros({3}, DType::f32, gpu())), Contains("[N, C, ...]"));
  CHECK_THROWS_WITH(batch_norm_statistics(zeros({3, 2}, DType::i32, gpu())), Contains("floating"));
  CHECK_THROWS_WITH(channel_affine(zeros({4, 3}, DType::f32, gpu()), zeros({2}, DType::f32, gpu()),
                                   zeros({3}, DType::f32, gpu())),
                    Contains("scale f32[2]"));
  const std::string message = require_same_error([](std::vector<Tensor>& v) {
    return std::vector<Tensor>{layer_norm_forward(v[0], v[1], v[2], 1e-5).y};
  }, {uniform({4, 3}, 60), uniform({3}, 61), uniform({4}, 62)});
  CHECK_THAT(message, Contains("layer_norm_forward: beta f32[4]") && Contains("must be [n] = [3]"));
}
