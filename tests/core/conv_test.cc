// Convolution and pooling kernels (core/ops/conv.h) against naive loops: im2col / col2im (and
// col2im being im2col's adjoint), the GEMM-based conv2d and its two gradients, max and average
// pooling forward and backward.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/ops/conv.h"
#include "tests/core/test_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using test_util::uniform;
using test_util::values;

namespace {

struct Window {
  std::int64_t kh, kw, sy, sx, py, px, dy, dx;
  bool cover_all;
};

std::string describe(const Shape& x, const Window& w) {
  std::ostringstream out;
  out << "x " << shape_str(x) << " kernel " << w.kh << "x" << w.kw << " stride " << w.sy << "x" << w.sx << " pad "
      << w.py << "x" << w.px << " dilate " << w.dy << "x" << w.dx << (w.cover_all ? " cover_all" : "");
  return out.str();
}

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

Pool2DParams pool_of(const Window& w) {
  Pool2DParams p;
  p.kernel_h = w.kh;
  p.kernel_w = w.kw;
  p.stride_y = w.sy;
  p.stride_x = w.sx;
  p.pad_y = w.py;
  p.pad_x = w.px;
  p.cover_all = w.cover_all;
  return p;
}

// Chainer's get_conv_outsize, written out independently.
std::int64_t outsize(std::int64_t size, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d, bool cover_all) {
  const std::int64_t dk = k + (k - 1) * (d - 1);
  return cover_all ? (size + p * 2 - dk + s - 1) / s + 1 : (size + p * 2 - dk) / s + 1;
}

// The input element (flat, within x) that col[n, row, o] reads, or -1 for padding.
std::int64_t source_of(const Shape& xs, const Window& w, std::int64_t oh, std::int64_t ow, std::int64_t n,
                       std::int64_t row, std::int64_t o) {
  const std::int64_t C = xs[1], H = xs[2], W = xs[3];
  const std::int64_t c = row / (w.kh * w.kw), ky = row / w.kw % w.kh, kx = row % w.kw;
  const std::int64_t oy = o / ow, ox = o % ow;
  (void)oh;
  const std::int64_t iy = oy * w.sy - w.py + ky * w.dy, ix = ox * w.sx - w.px + kx * w.dx;
  if (iy < 0 || iy >= H || ix < 0 || ix >= W) return -1;
  return ((n * C + c) * H + iy) * W + ix;
}

std::vector<double> naive_im2col(const std::vector<double>& x, const Shape& xs, const Window& w, std::int64_t oh,
                                 std::int64_t ow) {
  const std::int64_t N = xs[0], rows = xs[1] * w.kh * w.kw, ohw = oh * ow;
  std::vector<double> col(N * rows * ohw);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t o = 0; o < ohw; ++o) {
        const std::int64_t src = source_of(xs, w, oh, ow, n, r, o);
        col[(n * rows + r) * ohw + o] = src < 0 ? 0.0 : x[src];
      }
  return col;
}

std::vector<double> naive_col2im(const std::vector<double>& col, const Shape& xs, const Window& w, std::int64_t oh,
                                 std::int64_t ow) {
  const std::int64_t N = xs[0], rows = xs[1] * w.kh * w.kw, ohw = oh * ow;
  std::vector<double> x(shape_numel(xs), 0.0);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t o = 0; o < ohw; ++o) {
        const std::int64_t src = source_of(xs, w, oh, ow, n, r, o);
        if (src >= 0) x[src] += col[(n * rows + r) * ohw + o];
      }
  return x;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

const std::vector<std::pair<Shape, Window>>& window_cases() {
  static const std::vector<std::pair<Shape, Window>> cases = {
      {{2, 3, 5, 5}, {3, 3, 1, 1, 0, 0, 1, 1, false}},
      {{2, 3, 5, 5}, {3, 3, 1, 1, 1, 1, 1, 1, false}},   // pad 1 ("same")
      {{1, 2, 7, 6}, {3, 3, 2, 2, 1, 1, 1, 1, false}},   // stride 2
      {{1, 2, 7, 8}, {3, 3, 1, 1, 2, 2, 2, 2, false}},   // dilation 2
      {{2, 1, 6, 9}, {2, 4, 1, 3, 0, 1, 1, 1, false}},   // non-square kernel, strides, pads
      {{1, 2, 4, 4}, {1, 1, 1, 1, 0, 0, 1, 1, false}},   // 1x1
      {{1, 2, 5, 5}, {2, 2, 2, 2, 0, 0, 1, 1, true}},    // cover_all adds a window at the edge
      {{1, 1, 3, 3}, {1, 1, 2, 2, 1, 1, 1, 1, false}},   // windows entirely in the padding
      {{1, 2, 3, 4}, {3, 4, 1, 1, 0, 0, 1, 1, false}},   // kernel = input: one output
      {{3, 2, 4, 5}, {2, 3, 3, 2, 1, 2, 2, 1, true}},    // everything at once
      {{2, 3, 6, 8}, {2, 2, 2, 2, 0, 0, 1, 1, false}},   // 2x2 stride 2 (max pooling's own loop)
      {{1, 2, 5, 7}, {2, 2, 2, 2, 0, 0, 1, 1, false}},   // the same, the last row and column unread
  };
  return cases;
}

}  // namespace

TEST_CASE("conv_outsize follows Chainer's get_conv_outsize", "[conv]") {
  CHECK(conv_outsize(28, 3, 1, 1) == 28);
  CHECK(conv_outsize(28, 3, 1, 0) == 26);
  CHECK(conv_outsize(7, 3, 2, 1) == 4);
  CHECK(conv_outsize(8, 3, 1, 2, false, 2) == 8);
  CHECK(conv_outsize(5, 2, 2, 0) == 2);
  CHECK(conv_outsize(5, 2, 2, 0, true) == 3);
  CHECK(conv_outsize(4, 2, 2, 0, true) == 2);  // exact fit: cover_all adds nothing
  CHECK(conv_outsize(6, 3, 2, 1, true) == 4);
  CHECK(conv_outsize(6, 3, 2, 1, false) == 3);
  for (std::int64_t size : {1, 5, 9})
    for (std::int64_t k : {1, 2, 3})
      for (std::int64_t s : {1, 2, 3})
        for (std::int64_t p : {0, 1})
          for (std::int64_t d : {1, 2})
            for (bool cover_all : {false, true}) {
              if (size + 2 * p < (k - 1) * d + 1) continue;
              CHECK(conv_outsize(size, k, s, p, cover_all, d) == outsize(size, k, s, p, d, cover_all));
            }
  REQUIRE_THROWS_WITH(conv_outsize(2, 5, 1, 1), Contains("larger than the padded input"));
  REQUIRE_THROWS_AS(conv_outsize(5, 3, 0, 0), Error);
  REQUIRE_THROWS_AS(conv_outsize(5, 3, 1, -1), Error);
}

TEST_CASE("im2col matches a naive gather and col2im a naive scatter", "[conv]") {
  std::uint64_t seed = 1;
  for (const auto& c : window_cases()) {
    const Shape& xs = c.first;
    const Window& w = c.second;
    INFO(describe(xs, w));
    const std::int64_t oh = outsize(xs[2], w.kh, w.sy, w.py, w.dy, w.cover_all);
    const std::int64_t ow = outsize(xs[3], w.kw, w.sx, w.px, w.dx, w.cover_all);
    const Shape col_shape{xs[0], xs[1] * w.kh * w.kw, oh * ow};
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO(dtype_name(dtype));
      const Tensor x = uniform(xs, seed++, -1, 1, dtype);
      const Tensor col = im2col(x, w.kh, w.kw, params_of(w), w.cover_all);
      REQUIRE(col.shape() == col_shape);
      REQUIRE(col.dtype() == dtype);
      REQUIRE_VALUES(col, naive_im2col(values(x), xs, w, oh, ow));  // a copy: exact

      const Tensor g = uniform(col_shape, seed++, -1, 1, dtype);
      const Tensor back = col2im(g, xs, w.kh, w.kw, params_of(w), w.cover_all);
      REQUIRE(back.shape() == xs);
      const double tol = dtype == DType::f32 ? 1e-5 : 1e-13;
      REQUIRE_VALUES(back, naive_col2im(values(g), xs, w, oh, ow), tol, tol);
    }
  }
}

TEST_CASE("col2im is the adjoint of im2col: <im2col(x), c> == <x, col2im(c)>", "[conv]") {
  std::uint64_t seed = 100;
  for (const auto& c : window_cases()) {
    const Shape& xs = c.first;
    const Window& w = c.second;
    INFO(describe(xs, w));
    const Tensor x = uniform(xs, seed++, -1, 1, DType::f64);
    const Tensor col = im2col(x, w.kh, w.kw, params_of(w), w.cover_all);
    const Tensor cv = uniform(col.shape(), seed++, -1, 1, DType::f64);
    const Tensor back = col2im(cv, xs, w.kh, w.kw, params_of(w), w.cover_all);
    const double lhs = dot(values(col), values(cv)), rhs = dot(values(x), values(back));
    REQUIRE(lhs == Approx(rhs).epsilon(1e-12).margin(1e-12));
  }
}

TEST_CASE("im2col of a view starts at the view's offset; col2im overwrites its output", "[conv]") {
  const Tensor both = uniform({2, 2, 4, 4}, 200, -1, 1, DType::f64);
  const Tensor second = both.slice_rows(1, 2);
  Window w{3, 3, 1, 1, 1, 1, 1, 1, false};
  const Tensor col = im2col(second, 3, 3, params_of(w));
  REQUIRE_VALUES(col, naive_im2col(values(second), {1, 2, 4, 4}, w, 4, 4));
  // Twice the same col2im: the same result, nothing accumulated from the first call.
  const Tensor a = col2im(col, {1, 2, 4, 4}, 3, 3, params_of(w));
  const Tensor b = col2im(col, {1, 2, 4, 4}, 3, 3, params_of(w));
  REQUIRE_VALUES(a, values(b));
}

namespace {

struct ConvCase {
  Shape x, w;
  Conv2DParams p;
  bool bias;
};

// Direct convolution in f64: y[n, o, oy, ox] = b[o] + sum over the group's channels and taps.
std::vector<double> naive_conv(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DParams& p,
                               std::int64_t oh, std::int64_t ow) {
  const std::vector<double> vx = values(x), vw = values(W), vb = b.defined() ? values(b) : std::vector<double>();
  const std::int64_t N = x.size(0), C = x.size(1), H = x.size(2), Wd = x.size(3);
  const std::int64_t O = W.size(0), Cg = W.size(1), kh = W.size(2), kw = W.size(3), Og = O / p.groups;
  std::vector<double> y(N * O * oh * ow);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < O; ++o)
      for (std::int64_t oy = 0; oy < oh; ++oy)
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          double acc = vb.empty() ? 0.0 : vb[o];
          for (std::int64_t c = 0; c < Cg; ++c)
            for (std::int64_t ky = 0; ky < kh; ++ky)
              for (std::int64_t kx = 0; kx < kw; ++kx) {
                const std::int64_t iy = oy * p.stride_y - p.pad_y + ky * p.dilate_y;
                const std::int64_t ix = ox * p.stride_x - p.pad_x + kx * p.dilate_x;
                if (iy < 0 || iy >= H || ix < 0 || ix >= Wd) continue;
                const std::int64_t ci = (o / Og) * Cg + c;
                acc += vx[((n * C + ci) * H + iy) * Wd + ix] * vw[((o * Cg + c) * kh + ky) * kw + kx];
              }
          y[((n * O + o) * oh + oy) * ow + ox] = acc;
        }
  return y;
}

Conv2DParams conv_params(std::int64_t s, std::int64_t p, std::int64_t d = 1, std::int64_t g = 1) {
  Conv2DParams r;
  r.stride_y = r.stride_x = s;
  r.pad_y = r.pad_x = p;
  r.dilate_y = r.dilate_x = d;
  r.groups = g;
  return r;
}

}  // namespace

TEST_CASE("conv2d and its gradients match a direct convolution and its adjoints", "[conv]") {
  Conv2DParams uneven = conv_params(1, 0);
  uneven.stride_y = 2;
  uneven.pad_x = 2;
  uneven.dilate_y = 2;
  const std::vector<ConvCase> cases = {
      {{2, 3, 6, 6}, {4, 3, 3, 3}, conv_params(1, 1), true},
      {{2, 3, 7, 7}, {4, 3, 3, 3}, conv_params(2, 1), true},
      {{1, 2, 9, 8}, {3, 2, 3, 3}, conv_params(1, 2, 2), false},
      {{2, 4, 5, 5}, {6, 2, 3, 3}, conv_params(1, 1, 1, 2), true},  // groups 2
      {{2, 6, 5, 4}, {3, 2, 2, 2}, conv_params(1, 0, 1, 3), false}, // groups 3, 1 output per group
      {{3, 4, 5, 6}, {5, 4, 1, 1}, conv_params(1, 0), true},        // pointwise: col is x itself
      {{2, 4, 6, 6}, {4, 1, 1, 1}, conv_params(1, 0, 1, 4), true},  // pointwise depthwise
      {{1, 3, 7, 5}, {2, 3, 2, 4}, uneven, true},
      // Large enough that the images are split over the threads, each with its own buffers.
      {{30, 16, 32, 32}, {4, 16, 3, 3}, conv_params(1, 1), true},
  };
  std::uint64_t seed = 300;
  for (const ConvCase& c : cases) {
    INFO("x " << shape_str(c.x) << " W " << shape_str(c.w) << " stride " << c.p.stride_y << "x" << c.p.stride_x
              << " pad " << c.p.pad_y << "x" << c.p.pad_x << " dilate " << c.p.dilate_y << "x" << c.p.dilate_x
              << " groups " << c.p.groups);
    const Tensor x = uniform(c.x, seed++, -1, 1, DType::f64);
    const Tensor W = uniform(c.w, seed++, -1, 1, DType::f64);
    const Tensor b = c.bias ? uniform({c.w[0]}, seed++, -1, 1, DType::f64) : Tensor();
    const std::int64_t oh = outsize(c.x[2], c.w[2], c.p.stride_y, c.p.pad_y, c.p.dilate_y, false);
    const std::int64_t ow = outsize(c.x[3], c.w[3], c.p.stride_x, c.p.pad_x, c.p.dilate_x, false);
    const Tensor y = conv2d(x, W, b, c.p);
    REQUIRE(y.shape() == Shape{c.x[0], c.w[0], oh, ow});
    REQUIRE_VALUES(y, naive_conv(x, W, b, c.p, oh, ow), 1e-12, 1e-12);

    // Without bias, conv2d is bilinear: <conv(x, W), gy> = <x, grad_input(gy)> = <W, grad_weight(gy)>.
    const Tensor gy = uniform(y.shape(), seed++, -1, 1, DType::f64);
    const double forward = dot(naive_conv(x, W, Tensor(), c.p, oh, ow), values(gy));
    const Tensor gx = conv2d_grad_input(gy, W, c.x, c.p);
    const Tensor gW = conv2d_grad_weight(x, gy, c.w, c.p);
    REQUIRE(gx.shape() == c.x);
    REQUIRE(gW.shape() == c.w);
    REQUIRE(dot(values(x), values(gx)) == Approx(forward).epsilon(1e-11).margin(1e-10));
    REQUIRE(dot(values(W), values(gW)) == Approx(forward).epsilon(1e-11).margin(1e-10));
    // And the gradients element by element, on the small cases, from the naive convolution's
    // linearity: gx[i] = <conv(e_i, W), gy>.
    if (x.numel() <= 200) {
      std::vector<double> want_gx(x.numel());
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        std::vector<double> e(x.numel(), 0.0);
        e[i] = 1;
        want_gx[i] = dot(naive_conv(from_vector<double>(e, c.x), W, Tensor(), c.p, oh, ow), values(gy));
      }
      REQUIRE_VALUES(gx, want_gx, 1e-12, 1e-12);
      std::vector<double> want_gw(W.numel());
      for (std::int64_t i = 0; i < W.numel(); ++i) {
        std::vector<double> e(W.numel(), 0.0);
        e[i] = 1;
        want_gw[i] = dot(naive_conv(x, from_vector<double>(e, c.w), Tensor(), c.p, oh, ow), values(gy));
      }
      REQUIRE_VALUES(gW, want_gw, 1e-12, 1e-12);
    }
  }
}

// f32 convolutions run on oneDNN or im2col, whichever was measured faster (TANDEM_CONV forces
// one): both, and the measured choice, against the f64 convolution checked above.
TEST_CASE("f32 conv2d and its gradients agree on oneDNN, im2col and the measured choice", "[conv]") {
  Conv2DParams uneven = conv_params(1, 0);
  uneven.stride_y = 2;
  uneven.pad_x = 2;
  uneven.dilate_y = 2;
  const std::vector<ConvCase> cases = {
      {{2, 3, 6, 6}, {4, 3, 3, 3}, conv_params(1, 1), true},
      {{2, 3, 7, 7}, {4, 3, 3, 3}, conv_params(2, 1), true},
      {{1, 2, 9, 8}, {3, 2, 3, 3}, conv_params(1, 2, 2), false},
      {{2, 4, 5, 5}, {6, 2, 3, 3}, conv_params(1, 1, 1, 2), true},   // groups 2
      {{3, 4, 5, 6}, {5, 4, 1, 1}, conv_params(1, 0), true},         // pointwise
      {{2, 4, 6, 6}, {4, 1, 3, 3}, conv_params(1, 1, 1, 4), true},   // depthwise
      {{1, 3, 7, 5}, {2, 3, 2, 4}, uneven, true},
      {{1, 2, 5, 7}, {3, 2, 2, 2}, conv_params(2, 0), true},         // the last row and column unread
      {{8, 16, 14, 14}, {32, 16, 3, 3}, conv_params(1, 1), true},    // a CNN layer
  };
  const char* saved = std::getenv("TANDEM_CONV");
  const std::string restore = saved ? saved : "";
  std::uint64_t seed = 700;
  for (const ConvCase& c : cases) {
    const Tensor x = uniform(c.x, seed++, -1, 1, DType::f64);
    const Tensor W = uniform(c.w, seed++, -1, 1, DType::f64);
    const Tensor b = c.bias ? uniform({c.w[0]}, seed++, -1, 1, DType::f64) : Tensor();
    const Tensor y = conv2d(x, W, b, c.p);
    const Tensor gy = uniform(y.shape(), seed++, -1, 1, DType::f64);
    const Tensor gx = conv2d_grad_input(gy, W, c.x, c.p);
    const Tensor gW = conv2d_grad_weight(x, gy, c.w, c.p);
    // With the ReLU (in place after im2col, a post-op inside oneDNN's primitive): exactly
    // max(y, 0) in f64, and in f32 max(y, 0) to f32's precision.
    const Tensor y_relu = maximum(y, 0.0);
    REQUIRE_VALUES(conv2d(x, W, b, c.p, true), values(y_relu), 0, 0);
    for (const char* mode : {"im2col", "onednn", "winograd", "auto"}) {
      INFO("TANDEM_CONV=" << mode << " x " << shape_str(c.x) << " W " << shape_str(c.w) << " stride "
                          << c.p.stride_y << "x" << c.p.stride_x << " pad " << c.p.pad_y << "x" << c.p.pad_x
                          << " groups " << c.p.groups);
      ::setenv("TANDEM_CONV", mode, 1);
      const Tensor b32 = c.bias ? b.to(DType::f32) : Tensor();
      const Tensor y32 = conv2d(x.to(DType::f32), W.to(DType::f32), b32, c.p);
      REQUIRE(y32.dtype() == DType::f32);
      REQUIRE_VALUES(y32, values(y), 1e-4, 1e-5);
      const Tensor y32_relu = conv2d(x.to(DType::f32), W.to(DType::f32), b32, c.p, true);
      REQUIRE_VALUES(y32_relu, values(y_relu), 1e-4, 1e-5);
      REQUIRE(min(y32_relu).item() >= 0);
      REQUIRE_VALUES(conv2d_grad_input(gy.to(DType::f32), W.to(DType::f32), c.x, c.p), values(gx), 1e-4, 1e-5);
      REQUIRE_VALUES(conv2d_grad_weight(x.to(DType::f32), gy.to(DType::f32), c.w, c.p), values(gW), 1e-4, 1e-4);
    }
  }
  if (saved) ::setenv("TANDEM_CONV", restore.c_str(), 1);
  else ::unsetenv("TANDEM_CONV");
  ::setenv("TANDEM_CONV", "fft", 1);
  CHECK_THROWS_WITH(conv2d(uniform({1, 1, 4, 4}, 1, -1, 1, DType::f32), uniform({1, 1, 3, 3}, 2, -1, 1, DType::f32),
                           Tensor(), conv_params(1, 0)),
                    Contains("TANDEM_CONV=fft") && Contains("expected auto, im2col, onednn or winograd"));
  if (saved) ::setenv("TANDEM_CONV", restore.c_str(), 1);
  else ::unsetenv("TANDEM_CONV");
}

// Winograd F(2x2, 3x3) (TANDEM_CONV=winograd; core/cpu/winograd_conv.h) on the geometries its
// tiling meets at the edges: odd output sizes (a last tile half outside), paddings 0 and 2 (the
// input's gradient then pads by 2 and 0), one output, one channel, a plane's tiles not a multiple
// of the eight it transforms at once, and a batch whose last block is short. Each element of the
// forward result and of both gradients is within 2e-6 of the sum of its terms' magnitudes
// of the f64 convolution (f32 rounding, a few times over: the worst here is 6.9e-7, against
// 2.2e-7 for oneDNN's direct kernels and 2.5e-7 for im2col; an indexing slip is off by O(1)).
TEST_CASE("Winograd convolution and its gradients agree with the f64 convolution", "[conv]") {
  struct WinogradCase {
    Shape x, w;
    std::int64_t pad_y, pad_x;
  };
  const std::vector<WinogradCase> cases = {
      {{3, 5, 9, 11}, {7, 5, 3, 3}, 1, 1},      // 9 x 11 outputs: 5 x 6 tiles, the last row and column half out
      {{2, 3, 3, 3}, {2, 3, 3, 3}, 0, 0},       // a single output
      {{2, 4, 6, 5}, {3, 4, 3, 3}, 2, 2},       // padding 2: 8 x 7 outputs
      {{1, 2, 4, 9}, {3, 2, 3, 3}, 0, 2},       // padding 0 down, 2 across
      {{9, 16, 14, 14}, {24, 16, 3, 3}, 1, 1},  // blocks of several images, the last one short
      {{4, 1, 12, 12}, {8, 1, 3, 3}, 1, 1},     // one input channel
      {{2, 40, 10, 10}, {1, 40, 3, 3}, 1, 1},   // one output channel
  };
  const char* saved = std::getenv("TANDEM_CONV");
  const std::string restore = saved ? saved : "";
  ::setenv("TANDEM_CONV", "winograd", 1);
  auto within = [&](const Tensor& got, const Tensor& want, const Tensor& magnitude) {
    const std::vector<double> g = values(got), w = values(want), m = values(magnitude);
    REQUIRE(g.size() == w.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      INFO("element " << i << ": got " << g[i] << ", want " << w[i] << ", terms' magnitude " << m[i]);
      REQUIRE(std::abs(g[i] - w[i]) <= 2e-6 * m[i] + 1e-30);
    }
  };
  std::uint64_t seed = 900;
  for (const WinogradCase& c : cases) {
    Conv2DParams p = conv_params(1, 0);
    p.pad_y = c.pad_y;
    p.pad_x = c.pad_x;
    INFO("x " << shape_str(c.x) << " W " << shape_str(c.w) << " pad " << c.pad_y << "x" << c.pad_x);
    const Tensor x = uniform(c.x, seed++, -1, 1, DType::f64);
    const Tensor W = uniform(c.w, seed++, -1, 1, DType::f64);
    const Tensor b = uniform({c.w[0]}, seed++, -1, 1, DType::f64);
    const Tensor y = conv2d(x, W, b, p);
    const Tensor y_magnitude = conv2d(abs(x), abs(W), abs(b), p);
    const Tensor x32 = x.to(DType::f32), W32 = W.to(DType::f32), b32 = b.to(DType::f32);
    within(conv2d(x32, W32, b32, p), y, y_magnitude);
    within(conv2d(x32, W32, Tensor(), p), conv2d(x, W, Tensor(), p), conv2d(abs(x), abs(W), Tensor(), p));
    // The ReLU as the outputs are written: max(y, 0) of the same sums.
    const Tensor y32 = conv2d(x32, W32, b32, p), y32_relu = conv2d(x32, W32, b32, p, true);
    REQUIRE_VALUES(y32_relu, values(maximum(y32, 0.0)), 0, 0);

    const Tensor gy = uniform(y.shape(), seed++, -1, 1, DType::f64);
    const Tensor gx = conv2d_grad_input(gy, W, c.x, p);
    REQUIRE(gx.shape() == c.x);
    within(conv2d_grad_input(gy.to(DType::f32), W32, c.x, p), gx, conv2d_grad_input(abs(gy), abs(W), c.x, p));
    const Tensor gW = conv2d_grad_weight(x, gy, c.w, p);
    REQUIRE(gW.shape() == c.w);
    within(conv2d_grad_weight(x32, gy.to(DType::f32), c.w, p), gW, conv2d_grad_weight(abs(x), abs(gy), c.w, p));
  }
  if (saved) ::setenv("TANDEM_CONV", restore.c_str(), 1);
  else ::unsetenv("TANDEM_CONV");
}

TEST_CASE("conv2d with an empty batch", "[conv]") {
  const Tensor x = zeros({0, 3, 5, 5}, DType::f64);
  const Tensor W = uniform({4, 3, 3, 3}, 400, -1, 1, DType::f64);
  const Tensor y = conv2d(x, W, Tensor(), conv_params(1, 1));
  REQUIRE(y.shape() == Shape{0, 4, 5, 5});
  const Tensor gW = conv2d_grad_weight(x, y, W.shape(), conv_params(1, 1));
  REQUIRE_VALUES(gW, std::vector<double>(W.numel(), 0.0));
  REQUIRE(conv2d_grad_input(y, W, x.shape(), conv_params(1, 1)).shape() == x.shape());
}

TEST_CASE("conv2d and the window ops report bad operands", "[conv][errors]") {
  const Tensor x = uniform({2, 3, 5, 5}, 500, -1, 1, DType::f32);
  const Tensor W = uniform({4, 2, 3, 3}, 501, -1, 1, DType::f32);
  REQUIRE_THROWS_WITH(conv2d(x, W, Tensor()), Contains("conv2d") && Contains("f32[2, 3, 5, 5]") &&
                                                  Contains("f32[4, 2, 3, 3]") && Contains("channel"));
  const Tensor W7 = uniform({4, 3, 7, 7}, 502, -1, 1, DType::f32);
  REQUIRE_THROWS_WITH(conv2d(x, W7, Tensor()), Contains("conv2d") && Contains("larger than the padded input"));
  REQUIRE_NOTHROW(conv2d(x, W7, Tensor(), conv_params(1, 1)));
  const Tensor W1 = uniform({4, 1, 3, 3}, 503, -1, 1, DType::f32);
  REQUIRE_THROWS_WITH(conv2d(x, W1, Tensor(), conv_params(1, 0, 1, 2)), Contains("groups=2") && Contains("does not divide"));
  const Tensor Wg = uniform({3, 1, 3, 3}, 504, -1, 1, DType::f32);
  REQUIRE_NOTHROW(conv2d(x, Wg, Tensor(), conv_params(1, 0, 1, 3)));
  const Tensor W3 = uniform({4, 3, 3, 3}, 505, -1, 1, DType::f32);
  REQUIRE_THROWS_WITH(conv2d(x, W3, uniform({5}, 506)), Contains("b f32[5]"));
  REQUIRE_THROWS_WITH(conv2d(x.to(DType::f64), W3, Tensor()), Contains("different dtypes"));
  REQUIRE_THROWS_WITH(conv2d(x.to(DType::i32), W3.to(DType::i32), Tensor()), Contains("floating"));
  REQUIRE_THROWS_WITH(conv2d(x.reshape({6, 5, 5}), W3, Tensor()), Contains("4-D"));
  REQUIRE_THROWS_WITH(conv2d(x, W3, Tensor(), conv_params(0, 0)), Contains("stride"));
  REQUIRE_THROWS_WITH(conv2d_grad_input(zeros({2, 4, 4, 4}), W3, x.shape()), Contains("gy"));

  REQUIRE_THROWS_WITH(im2col(x, 6, 2), Contains("im2col") && Contains("larger"));
  REQUIRE_THROWS_WITH(col2im(zeros({2, 27, 10}), x.shape(), 3, 3), Contains("col2im") && Contains("[2, 27, 9]"));
  Pool2DParams big;
  big.kernel_h = big.kernel_w = 6;
  REQUIRE_THROWS_WITH(max_pool2d(x, big), Contains("max_pool2d") && Contains("larger"));
  REQUIRE_THROWS_WITH(avg_pool2d(x.to(DType::i64), Pool2DParams()), Contains("avg_pool2d") && Contains("floating"));
}

namespace {

// Naive pooling: max (first maximum in window order, -inf / -1 for an empty window) or mean
// with divisor kh * kw.
void naive_pool(const std::vector<double>& x, const Shape& xs, const Window& w, std::int64_t oh, std::int64_t ow,
                std::vector<double>& max_out, std::vector<std::int64_t>& argmax, std::vector<double>& avg_out) {
  const std::int64_t planes = xs[0] * xs[1], H = xs[2], W = xs[3];
  max_out.assign(planes * oh * ow, 0);
  argmax.assign(planes * oh * ow, -1);
  avg_out.assign(planes * oh * ow, 0);
  for (std::int64_t p = 0; p < planes; ++p)
    for (std::int64_t oy = 0; oy < oh; ++oy)
      for (std::int64_t ox = 0; ox < ow; ++ox) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        std::int64_t best_i = -1;
        for (std::int64_t ky = 0; ky < w.kh; ++ky)
          for (std::int64_t kx = 0; kx < w.kw; ++kx) {
            const std::int64_t iy = oy * w.sy - w.py + ky, ix = ox * w.sx - w.px + kx;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
            const double v = x[p * H * W + iy * W + ix];
            sum += v;
            if (best_i < 0 || v > best) {
              best = v;
              best_i = iy * W + ix;
            }
          }
        const std::int64_t o = (p * oh + oy) * ow + ox;
        max_out[o] = best;
        argmax[o] = best_i;
        avg_out[o] = sum / static_cast<double>(w.kh * w.kw);
      }
}

}  // namespace

TEST_CASE("max and average pooling match naive loops, forward and backward", "[pooling]") {
  std::uint64_t seed = 600;
  for (const auto& c : window_cases()) {
    const Shape& xs = c.first;
    Window w = c.second;
    if (w.dy != 1 || w.dx != 1) continue;  // pooling has no dilation
    INFO(describe(xs, w));
    const std::int64_t oh = outsize(xs[2], w.kh, w.sy, w.py, 1, w.cover_all);
    const std::int64_t ow = outsize(xs[3], w.kw, w.sx, w.px, 1, w.cover_all);
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO(dtype_name(dtype));
      const Tensor x = uniform(xs, seed++, -1, 1, dtype);
      std::vector<double> want_max, want_avg;
      std::vector<std::int64_t> want_idx;
      naive_pool(values(x), xs, w, oh, ow, want_max, want_idx, want_avg);

      const auto pooled = max_pool2d(x, pool_of(w));
      REQUIRE(pooled.first.shape() == Shape{xs[0], xs[1], oh, ow});
      REQUIRE(pooled.second.dtype() == DType::i64);
      REQUIRE_VALUES(pooled.first, want_max);
      REQUIRE(pooled.second.to_vector<std::int64_t>() == want_idx);

      const double tol = dtype == DType::f32 ? 1e-6 : 1e-14;
      const Tensor avg = avg_pool2d(x, pool_of(w));
      REQUIRE_VALUES(avg, want_avg, tol, tol);

      // Backward: scatter to the argmax / spread over the window, against naive scatters.
      const Tensor gy = uniform(pooled.first.shape(), seed++, -1, 1, dtype);
      const std::vector<double> vg = values(gy);
      const std::int64_t planes = xs[0] * xs[1], hw = xs[2] * xs[3];
      std::vector<double> want_gmax(planes * hw, 0.0), want_gavg(planes * hw, 0.0);
      for (std::int64_t p = 0; p < planes; ++p)
        for (std::int64_t oy = 0; oy < oh; ++oy)
          for (std::int64_t ox = 0; ox < ow; ++ox) {
            const std::int64_t o = (p * oh + oy) * ow + ox;
            if (want_idx[o] >= 0) want_gmax[p * hw + want_idx[o]] += vg[o];
            for (std::int64_t ky = 0; ky < w.kh; ++ky)
              for (std::int64_t kx = 0; kx < w.kw; ++kx) {
                const std::int64_t iy = oy * w.sy - w.py + ky, ix = ox * w.sx - w.px + kx;
                if (iy < 0 || iy >= xs[2] || ix < 0 || ix >= xs[3]) continue;
                want_gavg[p * hw + iy * xs[3] + ix] += vg[o] / static_cast<double>(w.kh * w.kw);
              }
          }
      REQUIRE_VALUES(max_pool2d_backward(gy, pooled.second, xs, pool_of(w)), want_gmax, tol, tol);
      REQUIRE_VALUES(avg_pool2d_backward(gy, xs, pool_of(w)), want_gavg, tol, tol);
    }
  }
}

TEST_CASE("max pooling: windows entirely in the padding give -inf and index -1", "[pooling]") {
  // 1x1 windows with stride 2 and pad 1 over a 3x3 image start at -1, 1 and 3.
  const Tensor x = test_util::iota({1, 1, 3, 3}, DType::f64);
  Pool2DParams p;
  p.stride_y = p.stride_x = 2;
  p.pad_y = p.pad_x = 1;
  const auto pooled = max_pool2d(x, p);
  REQUIRE(pooled.first.shape() == Shape{1, 1, 3, 3});
  const double inf = std::numeric_limits<double>::infinity();
  REQUIRE_VALUES(pooled.first, {-inf, -inf, -inf, -inf, 4, -inf, -inf, -inf, -inf});
  REQUIRE(pooled.second.to_vector<std::int64_t>() == std::vector<std::int64_t>{-1, -1, -1, -1, 4, -1, -1, -1, -1});
  const Tensor gx = max_pool2d_backward(ones({1, 1, 3, 3}, DType::f64), pooled.second, x.shape(), p);
  REQUIRE_VALUES(gx, {0, 0, 0, 0, 1, 0, 0, 0, 0});
  // Ties go to the first element in window order.
  const Tensor flat = zeros({1, 1, 2, 2}, DType::f32);
  Pool2DParams two;
  two.kernel_h = two.kernel_w = 2;
  REQUIRE(max_pool2d(flat, two).second.to_vector<std::int64_t>() == std::vector<std::int64_t>{0});
  two.stride_y = two.stride_x = 2;  // the 2x2 stride-2 loop keeps window order too
  REQUIRE(max_pool2d(zeros({1, 1, 4, 4}), two).second.to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{0, 2, 8, 10});
}

TEST_CASE("2x2 max pooling with stride 2: ties, NaNs and row tails as the general rule; no indices in inference",
          "[pooling]") {
  // The 2x2 stride-2 path finds the maximum first and its index after (the first candidate equal
  // to it), vectorized over rows: every width from 1 to 37 outputs crosses the vector lengths and
  // their remainders. Values from {0, 1, 2} make ties in every window position (as ReLU's zeros
  // do); NaNs sit in every position too: one wins only when it comes first in its window.
  Pool2DParams two;
  two.kernel_h = two.kernel_w = 2;
  two.stride_y = two.stride_x = 2;
  const Window w{2, 2, 2, 2, 0, 0, 1, 1, false};
  std::uint64_t seed = 900;
  for (std::int64_t out_w = 1; out_w <= 37; out_w += (out_w < 18 ? 1 : 6)) {
    for (const std::int64_t extra : {0, 1}) {  // an odd width leaves its last column out
      const Shape xs{2, 3, 6 + extra, 2 * out_w + extra};
      for (DType dtype : {DType::f32, DType::f64}) {
        INFO("x " << shape_str(xs) << " " << dtype_name(dtype));
        std::vector<double> v = values(uniform(xs, seed++, 0, 3, dtype));
        for (std::size_t i = 0; i < v.size(); ++i) {
          v[i] = std::floor(v[i]);
          if (i % 11 == 3) v[i] = std::numeric_limits<double>::quiet_NaN();
        }
        const Tensor x = from_vector(v, xs).to(dtype);
        std::vector<double> want_max, want_avg;
        std::vector<std::int64_t> want_idx;
        naive_pool(v, xs, w, xs[2] / 2, out_w, want_max, want_idx, want_avg);
        const auto pooled = max_pool2d(x, two);
        const auto inference = max_pool2d(x, two, false);
        REQUIRE_FALSE(inference.second.defined());
        REQUIRE(pooled.second.to_vector<std::int64_t>() == want_idx);
        const std::vector<double> got = values(pooled.first), got_inference = values(inference.first);
        for (std::size_t o = 0; o < want_max.size(); ++o) {
          INFO("output " << o);
          REQUIRE(std::isnan(got[o]) == std::isnan(want_max[o]));
          REQUIRE(std::isnan(got_inference[o]) == std::isnan(want_max[o]));
          if (!std::isnan(want_max[o])) {
            REQUIRE(got[o] == want_max[o]);
            REQUIRE(got_inference[o] == want_max[o]);
          }
        }
      }
    }
  }
}

TEST_CASE("pooling backward checks gy and the indices", "[pooling][errors]") {
  Pool2DParams p;
  p.kernel_h = p.kernel_w = 2;
  p.stride_y = p.stride_x = 2;
  const Shape xs{1, 2, 4, 4};
  REQUIRE_THROWS_WITH(max_pool2d_backward(zeros({1, 2, 2, 2}), zeros({1, 2, 2, 2}), xs, p), Contains("i64"));
  REQUIRE_THROWS_WITH(max_pool2d_backward(zeros({1, 2, 3, 2}), zeros({1, 2, 3, 2}, DType::i64), xs, p),
                      Contains("[1, 2, 2, 2]"));
  REQUIRE_THROWS_WITH(avg_pool2d_backward(zeros({1, 2, 3, 2}), xs, p), Contains("avg_pool2d_backward"));
  // An index outside the plane is caught, not written out of bounds.
  REQUIRE_THROWS_WITH(max_pool2d_backward(zeros({1, 2, 2, 2}), full({1, 2, 2, 2}, 16, DType::i64), xs, p),
                      Contains("out of range"));
}
