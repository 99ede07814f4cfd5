// The sliding-window kernels of the CUDA backend (cuda/im2col.cu, cuda/pooling.cu) run on the
// host: each kernel is one call of a cuda/window_index.h function per output element, so this
// test makes those calls for every element, exactly as the kernels' grid-stride loops do, and
// compares the result bit for bit with the CPU backend's (the reference) through the public ops
// of core/ops/conv.h, over random geometries: strides, padding (also wider than the kernel, so
// that whole windows lie in the padding), dilation (convolution), cover_all, empty batches,
// channels and images, ties, NaN, -0 and infinities.
//
// The sums are compared exactly: the CUDA kernels gather, one thread per element, in the order
// in which the CPU scatters, so every rounding must be the same. (On a GPU, nvcc may contract
// the multiply-add of the average-pooling backward into an FMA, and so may GCC here and in the
// CPU backend; the data of that test make the product exact so that it cannot matter.)
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/ops/conv.h"
#include "core/tensor.h"
#include "cuda/window_index.h"

using namespace tandem;
using namespace tandem::cuda;

namespace {

using I = std::int64_t;

// Equal bit patterns, or both NaN (whose sign and payload IEEE arithmetic does not fix).
template <typename T>
bool same_value(T a, T b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// The first index where `got` differs from `expected`, or -1.
template <typename T>
I first_mismatch(const std::vector<T>& expected, const std::vector<T>& got) {
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if constexpr (std::is_floating_point<T>::value) {
      if (!same_value(expected[i], got[i])) return static_cast<I>(i);
    } else {
      if (expected[i] != got[i]) return static_cast<I>(i);
    }
  }
  return -1;
}

std::string describe(const Conv2DGeometry& g, bool cover_all) {
  std::ostringstream s;
  s << "x [" << g.batch << ", " << g.channels << ", " << g.height << ", " << g.width << "], kernel " << g.kernel_h
    << "x" << g.kernel_w << ", stride " << g.stride_y << "x" << g.stride_x << ", pad " << g.pad_y << "x" << g.pad_x
    << ", dilate " << g.dilate_y << "x" << g.dilate_x << ", out " << g.out_h << "x" << g.out_w
    << (cover_all ? ", cover_all" : "");
  return s.str();
}

template <typename T>
void expect_same(const std::vector<T>& expected, const std::vector<T>& got, const std::string& what) {
  REQUIRE(got.size() == expected.size());
  const I at = first_mismatch(expected, got);
  if (at < 0) return;
  INFO(what << ": " << expected.size() << " elements, the first mismatch at " << at << ": CPU " << expected[at]
            << ", kernel body " << got[at]);
  CHECK(at < 0);
}

class Random {
 public:
  explicit Random(std::uint64_t seed) : engine_(seed) {}
  I integer(I lo, I hi) { return std::uniform_int_distribution<I>(lo, hi)(engine_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(engine_); }
  // A value whose sums round (a random mantissa over a few binades), so that adding in a
  // different order would show.
  double rounding_value() { return std::ldexp(std::uniform_real_distribution<double>(-1, 1)(engine_), integer(-3, 3)); }

 private:
  std::mt19937_64 engine_;
};

// Image data: small integers (ties for max pooling) or rounding values, with a sprinkle of
// -0, +-inf and NaN.
template <typename T>
std::vector<T> image_values(Random& random, I n, bool specials) {
  std::vector<T> v(static_cast<std::size_t>(n));
  const bool ties = random.chance(0.5);
  for (T& e : v) {
    e = ties ? static_cast<T>(random.integer(-3, 3)) : static_cast<T>(random.rounding_value());
    if (specials && random.chance(0.05)) {
      switch (random.integer(0, 3)) {
        case 0: e = T(-0.0); break;
        case 1: e = std::numeric_limits<T>::infinity(); break;
        case 2: e = -std::numeric_limits<T>::infinity(); break;
        default: e = std::numeric_limits<T>::quiet_NaN(); break;
      }
    }
  }
  return v;
}

// A random valid geometry (the front end's rules: the dilated kernel fits the padded input).
struct Case {
  Shape x_shape;
  I kernel_h, kernel_w;
  Conv2DParams params;
  bool cover_all;
};

Case random_case(Random& random, bool pooling) {
  for (;;) {
    Case c;
    // Mostly non-empty, sometimes an empty batch, channel axis or image axis.
    const I batch = random.chance(0.05) ? 0 : random.integer(1, 2);
    const I channels = random.chance(0.05) ? 0 : random.integer(1, 3);
    const I height = random.chance(0.05) ? 0 : random.integer(1, 9);
    const I width = random.chance(0.05) ? 0 : random.integer(1, 9);
    c.x_shape = Shape{batch, channels, height, width};
    c.kernel_h = random.integer(1, 4);
    c.kernel_w = random.integer(1, 4);
    c.params.stride(random.integer(1, 4), random.integer(1, 4));
    c.params.pad(random.integer(0, 4), random.integer(0, 4));
    if (!pooling) c.params.dilate(random.integer(1, 3), random.integer(1, 3));
    c.cover_all = random.chance(0.3);
    const I extent_h = c.params.dilate_y * (c.kernel_h - 1) + 1, extent_w = c.params.dilate_x * (c.kernel_w - 1) + 1;
    if (extent_h <= height + 2 * c.params.pad_y && extent_w <= width + 2 * c.params.pad_x) return c;
  }
}

Pool2DParams pool_params(const Case& c) {
  Pool2DParams p;
  p.kernel_h = c.kernel_h;
  p.kernel_w = c.kernel_w;
  p.stride_y = c.params.stride_y;
  p.stride_x = c.params.stride_x;
  p.pad_y = c.params.pad_y;
  p.pad_x = c.params.pad_x;
  p.cover_all = c.cover_all;
  return p;
}

// ---- the kernels' loops: one header call per element, as in im2col.cu and pooling.cu ----

template <typename T>
std::vector<T> im2col_kernel(const std::vector<T>& x, const Conv2DGeometry& g, I n) {
  std::vector<T> col(static_cast<std::size_t>(n));
  for (I i = 0; i < n; ++i) col[i] = im2col_element(x.data(), g, i);
  return col;
}

template <typename T>
std::vector<T> col2im_kernel(const std::vector<T>& col, const Conv2DGeometry& g, I n) {
  std::vector<T> x(static_cast<std::size_t>(n));
  for (I i = 0; i < n; ++i) x[i] = col2im_element(col.data(), g, i);
  return x;
}

template <typename T>
T pool_scale(const Conv2DGeometry& g) {
  return T(1) / static_cast<T>(g.kernel_h * g.kernel_w);  // as the launchers compute it
}

template <typename T>
void check_conv_case(Random& random, const Case& c) {
  const Conv2DGeometry g = conv2d_geometry(c.x_shape, c.kernel_h, c.kernel_w, c.params, c.cover_all, "test");
  INFO(describe(g, c.cover_all) << ", dtype " << dtype_name(dtype_of<T>()));
  const std::vector<T> x = image_values<T>(random, shape_numel(c.x_shape), true);
  const Tensor xt = from_vector(x, c.x_shape);

  // im2col: n = col.numel() elements.
  const Tensor col = tandem::im2col(xt, c.kernel_h, c.kernel_w, c.params, c.cover_all);
  REQUIRE(col.shape() == Shape{g.batch, g.channels * g.kernel_h * g.kernel_w, g.out_h * g.out_w});
  expect_same(col.to_vector<T>(), im2col_kernel(x, g, col.numel()), "im2col");

  // col2im: n = x.numel() elements, each summing the col entries read from it (no NaN or inf
  // here: the sums are compared bit for bit, and NaN + NaN keeps either payload).
  std::vector<T> cv(static_cast<std::size_t>(col.numel()));
  for (T& e : cv) e = random.chance(0.02) ? T(-0.0) : static_cast<T>(random.rounding_value());
  const Tensor gx = tandem::col2im(from_vector(cv, col.shape()), c.x_shape, c.kernel_h, c.kernel_w, c.params,
                                   c.cover_all);
  expect_same(gx.to_vector<T>(), col2im_kernel(cv, g, gx.numel()), "col2im");
}

template <typename T>
void check_pool_case(Random& random, const Case& c) {
  const Pool2DParams p = pool_params(c);
  const Conv2DGeometry g = conv2d_geometry(c.x_shape, c.kernel_h, c.kernel_w, c.params, c.cover_all, "test");
  INFO(describe(g, c.cover_all) << ", dtype " << dtype_name(dtype_of<T>()));
  const std::vector<T> x = image_values<T>(random, shape_numel(c.x_shape), true);
  const Tensor xt = from_vector(x, c.x_shape);
  const Shape y_shape{g.batch, g.channels, g.out_h, g.out_w};
  const I ny = shape_numel(y_shape), nx = shape_numel(c.x_shape);

  // Max pooling: values and indices.
  const auto [y, indices] = tandem::max_pool2d(xt, p);
  REQUIRE(y.shape() == y_shape);
  std::vector<T> ky(static_cast<std::size_t>(ny));
  std::vector<I> kidx(static_cast<std::size_t>(ny));
  for (I i = 0; i < ny; ++i) max_pool_element(x.data(), g, i, &ky[i], &kidx[i]);
  expect_same(y.to_vector<T>(), ky, "max_pool2d values");
  expect_same(indices.to_vector<I>(), kidx, "max_pool2d indices");

  // Its backward, from the CPU's indices (an index is in its window, or -1).
  std::vector<T> gy(static_cast<std::size_t>(ny));
  for (T& e : gy) e = static_cast<T>(random.rounding_value());
  const Tensor gyt = from_vector(gy, y_shape);
  const Tensor gmax = tandem::max_pool2d_backward(gyt, indices, c.x_shape, p);
  const std::vector<I> idx = indices.to_vector<I>();
  std::vector<T> kgmax(static_cast<std::size_t>(nx));
  for (I i = 0; i < nx; ++i) kgmax[i] = max_pool_grad_element(gy.data(), idx.data(), g, i);
  expect_same(gmax.to_vector<T>(), kgmax, "max_pool2d_backward");

  // Average pooling.
  const T scale = pool_scale<T>(g);
  const Tensor avg = tandem::avg_pool2d(xt, p);
  std::vector<T> kavg(static_cast<std::size_t>(ny));
  for (I i = 0; i < ny; ++i) kavg[i] = avg_pool_element(x.data(), g, scale, i);
  expect_same(avg.to_vector<T>(), kavg, "avg_pool2d");

  // Its backward. gy * scale is exact when gy is a power of two (so a fused multiply-add, on
  // either side, rounds like the separate multiply and add); the sums still round.
  std::vector<T> gp(static_cast<std::size_t>(ny));
  for (T& e : gp) {
    const double sign = random.chance(0.5) ? -1 : 1;
    e = static_cast<T>(sign * std::ldexp(1.0, static_cast<int>(random.integer(-30, 30))));
  }
  const Tensor gavg = tandem::avg_pool2d_backward(from_vector(gp, y_shape), c.x_shape, p);
  std::vector<T> kgavg(static_cast<std::size_t>(nx));
  for (I i = 0; i < nx; ++i) kgavg[i] = avg_pool_grad_element(gp.data(), g, scale, i);
  expect_same(gavg.to_vector<T>(), kgavg, "avg_pool2d_backward");
}

}  // namespace

TEST_CASE("pool_window is the window clipped to the input") {
  for (I size = 0; size <= 7; ++size)
    for (I kernel = 1; kernel <= 5; ++kernel)
      for (I stride = 1; stride <= 4; ++stride)
        for (I pad = 0; pad <= 5; ++pad)
          for (I o = 0; o <= 8; ++o) {
            const WindowSpan s = pool_window(o, stride, pad, kernel, size);
            INFO("o " << o << ", stride " << stride << ", pad " << pad << ", kernel " << kernel << ", size " << size);
            REQUIRE(s.begin <= s.end);
            const I start = o * stride - pad;
            for (I i = -10; i < size + 10; ++i) {
              const bool inside = i >= 0 && i < size && i >= start && i < start + kernel;
              REQUIRE(inside == (i >= s.begin && i < s.end));
            }
          }
}

TEST_CASE("windows_containing lists exactly the windows that read an input position") {
  for (I size = 1; size <= 8; ++size)
    for (I kernel = 1; kernel <= 5; ++kernel)
      for (I stride = 1; stride <= 5; ++stride)
        for (I pad = 0; pad <= 5; ++pad)
          for (I out = 0; out <= 10; ++out)
            for (I i = 0; i < size; ++i) {
              const WindowSpan s = windows_containing(i, stride, pad, kernel, out);
              INFO("i " << i << ", stride " << stride << ", pad " << pad << ", kernel " << kernel << ", out " << out);
              REQUIRE(s.begin <= s.end);
              // An empty span may lie past `out` ({1, 1} for out 0): the loops over it do nothing.
              REQUIRE(s.begin >= 0);
              if (s.begin < s.end) REQUIRE(s.end <= out);
              for (I o = 0; o < out; ++o) {
                const bool contains = o * stride - pad <= i && i < o * stride - pad + kernel;
                REQUIRE(contains == (o >= s.begin && o < s.end));
                // The same windows as pool_window's clipped spans (what the forward pass reads).
                const WindowSpan w = pool_window(o, stride, pad, kernel, size);
                REQUIRE(contains == (i >= w.begin && i < w.end));
              }
            }
}

TEST_CASE("output_reading finds the one output whose tap reads an input position") {
  for (I stride = 1; stride <= 4; ++stride)
    for (I pad = 0; pad <= 4; ++pad)
      for (I dilate = 1; dilate <= 3; ++dilate)
        for (I tap = 0; tap <= 3; ++tap)
          for (I out = 0; out <= 8; ++out)
            for (I i = 0; i < 12; ++i) {
              I expected = -1;
              for (I o = 0; o < out; ++o)
                if (o * stride - pad + tap * dilate == i) expected = o;  // at most one: stride >= 1
              INFO("i " << i << ", tap " << tap << ", stride " << stride << ", pad " << pad << ", dilate " << dilate
                        << ", out " << out);
              REQUIRE(output_reading(i, tap, stride, pad, dilate, out) == expected);
            }
}

TEST_CASE("negative_infinity") {
  CHECK(negative_infinity<float>() == -std::numeric_limits<float>::infinity());
  CHECK(negative_infinity<double>() == -std::numeric_limits<double>::infinity());
}

TEST_CASE("im2col and col2im kernel bodies equal the CPU backend") {
  Random random(20240611);
  for (int trial = 0; trial < 1500; ++trial) {
    const Case c = random_case(random, false);
    check_conv_case<float>(random, c);
    check_conv_case<double>(random, c);
  }
}

TEST_CASE("pooling kernel bodies equal the CPU backend") {
  Random random(777);
  for (int trial = 0; trial < 1500; ++trial) {
    const Case c = random_case(random, true);
    check_pool_case<float>(random, c);
    check_pool_case<double>(random, c);
  }
}

TEST_CASE("pooling: the CPU's special cases") {
  // 2x2 windows with stride 2 and no padding take the CPU's unrolled path: same rules.
  Random random(5);
  for (int trial = 0; trial < 200; ++trial) {
    Case c;
    c.x_shape = Shape{random.integer(1, 2), random.integer(1, 3), random.integer(2, 9), random.integer(2, 9)};
    c.kernel_h = c.kernel_w = 2;
    c.params.stride(2);
    c.cover_all = false;
    check_pool_case<float>(random, c);
    check_pool_case<double>(random, c);
  }
  // NaN first in its window wins; NaN later never replaces a number; a window entirely in the
  // padding gives -inf and index -1.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x{nan, 1, 2, nan};  // [1, 1, 1, 4]
  Conv2DGeometry g;
  g.batch = g.channels = g.height = 1;
  g.width = 4;
  g.kernel_h = 1;
  g.kernel_w = 2;
  g.stride_x = 2;
  g.pad_x = 2;
  g.out_h = 1;
  g.out_w = 4;  // windows [-2, 0), [0, 2), [2, 4), [4, 6)
  float v[4];
  I idx[4];
  for (I i = 0; i < 4; ++i) max_pool_element(x.data(), g, i, &v[i], &idx[i]);
  CHECK(v[0] == -std::numeric_limits<float>::infinity());
  CHECK(idx[0] == -1);
  CHECK(std::isnan(v[1]));
  CHECK(idx[1] == 0);
  CHECK(v[2] == 2);
  CHECK(idx[2] == 2);
  CHECK(v[3] == -std::numeric_limits<float>::infinity());
  CHECK(idx[3] == -1);
  Pool2DParams p;
  p.kernel_w = 2;
  p.stride_x = 2;
  p.pad_x = 2;
  const auto [y, indices] = tandem::max_pool2d(from_vector(x, {1, 1, 1, 4}), p);
  expect_same(y.to_vector<float>(), std::vector<float>(v, v + 4), "max_pool2d values");
  expect_same(indices.to_vector<I>(), std::vector<I>(idx, idx + 4), "max_pool2d indices");
}
