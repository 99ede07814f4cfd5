// The fused softmax (core/ops/softmax.h; the CPU kernel in core/cpu/softmax.cc) against a loop in
// double: values and the backward formula, scales, the causal mask (masked keys exactly 0),
// long rows and many rows (the parallel split and Eigen's vector tails), IEEE underflow, the
// composed default of Backend that a backend without the kernels uses, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/backend.h"
#include "core/ops.h"
#include "tests/core/test_util.h"

using namespace tandem;
using test_util::uniform;

namespace {

// softmax(scale * x) over rows of n, query r % tq seeing keys j <= r % tq + n - tq when tq > 0.
std::vector<double> reference(const std::vector<double>& x, std::int64_t n, double scale, std::int64_t tq) {
  std::vector<double> y(x.size(), 0.0);
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / n;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t k = tq > 0 ? r % tq + n - tq + 1 : n;
    double top = -INFINITY, total = 0;
    for (std::int64_t j = 0; j < k; ++j) top = std::max(top, scale * x[r * n + j]);
    for (std::int64_t j = 0; j < k; ++j) total += (y[r * n + j] = std::exp(scale * x[r * n + j] - top));
    for (std::int64_t j = 0; j < k; ++j) y[r * n + j] /= total;
  }
  return y;
}

std::vector<double> reference_backward(const std::vector<double>& y, const std::vector<double>& gy, std::int64_t n,
                                       double scale) {
  std::vector<double> gx(y.size());
  for (std::size_t r = 0; r < y.size() / n; ++r) {
    double dot = 0;
    for (std::int64_t j = 0; j < n; ++j) dot += y[r * n + j] * gy[r * n + j];
    for (std::int64_t j = 0; j < n; ++j) gx[r * n + j] = scale * y[r * n + j] * (gy[r * n + j] - dot);
  }
  return gx;
}

void require_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(got[i] == Approx(want[i]).epsilon(tol).margin(tol * 1e-2));  // backward cancels: gy - dot
  }
}

}  // namespace

TEST_CASE("softmax_last_axis: values and backward against a loop, with scales and the causal mask", "[softmax]") {
  struct Case {
    Shape shape;
    double scale;
    bool causal;
  };
  std::uint64_t seed = 1;
  for (const Case& c : {Case{{1, 1}, 1.0, false}, Case{{3, 7}, 1.0, false}, Case{{2, 4, 4}, 0.5, true},
                        Case{{2, 3, 6}, 2.0, true}, Case{{4097, 33}, 1.0, false}, Case{{3, 1000}, 0.125, false},
                        Case{{64, 64, 64}, 0.17677, true}}) {
    INFO("shape " << shape_str(c.shape) << " scale " << c.scale << " causal " << c.causal);
    const std::int64_t n = c.shape.back(), tq = c.causal ? c.shape[c.shape.size() - 2] : 0;
    for (DType dtype : {DType::f64, DType::f32}) {
      INFO(dtype_name(dtype));
      const Tensor x = uniform(c.shape, seed++, -4, 4, dtype), gy = uniform(c.shape, seed++, -1, 1, dtype);
      const std::vector<double> xs = x.to_vector<double>();
      const Tensor y = softmax_last_axis(x, c.scale, c.causal);
      const std::vector<double> want = reference(xs, n, c.scale, tq), ys = y.to_vector<double>();
      const double tol = dtype == DType::f64 ? 1e-13 : 2e-6;
      require_near(ys, want, tol);
      for (std::size_t i = 0; i < want.size(); ++i)
        if (want[i] == 0) REQUIRE(ys[i] == 0.0);  // masked: exactly 0
      require_near(softmax_last_axis_backward(y, gy, c.scale).to_vector<double>(),
                   reference_backward(ys, gy.to_vector<double>(), n, c.scale), tol);
    }
  }
}

TEST_CASE("softmax_last_axis: the composed default of Backend gives the kernel's results", "[softmax]") {
  Backend& cpu = backend_for(Device::cpu(), "test");
  const Tensor x = uniform({3, 5, 5}, 50, -3, 3, DType::f64), gy = uniform({3, 5, 5}, 51, -1, 1, DType::f64);
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    Tensor fused(x.shape(), DType::f64), composed(x.shape(), DType::f64);
    cpu.softmax_forward(x, 15, 5, 0.7, causal ? 5 : 0, fused);
    cpu.Backend::softmax_forward(x, 15, 5, 0.7, causal ? 5 : 0, composed);
    require_near(composed.to_vector<double>(), fused.to_vector<double>(), 1e-14);
    Tensor g_fused(x.shape(), DType::f64), g_composed(x.shape(), DType::f64);
    cpu.softmax_backward(fused, gy, 15, 5, 0.7, g_fused);
    cpu.Backend::softmax_backward(fused, gy, 15, 5, 0.7, g_composed);
    require_near(g_composed.to_vector<double>(), g_fused.to_vector<double>(), 1e-14);
  }
}

TEST_CASE("softmax_last_axis: scores far below the maximum give IEEE's exact zeros", "[softmax]") {
  // exp(-200) underflows to 0 in f32; Eigen's packet exp alone would give the smallest normal.
  std::vector<float> x(40, -200.0f);
  x[3] = 0;
  const std::vector<double> y = softmax_last_axis(from_vector(x, {1, 40})).to_vector<double>();
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == (i == 3 ? 1.0 : 0.0));
}

TEST_CASE("softmax_last_axis: errors name the operation and the shapes", "[softmax]") {
  REQUIRE_THROWS_WITH(softmax_last_axis(from_vector(std::vector<std::int32_t>{1, 2}, {2})),
                      Catch::Contains("softmax"));
  REQUIRE_THROWS_WITH(softmax_last_axis(uniform({2, 3}, 1), 0.0), Catch::Contains("scale must be positive"));
  REQUIRE_THROWS_WITH(softmax_last_axis(uniform({4, 3}, 2), 1.0, true),
                      Catch::Contains("at least as many keys (3) as queries (4)"));
  REQUIRE_THROWS_WITH(softmax_last_axis_backward(uniform({2, 3}, 3), uniform({3, 2}, 4)),
                      Catch::Contains("must have the output's shape"));
  CHECK(softmax_last_axis(uniform({0, 3}, 5)).shape() == Shape{0, 3});
}
