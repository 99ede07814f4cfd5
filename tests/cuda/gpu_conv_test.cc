// Convolution kernels on cuda:0 against the CPU: im2col / col2im over every window geometry,
// conv2d and its two gradients with groups, strides, padding, dilation, pointwise and
// depthwise kernels, bias or none, f32 and f64, small and large; empty batches. The conv2d
// cases run under each choice of cuDNN algorithms: the default (deterministic, direct, cuDNN's
// heuristics), atomics allowed, benchmark mode, FFT/Winograd allowed, and PyTorch's mode (all
// three).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

#include "core/ops/conv.h"
#include "tests/cuda/gpu_test_util.h"

using namespace tandem;
using namespace gpu_test;
using Catch::Matchers::Contains;

namespace {

struct Window {
  std::int64_t kh, kw, sy, sx, py, px, dy, dx;
  bool cover_all;
};

Conv2DParams params_of(const Window& w) {
  Conv2DParams p;
  p.stride_y = w.sy;
  p.stride_x = w.sx;
  p.pad_y = w.py;
  p.pad_x = w.px;
  p.dilate_y = w.dy;
  p.dilate_x = w.dx;
  return p;
}

std::string describe(const Shape& x, const Window& w) {
  std::ostringstream out;
  out << "x " << shape_str(x) << " kernel " << w.kh << "x" << w.kw << " stride " << w.sy << "x" << w.sx << " pad "
      << w.py << "x" << w.px << " dilate " << w.dy << "x" << w.dx << (w.cover_all ? " cover_all" : "");
  return out.str();
}

// The window geometries of tests/core/conv_test.cc, plus larger ones.
const std::vector<std::pair<Shape, Window>>& window_cases() {
  static const std::vector<std::pair<Shape, Window>> cases = {
      {{2, 3, 5, 5}, {3, 3, 1, 1, 0, 0, 1, 1, false}},
      {{2, 3, 5, 5}, {3, 3, 1, 1, 1, 1, 1, 1, false}},  // pad 1 ("same")
      {{1, 2, 7, 6}, {3, 3, 2, 2, 1, 1, 1, 1, false}},  // stride 2
      {{1, 2, 7, 8}, {3, 3, 1, 1, 2, 2, 2, 2, false}},  // dilation 2
      {{2, 1, 6, 9}, {2, 4, 1, 3, 0, 1, 1, 1, false}},  // non-square kernel, strides, pads
      {{1, 2, 4, 4}, {1, 1, 1, 1, 0, 0, 1, 1, false}},  // 1x1
      {{1, 2, 5, 5}, {2, 2, 2, 2, 0, 0, 1, 1, true}},   // cover_all adds a window at the edge
      {{1, 1, 3, 3}, {1, 1, 2, 2, 1, 1, 1, 1, false}},  // windows entirely in the padding
      {{1, 2, 3, 4}, {3, 4, 1, 1, 0, 0, 1, 1, false}},  // kernel = input: one output
      {{3, 2, 4, 5}, {2, 3, 3, 2, 1, 2, 2, 1, true}},   // everything at once
      {{2, 3, 6, 8}, {2, 2, 2, 2, 0, 0, 1, 1, false}},
      {{1, 2, 5, 7}, {2, 2, 2, 2, 0, 0, 1, 1, false}},  // the last row and column unread
      {{8, 16, 28, 28}, {3, 3, 1, 1, 1, 1, 1, 1, false}},  // many blocks
      {{4, 8, 33, 31}, {5, 3, 2, 1, 2, 1, 1, 3, false}},
  };
  return cases;
}

struct ConvCase {
  Shape x, w;
  Conv2DParams p;
  bool bias;
};

Conv2DParams conv_params(std::int64_t s, std::int64_t p, std::int64_t d = 1, std::int64_t g = 1) {
  return Conv2DParams::make(s, p, d, g);
}

// Sums of `terms` products of magnitude <= 1: cuDNN may pick any algorithm (implicit GEMM,
// Winograd, FFT), whose rounding differs from the CPU's GEMM by more than a plain
// reordering, hence the looser f32 bound.
Tolerance conv_tolerance(DType dtype, std::int64_t terms) {
  const double scale = std::sqrt(static_cast<double>(std::max<std::int64_t>(terms, 1)));
  return for_dtype(dtype, Tolerance{2e-4, 1e-4 * scale}, Tolerance{1e-11, 1e-12 * scale});
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// FFT and Winograd round relative to the largest magnitude of what they transform, not to each
// output's own terms: with them allowed, an absolute error up to a small fraction of the
// reference's largest magnitude passes too.
Tolerance with_transforms(Tolerance tol, const Tensor& reference) {
  const double fraction = reference.dtype() == DType::f32 ? 1e-4 : 1e-11;
  tol.atol = std::max(tol.atol, fraction * max_abs(reference));
  return tol;
}

// The switches of the convolution algorithm choice, set for a test and restored after it.
struct ConvMode {
  bool deterministic, benchmark, direct_only;
  static ConvMode current() { return {cuda::deterministic(), cuda::cudnn_benchmark(), cuda::conv_direct_only()}; }
  void apply() const {
    cuda::set_deterministic(deterministic);
    cuda::set_cudnn_benchmark(benchmark);
    cuda::set_conv_direct_only(direct_only);
  }
  bool operator==(const ConvMode& o) const {
    return deterministic == o.deterministic && benchmark == o.benchmark && direct_only == o.direct_only;
  }
};
constexpr ConvMode kDefaultMode{true, false, true};
constexpr ConvMode kTorchMode{false, true, false};  // cudnn.benchmark, non-deterministic, FFT/Winograd

struct RestoreConvMode {
  ConvMode saved = ConvMode::current();
  ~RestoreConvMode() { saved.apply(); }
};

}  // namespace

TEST_CASE("im2col and col2im over every window geometry", "[conv][im2col]") {
  std::uint64_t seed = 1;
  for (const auto& c : window_cases()) {
    const Shape& xs = c.first;
    const Window& w = c.second;
    INFO(describe(xs, w));
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO(dtype_name(dtype));
      const Tensor x = uniform(xs, seed++, -1, 1, dtype);
      check_unary([&](const Tensor& t) { return im2col(t, w.kh, w.kw, params_of(w), w.cover_all); }, x, kExact);
      const Tensor col = im2col(x, w.kh, w.kw, params_of(w), w.cover_all);
      // col2im sums up to kh * kw overlapping entries per element, in some order.
      check_unary([&](const Tensor& t) { return col2im(t, xs, w.kh, w.kw, params_of(w), w.cover_all); },
                  uniform(col.shape(), seed++, -1, 1, dtype), for_dtype(dtype, 1e-6, 1e-14));
    }
  }
  // A view with an offset (the second image of a batch), and col2im overwriting its output.
  const Tensor both = uniform({2, 2, 4, 4}, 200, -1, 1, DType::f64);
  check_unary([](const Tensor& t) { return im2col(t.slice_rows(1, 2), 3, 3, conv_params(1, 1)); }, both, kExact);
  check_unary([](const Tensor& t) {
    const Tensor col = im2col(t, 3, 3, conv_params(1, 1));
    const Tensor first = col2im(col, t.shape(), 3, 3, conv_params(1, 1));
    return col2im(col, t.shape(), 3, 3, conv_params(1, 1)) - first;  // zero: nothing accumulated across calls
  }, both, kExact);
}

namespace {

// `transforms`: FFT and Winograd may run (see with_transforms).
void check_conv_against_cpu(bool transforms = false) {
  Conv2DParams uneven = conv_params(1, 0);
  uneven.stride_y = 2;
  uneven.pad_x = 2;
  uneven.dilate_y = 2;
  const std::vector<ConvCase> cases = {
      {{2, 3, 6, 6}, {4, 3, 3, 3}, conv_params(1, 1), true},
      {{2, 3, 7, 7}, {4, 3, 3, 3}, conv_params(2, 1), true},
      {{1, 2, 9, 8}, {3, 2, 3, 3}, conv_params(1, 2, 2), false},       // dilation 2
      {{2, 4, 5, 5}, {6, 2, 3, 3}, conv_params(1, 1, 1, 2), true},     // groups 2
      {{2, 6, 5, 4}, {3, 2, 2, 2}, conv_params(1, 0, 1, 3), false},    // groups 3, one output each
      {{3, 4, 5, 6}, {5, 4, 1, 1}, conv_params(1, 0), true},           // pointwise
      {{2, 4, 6, 6}, {4, 1, 1, 1}, conv_params(1, 0, 1, 4), true},     // pointwise depthwise
      {{2, 8, 9, 9}, {8, 1, 3, 3}, conv_params(2, 1, 1, 8), true},     // depthwise 3x3, stride 2
      {{1, 3, 7, 5}, {2, 3, 2, 4}, uneven, true},
      {{1, 1, 1, 1}, {1, 1, 1, 1}, conv_params(1, 0), true},
      {{30, 16, 32, 32}, {4, 16, 3, 3}, conv_params(1, 1), true},
      {{64, 1, 28, 28}, {32, 1, 3, 3}, conv_params(1, 1), true},       // the examples' first layer
      {{16, 64, 14, 14}, {128, 64, 3, 3}, conv_params(1, 1), false},
      {{4, 32, 17, 19}, {48, 8, 5, 3}, Conv2DParams().stride(2, 1).pad(2, 1).dilate(1, 2).with_groups(4), true},
  };
  std::uint64_t seed = 300;
  for (const ConvCase& c : cases) {
    INFO("x " << shape_str(c.x) << " W " << shape_str(c.w) << " stride " << c.p.stride_y << "x" << c.p.stride_x
              << " pad " << c.p.pad_y << "x" << c.p.pad_x << " dilate " << c.p.dilate_y << "x" << c.p.dilate_x
              << " groups " << c.p.groups << (c.bias ? " bias" : ""));
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO(dtype_name(dtype));
      const Tensor x = uniform(c.x, seed++, -1, 1, dtype);
      const Tensor W = uniform(c.w, seed++, -1, 1, dtype);
      const Tensor b = c.bias ? uniform({c.w[0]}, seed++, -1, 1, dtype) : Tensor();
      const Tensor y = conv2d(x, W, b, c.p);
      const Tensor gy = uniform(y.shape(), seed++, -1, 1, dtype);
      const std::int64_t taps = c.w[1] * c.w[2] * c.w[3];
      const std::int64_t outputs_per_weight = c.x[0] * y.size(2) * y.size(3);
      // The CPU's result (computed again by the checks) sets the scale of the transforms' error.
      auto tolerance = [&](Tolerance tol, const std::function<Tensor()>& reference) {
        return transforms ? with_transforms(tol, reference()) : tol;
      };
      {
        INFO("forward");
        check_op([&](std::vector<Tensor>& v) { return std::vector<Tensor>{conv2d(v[0], v[1], v[2], c.p)}; },
                 {x, W, b}, tolerance(conv_tolerance(dtype, taps), [&] { return y; }));
      }
      {
        INFO("gradient of x");
        check_binary([&](const Tensor& g, const Tensor& w) { return conv2d_grad_input(g, w, c.x, c.p); }, gy, W,
                     tolerance(conv_tolerance(dtype, c.w[0] / c.p.groups * c.w[2] * c.w[3]),
                               [&] { return conv2d_grad_input(gy, W, c.x, c.p); }));
      }
      {
        INFO("gradient of W");
        check_binary([&](const Tensor& t, const Tensor& g) { return conv2d_grad_weight(t, g, c.w, c.p); }, x, gy,
                     tolerance(conv_tolerance(dtype, outputs_per_weight),
                               [&] { return conv2d_grad_weight(x, gy, c.w, c.p); }));
      }
    }
  }
}

}  // namespace

TEST_CASE("conv2d and its gradients match the CPU", "[conv]") { check_conv_against_cpu(); }

TEST_CASE("conv2d and its gradients match the CPU with the atomics-based algorithms allowed", "[conv]") {
  // cuda::set_deterministic(false): cuDNN may add with atomics (ALGO_0, the filter's ALGO_3),
  // exact FP32 sums in a varying order, within the same tolerances.
  RestoreConvMode restore;
  cuda::set_deterministic(false);
  check_conv_against_cpu();
}

TEST_CASE("conv2d and its gradients match the CPU in benchmark mode", "[conv][benchmark]") {
  // Every admitted algorithm is timed on the call's inputs into a scratch output; the fastest
  // runs. Still deterministic and direct: the default tolerances.
  RestoreConvMode restore;
  ConvMode{true, true, true}.apply();
  check_conv_against_cpu();
}

TEST_CASE("conv2d and its gradients match the CPU with FFT and Winograd allowed", "[conv][benchmark]") {
  RestoreConvMode restore;
  SECTION("cuDNN's heuristics") {
    ConvMode{true, false, false}.apply();
    check_conv_against_cpu(/*transforms=*/true);
  }
  SECTION("PyTorch's mode: benchmark, atomics and transforms") {
    kTorchMode.apply();
    check_conv_against_cpu(/*transforms=*/true);
  }
}

TEST_CASE("the algorithm switches toggle and restore", "[conv][benchmark]") {
  RestoreConvMode restore;
  kDefaultMode.apply();
  CHECK(ConvMode::current() == kDefaultMode);
  cuda::set_cudnn_benchmark(true);
  CHECK(cuda::cudnn_benchmark());
  cuda::set_conv_direct_only(false);
  CHECK_FALSE(cuda::conv_direct_only());
  CHECK(ConvMode::current() == ConvMode{true, true, false});
  cuda::set_cudnn_benchmark(false);
  cuda::set_conv_direct_only(true);
  CHECK(ConvMode::current() == kDefaultMode);

  // A shape no other test uses, so that PyTorch's mode fills the cache first. Quarters times
  // quarters sum exactly in any order, so direct algorithms give the CPU's bits; FFT and
  // Winograd need not. Back in the default mode the results must be exact again: the mode is
  // part of the algorithm cache's key, and what PyTorch's mode chose is not reused.
  const Tensor x = quarters({3, 8, 10, 10}, 700), W = quarters({16, 8, 3, 3}, 701), b = quarters({16}, 702);
  const Tensor gy = quarters({3, 16, 10, 10}, 703);
  const Conv2DParams p = conv_params(1, 1);
  auto all_three = [&](Tolerance forward, Tolerance grad_x, Tolerance grad_w) {
    check_op([&](std::vector<Tensor>& v) { return std::vector<Tensor>{conv2d(v[0], v[1], v[2], p)}; }, {x, W, b},
             forward);
    check_binary([&](const Tensor& g, const Tensor& w) { return conv2d_grad_input(g, w, x.shape(), p); }, gy, W,
                 grad_x);
    check_binary([&](const Tensor& t, const Tensor& g) { return conv2d_grad_weight(t, g, W.shape(), p); }, x, gy,
                 grad_w);
  };
  kTorchMode.apply();
  {
    INFO("PyTorch's mode");
    all_three(with_transforms(kExact, conv2d(x, W, b, p)),
              with_transforms(kExact, conv2d_grad_input(gy, W, x.shape(), p)),
              with_transforms(kExact, conv2d_grad_weight(x, gy, W.shape(), p)));
  }
  kDefaultMode.apply();
  {
    INFO("the default mode after PyTorch's");
    all_three(kExact, kExact, kExact);
  }
  // Benchmark mode times once per shape; later calls reuse its choice: the same bits again.
  ConvMode{true, true, true}.apply();
  {
    INFO("benchmark mode, deterministic and direct");
    all_three(kExact, kExact, kExact);
    const Tensor first = conv2d_grad_weight(to_gpu(x), to_gpu(gy), W.shape(), p);
    CHECK(same_bytes(first, conv2d_grad_weight(to_gpu(x), to_gpu(gy), W.shape(), p)));
  }
}

TEST_CASE("convolutions of exactly representable data agree bit for bit", "[conv]") {
  // Multiples of 1/4 times multiples of 1/4: every algorithm that only adds and multiplies
  // (no FFT or Winograd transform) is exact; allow for the transforms with a tiny tolerance.
  const Tensor x = quarters({4, 8, 12, 12}, 400), W = quarters({16, 8, 3, 3}, 401), b = quarters({16}, 402);
  const Conv2DParams p = conv_params(1, 1);
  check_op([&](std::vector<Tensor>& v) { return std::vector<Tensor>{conv2d(v[0], v[1], v[2], p)}; }, {x, W, b},
           Tolerance{0, 1e-4});
}

TEST_CASE("conv2d with an empty batch", "[conv][empty]") {
  const Tensor x = zeros({0, 3, 5, 5}, DType::f64);
  const Tensor W = uniform({4, 3, 3, 3}, 500, -1, 1, DType::f64);
  const Conv2DParams p = conv_params(1, 1);
  check_binary([&](const Tensor& t, const Tensor& w) { return conv2d(t, w, Tensor(), p); }, x, W, kExact);
  // The weight gradient of nothing is zero (written, not left uninitialised).
  check_binary([&](const Tensor& t, const Tensor& g) { return conv2d_grad_weight(t, g, W.shape(), p); }, x,
               zeros({0, 4, 5, 5}, DType::f64), kExact);
  check_binary([&](const Tensor& g, const Tensor& w) { return conv2d_grad_input(g, w, x.shape(), p); },
               zeros({0, 4, 5, 5}, DType::f64), W, kExact);
}

TEST_CASE("convolution errors are the CPU's", "[conv][errors]") {
  const Tensor x = uniform({2, 3, 5, 5}, 600).to(gpu());
  const Tensor W = uniform({4, 2, 3, 3}, 601).to(gpu());
  CHECK_THROWS_WITH(conv2d(x, W, Tensor()), Contains("conv2d") && Contains("channel"));
  CHECK_THROWS_WITH(conv2d(x, uniform({4, 3, 7, 7}, 602).to(gpu()), Tensor()), Contains("larger than the padded input"));
  CHECK_THROWS_WITH(conv2d(x.to(DType::i32), W.to(DType::i32), Tensor()), Contains("floating"));
}
