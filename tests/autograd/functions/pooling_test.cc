// Values, gradients and errors of autograd/functions/pooling.h: max_pooling_2d (with Chainer's
// cover_all) and average_pooling_2d against naive loops, gradcheck on inputs with distinct
// values (so every window has a unique maximum), f32 against f64.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using Catch::Matchers::Contains;

namespace {

struct PoolCase {
  Shape x;
  std::int64_t ky, kx, sy, sx, py, px;
  bool cover_all;
};

std::string describe(const PoolCase& c) {
  std::ostringstream out;
  out << "x " << shape_str(c.x) << " kernel " << c.ky << "x" << c.kx << " stride " << c.sy << "x" << c.sx << " pad "
      << c.py << "x" << c.px << (c.cover_all ? " cover_all" : "");
  return out.str();
}

// A random permutation of 0.05 * (0, 1, ..., n-1) shifted to be centred on 0: all values
// distinct and 0.05 apart, far more than gradcheck's step, so no maximum changes under it.
Tensor distinct_values(const Shape& shape, std::uint64_t seed, DType dtype = DType::f64) {
  const std::int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0.0);
  std::mt19937_64 engine(seed);
  std::shuffle(v.begin(), v.end(), engine);
  for (double& e : v) e = 0.05 * (e - 0.5 * static_cast<double>(n));
  return from_vector<double>(v, shape).to(dtype);
}

std::int64_t outsize(std::int64_t size, std::int64_t k, std::int64_t s, std::int64_t p, bool cover_all) {
  return cover_all ? (size + 2 * p - k + s - 1) / s + 1 : (size + 2 * p - k) / s + 1;
}

// Naive pooling in f64: the max over the window's input elements (padding never counts), or
// the sum over them divided by ky * kx.
Tensor naive_pool(const Tensor& x, const PoolCase& c, bool max) {
  const std::vector<double> vx = x.to_vector<double>();
  const std::int64_t planes = c.x[0] * c.x[1], H = c.x[2], W = c.x[3];
  const std::int64_t oh = outsize(H, c.ky, c.sy, c.py, max && c.cover_all);
  const std::int64_t ow = outsize(W, c.kx, c.sx, c.px, max && c.cover_all);
  std::vector<double> y;
  for (std::int64_t p = 0; p < planes; ++p)
    for (std::int64_t oy = 0; oy < oh; ++oy)
      for (std::int64_t ox = 0; ox < ow; ++ox) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        for (std::int64_t i = 0; i < c.ky; ++i)
          for (std::int64_t j = 0; j < c.kx; ++j) {
            const std::int64_t iy = oy * c.sy - c.py + i, ix = ox * c.sx - c.px + j;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
            best = std::max(best, vx[(p * H + iy) * W + ix]);
            sum += vx[(p * H + iy) * W + ix];
          }
        y.push_back(max ? best : sum / static_cast<double>(c.ky * c.kx));
      }
  return from_vector<double>(y, {c.x[0], c.x[1], oh, ow});
}

const std::vector<PoolCase>& cases() {
  static const std::vector<PoolCase> all = {
      {{2, 3, 4, 4}, 2, 2, 2, 2, 0, 0, true},    // exact tiling: cover_all changes nothing
      {{2, 3, 5, 5}, 2, 2, 2, 2, 0, 0, true},    // cover_all adds a partial window per axis
      {{2, 3, 5, 5}, 2, 2, 2, 2, 0, 0, false},
      {{1, 2, 7, 7}, 3, 3, 2, 2, 1, 1, true},    // overlapping windows with padding
      {{1, 2, 7, 7}, 3, 3, 2, 2, 1, 1, false},
      {{2, 2, 6, 6}, 3, 3, 1, 1, 1, 1, false},   // stride 1 "same"
      {{1, 2, 5, 8}, 2, 3, 1, 2, 0, 1, true},    // non-square kernel, stride and pad
      {{1, 1, 6, 7}, 3, 2, 3, 2, 1, 0, false},
      {{3, 1, 4, 5}, 4, 5, 1, 1, 0, 0, false},   // one window covering the whole image
      {{1, 2, 3, 3}, 1, 1, 1, 1, 0, 0, true},    // 1x1: identity
  };
  return all;
}

}  // namespace

TEST_CASE("max_pooling_2d and average_pooling_2d match naive loops", "[pooling]") {
  std::uint64_t seed = 1;
  for (const PoolCase& c : cases()) {
    INFO(describe(c));
    const Tensor x = distinct_values(c.x, seed++);
    const Variable vx(x);
    const Variable ymax = F::max_pooling_2d(vx, c.ky, c.kx, c.sy, c.sx, c.py, c.px, c.cover_all);
    const Tensor want_max = naive_pool(x, c, true);
    REQUIRE(ymax.shape() == want_max.shape());
    REQUIRE_NEAR_VALUES(ymax.data(), want_max, 0);
    const Variable yavg = F::average_pooling_2d(vx, c.ky, c.kx, c.sy, c.sx, c.py, c.px);
    const Tensor want_avg = naive_pool(x, c, false);
    REQUIRE(yavg.shape() == want_avg.shape());
    REQUIRE_NEAR_VALUES(yavg.data(), want_avg, 1e-14);
  }
}

TEST_CASE("pooling short forms follow Chainer's defaults", "[pooling]") {
  const Variable x(distinct_values({1, 2, 5, 5}, 50));
  // stride defaults to ksize; max pooling defaults to cover_all=True.
  REQUIRE(F::max_pooling_2d(x, 2).shape() == Shape{1, 2, 3, 3});
  REQUIRE(F::max_pooling_2d(x, 2, std::nullopt, 0, false).shape() == Shape{1, 2, 2, 2});
  REQUIRE(F::max_pooling_2d(x, 3, 2, 1).shape() == Shape{1, 2, 3, 3});
  REQUIRE(F::max_pooling_2d(x, 3, 1, 1).shape() == Shape{1, 2, 5, 5});
  REQUIRE(F::average_pooling_2d(x, 2).shape() == Shape{1, 2, 2, 2});
  REQUIRE(F::average_pooling_2d(x, 3, 2, 1).shape() == Shape{1, 2, 3, 3});
  REQUIRE_NEAR_VALUES(F::max_pooling_2d(x, 2).data(), F::max_pooling_2d(x, 2, 2, 2, 2, 0, 0, true).data(), 0);
  REQUIRE_NEAR_VALUES(F::average_pooling_2d(x, 3, 2, 1).data(), F::average_pooling_2d(x, 3, 3, 2, 2, 1, 1).data(), 0);
}

TEST_CASE("pooling values and gradients by hand", "[pooling]") {
  // 4x4 image, 2x2 windows: max of each quadrant; its gradient lands on the maxima only.
  Variable x(gc_util::f64({1, 5, 2, 0,
                           3, 4, 8, 7,
                           -1, -2, 0, 6,
                           -3, -4, 9, 1}, {1, 1, 4, 4}), true);
  const Variable y = F::max_pooling_2d(x, 2);
  REQUIRE_NEAR_VALUES(y.data(), {5, 8, -1, 9}, 0);
  y.backward(gc_util::f64({1, 2, 3, 4}, {1, 1, 2, 2}));
  REQUIRE_NEAR_VALUES(x.grad(), {0, 1, 0, 0, 0, 0, 2, 0, 3, 0, 0, 0, 0, 0, 4, 0}, 0);

  // Average pooling with pad 1 divides by the full window (padding counts as zeros).
  Variable z(gc_util::f64({1, 2, 3, 4}, {1, 1, 2, 2}), true);
  const Variable a = F::average_pooling_2d(z, 2, 1, 1);  // 3x3 output
  REQUIRE_NEAR_VALUES(a.data(), {0.25, 0.75, 0.5, 1, 2.5, 1.5, 0.75, 1.75, 1});
  F::sum(a).backward();
  REQUIRE_NEAR_VALUES(z.grad(), {1, 1, 1, 1});  // each element is in 4 windows, 1/4 each
}

TEST_CASE("max_pooling_2d gradients", "[pooling][gradcheck]") {
  std::uint64_t seed = 100;
  for (const PoolCase& c : cases()) {
    INFO(describe(c));
    auto fn = [c](const Variables& v) -> Variables {
      return {F::max_pooling_2d(v[0], c.ky, c.kx, c.sy, c.sx, c.py, c.px, c.cover_all)};
    };
    REQUIRE_GRADCHECK(fn, {distinct_values(c.x, seed++)});
  }
}

TEST_CASE("average_pooling_2d gradients", "[pooling][gradcheck]") {
  std::uint64_t seed = 200;
  for (const PoolCase& c : cases()) {
    INFO(describe(c));
    auto fn = [c](const Variables& v) -> Variables {
      return {F::average_pooling_2d(v[0], c.ky, c.kx, c.sy, c.sx, c.py, c.px)};
    };
    REQUIRE_GRADCHECK(fn, {gc_util::uniform(c.x, seed++)});
  }
}

TEST_CASE("pooling in f32 agrees with f64", "[pooling][f32]") {
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::max_pooling_2d(v[0], 3, 2, 1)}; },
                                 {distinct_values({2, 3, 7, 7}, 300)});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::average_pooling_2d(v[0], 3, 2, 1)}; },
                                 {gc_util::uniform({2, 3, 7, 7}, 301)});
}

TEST_CASE("pooling reports bad operands", "[pooling][errors]") {
  const Variable x(gc_util::uniform({2, 3, 5, 5}, 400), true);
  REQUIRE_THROWS_AS(F::max_pooling_2d(x, 6), Error);
  REQUIRE_THROWS_WITH(F::max_pooling_2d(x, 6), Contains("max_pool2d") && Contains("larger than the padded input"));
  REQUIRE_NOTHROW(F::max_pooling_2d(x, 6, 1, 1));
  REQUIRE_THROWS_WITH(F::average_pooling_2d(x, 4, 6, 1, 1, 0, 0),
                      Contains("avg_pool2d") && Contains("larger than the padded input") && Contains("[2, 3, 5, 5]"));
  const Variable xi(tandem::zeros({2, 3, 5, 5}, DType::i32));
  REQUIRE_THROWS_WITH(F::max_pooling_2d(xi, 2), Contains("floating") && Contains("i32"));
  REQUIRE_THROWS_WITH(F::average_pooling_2d(xi, 2), Contains("floating") && Contains("i32"));
  REQUIRE_THROWS_WITH(F::max_pooling_2d(F::reshape(x, {6, 5, 5}), 2), Contains("4-D") && Contains("[6, 5, 5]"));
  REQUIRE_THROWS_WITH(F::max_pooling_2d(x, 2, 0), Contains("stride"));
  REQUIRE_THROWS_WITH(F::average_pooling_2d(x, 0), Contains("kernel"));
  REQUIRE_THROWS_WITH(F::average_pooling_2d(x, 2, 2, -1), Contains("pad"));
}
