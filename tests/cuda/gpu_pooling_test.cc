// Pooling kernels on cuda:0 against the CPU: max pooling (values, argmax indices with ties in
// window order, windows entirely in the padding) and average pooling, forward and backward,
// with overlapping windows, padding, cover_all, f32 and f64, small and large.
#include <catch2/catch.hpp>

#include <sstream>

#include "core/ops/conv.h"
#include "tests/cuda/gpu_test_util.h"

using namespace tandem;
using namespace gpu_test;
using Catch::Matchers::Contains;

namespace {

struct PoolCase {
  Shape x;
  std::int64_t kh, kw, sy, sx, py, px;
  bool cover_all;
};

Pool2DParams params_of(const PoolCase& c) {
  Pool2DParams p;
  p.kernel_h = c.kh;
  p.kernel_w = c.kw;
  p.stride_y = c.sy;
  p.stride_x = c.sx;
  p.pad_y = c.py;
  p.pad_x = c.px;
  p.cover_all = c.cover_all;
  return p;
}

std::string describe(const PoolCase& c) {
  std::ostringstream out;
  out << "x " << shape_str(c.x) << " kernel " << c.kh << "x" << c.kw << " stride " << c.sy << "x" << c.sx << " pad "
      << c.py << "x" << c.px << (c.cover_all ? " cover_all" : "");
  return out.str();
}

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {
      {{2, 3, 5, 5}, 3, 3, 1, 1, 0, 0, false},   // overlapping windows
      {{2, 3, 5, 5}, 3, 3, 1, 1, 1, 1, false},   // and padded
      {{1, 2, 7, 6}, 3, 3, 2, 2, 1, 1, false},   // overlapping, stride 2
      {{1, 2, 7, 6}, 3, 3, 2, 2, 1, 1, true},    // cover_all
      {{2, 1, 6, 9}, 2, 4, 1, 3, 0, 1, false},   // non-square
      {{1, 2, 5, 5}, 2, 2, 2, 2, 0, 0, true},    // cover_all adds a partial window
      {{1, 1, 3, 3}, 1, 1, 2, 2, 1, 1, false},   // windows entirely in the padding
      {{1, 2, 3, 4}, 3, 4, 1, 1, 0, 0, false},   // one window over everything
      {{2, 3, 6, 8}, 2, 2, 2, 2, 0, 0, false},   // the usual 2x2 stride 2
      {{1, 2, 5, 7}, 2, 2, 2, 2, 0, 0, false},   // the last row and column unread
      {{3, 2, 4, 5}, 3, 2, 3, 2, 1, 1, true},
      {{64, 64, 28, 28}, 2, 2, 2, 2, 0, 0, true},   // the examples' pooling, Chainer's default cover_all
      {{16, 32, 56, 56}, 3, 3, 2, 2, 1, 1, false},  // ResNet's stem pooling
  };
  return cases;
}

// Max pooling outputs and backward; average pooling outputs and backward; for x on both.
void check_pooling(const PoolCase& c, const Tensor& x, std::uint64_t seed) {
  const Pool2DParams p = params_of(c);
  const auto pooled = max_pool2d(x, p);
  {
    INFO("max_pool2d: values and indices");
    check_unary([&](const Tensor& t) {
      const auto r = max_pool2d(t, p);
      return std::vector<Tensor>{r.first, r.second};
    }, x, kExact);
  }
  const Tensor gy = uniform(pooled.first.shape(), seed, -1, 1, x.dtype());
  {
    INFO("max_pool2d_backward (overlapping windows add up)");
    check_binary([&](const Tensor& g, const Tensor& idx) { return max_pool2d_backward(g, idx, x.shape(), p); }, gy,
                 pooled.second, for_dtype(x.dtype(), 1e-6, 1e-15));
  }
  {
    INFO("avg_pool2d");
    check_unary([&](const Tensor& t) { return avg_pool2d(t, p); }, x, for_dtype(x.dtype(), 1e-6, 1e-15));
  }
  {
    INFO("avg_pool2d_backward");
    check_unary([&](const Tensor& g) { return avg_pool2d_backward(g, x.shape(), p); }, gy,
                for_dtype(x.dtype(), 1e-6, 1e-15));
  }
}

}  // namespace

TEST_CASE("max and average pooling, forward and backward, every geometry", "[pooling]") {
  std::uint64_t seed = 1;
  for (const PoolCase& c : pool_cases()) {
    INFO(describe(c));
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO(dtype_name(dtype));
      const Tensor x = uniform(c.x, seed, -1, 1, dtype);
      check_pooling(c, x, seed + 1);
      seed += 2;
    }
  }
}

TEST_CASE("max pooling ties go to the first element in window order", "[pooling][ties]") {
  std::uint64_t seed = 100;
  for (const PoolCase& c : pool_cases()) {
    INFO(describe(c));
    // Values 0..2: most windows hold their maximum several times.
    check_pooling(c, random_ints(c.x, seed, 0, 2, DType::f32), seed + 1);
    // All equal (zeros): the first in-image element of every window.
    check_pooling(c, zeros(c.x, DType::f64), seed + 2);
    seed += 3;
  }
}

TEST_CASE("windows entirely in the padding give -inf and index -1, and no gradient", "[pooling][padding]") {
  Pool2DParams p;
  p.stride_y = p.stride_x = 2;
  p.pad_y = p.pad_x = 1;
  const Tensor x = iota({2, 3, 3, 3}, DType::f64);
  const auto want = max_pool2d(x, p);
  const auto got = max_pool2d(x.to(gpu()), p);
  REQUIRE_GPU_MATCHES(got.first, want.first, kExact);
  REQUIRE_GPU_MATCHES(got.second, want.second, kExact);
  REQUIRE(got.second.to_vector<std::int64_t>()[0] == -1);
  check_binary([&](const Tensor& g, const Tensor& idx) { return max_pool2d_backward(g, idx, x.shape(), p); },
               ones(want.first.shape(), DType::f64), want.second, kExact);
}

TEST_CASE("pooling errors are the CPU's", "[pooling][errors]") {
  const Tensor x = uniform({2, 3, 5, 5}, 600).to(gpu());
  Pool2DParams big;
  big.kernel_h = big.kernel_w = 6;
  CHECK_THROWS_WITH(max_pool2d(x, big), Contains("max_pool2d") && Contains("larger"));
  CHECK_THROWS_WITH(avg_pool2d(x.to(DType::i64), Pool2DParams()), Contains("avg_pool2d") && Contains("floating"));
  Pool2DParams two;
  two.kernel_h = two.kernel_w = two.stride_y = two.stride_x = 2;
  CHECK_THROWS_WITH(max_pool2d_backward(zeros({2, 3, 2, 2}, DType::f32, gpu()), zeros({2, 3, 2, 2}, DType::f32, gpu()),
                                        x.shape(), two),
                    Contains("i64"));
}
