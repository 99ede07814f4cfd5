// bf16 products on the CPU: oneDNN's bf16 matmul and convolutions where the processor has bf16
// dot products (CpuBackend::runs_16bit_products / runs_16bit_convolutions), the widened f32
// product elsewhere, when TANDEM_GEMM names another library, and (convolutions) in deterministic
// mode. Either way each result is the f32 sum of exact bf16 products, rounded once;
// only the order of the f32 sums may differ between the two. Checked against f64 on the same
// operands within half a bf16 ulp of the result plus the f32 sums' error bound
// (k x 2^-24 x sum |a b|), at sizes where the library blocks k, with cancelling terms, transposed
// and batched operands and accumulation; and in deterministic mode, alike at every thread count.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/backend.h"
#include "core/deterministic.h"
#include "core/ops.h"
#include "core/threads.h"

using namespace tandem;

namespace {

bool native() { return backend_for(Device::cpu(), "test").runs_16bit_products(DType::bf16); }

Tensor bf16_operand(const Shape& shape, std::uint64_t seed, double low, double high) {
  Generator gen(seed);
  return rand_uniform(shape, gen, low, high, DType::f64).to(DType::bf16);
}

// got (bf16) against the f64 product of the same operands: half a bf16 ulp plus the f32 sums'
// bound, where `magnitude` is sum_k |a_ik b_kj| per element.
void check_against_f64(const Tensor& got, const Tensor& exact, const Tensor& magnitude, std::int64_t k) {
  REQUIRE(got.dtype() == DType::bf16);
  REQUIRE(got.shape() == exact.shape());
  const auto g = got.to_vector<double>(), e = exact.to_vector<double>(), mag = magnitude.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": got " << g[i] << ", f64 " << e[i] << ", sum of |terms| " << mag[i]);
    REQUIRE(std::fabs(g[i] - e[i]) <= std::ldexp(std::fabs(e[i]), -8) + double(k) * std::ldexp(mag[i], -24));
  }
}

class ForcedGemm {
 public:
  explicit ForcedGemm(const char* library) { setenv("TANDEM_GEMM", library, 1); }
  ~ForcedGemm() { unsetenv("TANDEM_GEMM"); }
};

}  // namespace

TEST_CASE("bf16 products: within the format's bound of f64, native or widened") {
  INFO("native bf16 products here: " << native());
  struct Case {
    std::int64_t m, n, k;
    bool ta, tb;
  };
  for (const Case& c : {Case{64, 70, 300, false, false}, Case{33, 129, 1000, true, false},
                        Case{100, 50, 784, false, true}, Case{17, 9, 4099, true, true}}) {
    INFO("m " << c.m << " n " << c.n << " k " << c.k << " ta " << c.ta << " tb " << c.tb);
    // Terms of both signs: the sums cancel, so the f32 bound (not the result's own ulp) is tested.
    const Tensor a = bf16_operand(c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, 1, -3, 3);
    const Tensor b = bf16_operand(c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, 2, -2, 2);
    const Tensor exact = matmul(a.to(DType::f64), b.to(DType::f64), c.ta, c.tb);
    const Tensor magnitude = matmul(abs(a.to(DType::f64)), abs(b.to(DType::f64)), c.ta, c.tb);
    const Tensor got = matmul(a, b, c.ta, c.tb);
    check_against_f64(got, exact, magnitude, c.k);
    {
      const ForcedGemm eigen("eigen");  // widened: the f32 product on Eigen, rounded once
      REQUIRE_FALSE(native());
      check_against_f64(matmul(a, b, c.ta, c.tb), exact, magnitude, c.k);
    }
  }
}

TEST_CASE("bf16 products: batched and accumulated") {
  const Tensor a = bf16_operand({3, 20, 200}, 3, -1, 1), b = bf16_operand({3, 200, 30}, 4, -1, 1);
  const Tensor a64 = a.to(DType::f64), b64 = b.to(DType::f64);
  check_against_f64(matmul(a, b), matmul(a64, b64), matmul(abs(a64), abs(b64)), 200);

  // out += a b: the sum with out in f32, then one rounding.
  const Tensor x = bf16_operand({20, 200}, 5, -1, 1), y = bf16_operand({200, 30}, 6, -1, 1);
  Tensor out = bf16_operand({20, 30}, 7, -8, 8);
  const Tensor before = out.to(DType::f64);
  matmul_accumulate_(out, x, y);
  const Tensor x64 = x.to(DType::f64), y64 = y.to(DType::f64);
  check_against_f64(out, add(before, matmul(x64, y64)), add(abs(before), matmul(abs(x64), abs(y64))), 201);
}

TEST_CASE("bf16 products: deterministic mode gives the same bits at every thread count") {
  const bool was = deterministic();
  const int threads = max_threads();
  set_deterministic(true);
  const Tensor a = bf16_operand({600, 700}, 8, -1, 1), b = bf16_operand({700, 300}, 9, -1, 1);
  set_max_threads(1);
  const std::vector<float> one = matmul(a, b).to_vector<float>();
  set_max_threads(2);
  const std::vector<float> two = matmul(a, b).to_vector<float>();
  set_max_threads(threads);
  set_deterministic(was);
  REQUIRE(one == two);
}

TEST_CASE("bf16 products: f16 operands are widened (no native f16 products on the CPU)") {
  REQUIRE_FALSE(backend_for(Device::cpu(), "test").runs_16bit_products(DType::f16));
  const Tensor a = bf16_operand({8, 40}, 10, -1, 1).to(DType::f16), b = bf16_operand({40, 6}, 11, -1, 1).to(DType::f16);
  REQUIRE(matmul(a, b).to_vector<double>() ==
          matmul(a.to(DType::f32), b.to(DType::f32)).to(DType::f16).to_vector<double>());
}

TEST_CASE("bf16 convolutions: forward (bias, ReLU), both gradients, within the format's bound of f64") {
  struct Case {
    Shape x, w;
    Conv2DParams params;
  };
  for (const Case& c : {Case{{2, 16, 12, 12}, {24, 16, 3, 3}, Conv2DParams::make(1, 1)},
                        Case{{3, 8, 15, 11}, {8, 4, 5, 3}, Conv2DParams::make(2, 2, 1, 2)},
                        Case{{1, 6, 17, 17}, {5, 6, 3, 3}, Conv2DParams::make(1, 2, 2)}}) {
    INFO("x " << c.x << " W " << c.w << " stride " << c.params.stride_y << " groups " << c.params.groups);
    const Tensor x = bf16_operand(c.x, 12, -2, 2), W = bf16_operand(c.w, 13, -1, 1),
                 b = bf16_operand({c.w[0]}, 14, -1, 1);
    const Tensor x64 = x.to(DType::f64), W64 = W.to(DType::f64), b64 = b.to(DType::f64);
    const std::int64_t terms = c.w[1] * c.w[2] * c.w[3] + 1;
    const Tensor y = conv2d(x, W, b, c.params), exact = conv2d(x64, W64, b64, c.params);
    const Tensor magnitude = conv2d(abs(x64), abs(W64), abs(b64), c.params);
    check_against_f64(y, exact, magnitude, terms);
    // ReLU inside the primitive, before the one rounding.
    check_against_f64(conv2d(x, W, b, c.params, /*relu=*/true), relu(exact), magnitude, terms);

    const Tensor gy = bf16_operand(y.shape(), 15, -1, 1), gy64 = gy.to(DType::f64);
    check_against_f64(conv2d_grad_input(gy, W, c.x, c.params), conv2d_grad_input(gy64, W64, c.x, c.params),
                      conv2d_grad_input(abs(gy64), abs(W64), c.x, c.params), c.w[0] * c.w[2] * c.w[3]);
    const std::int64_t positions = c.x[0] * y.size(2) * y.size(3);
    check_against_f64(conv2d_grad_weight(x, gy, c.w, c.params), conv2d_grad_weight(x64, gy64, c.w, c.params),
                      conv2d_grad_weight(abs(x64), abs(gy64), c.w, c.params), positions);
  }
}

TEST_CASE("bf16 convolutions: deterministic mode widens them (the same bits at every thread count)") {
  const bool was = deterministic();
  const int threads = max_threads();
  set_deterministic(true);
  const Tensor x = bf16_operand({4, 8, 20, 20}, 16, -1, 1), W = bf16_operand({16, 8, 3, 3}, 17, -1, 1);
  const Tensor gy = bf16_operand({4, 16, 18, 18}, 18, -1, 1);
  set_max_threads(1);
  const std::vector<float> y1 = conv2d(x, W, Tensor()).to_vector<float>();
  const std::vector<float> gw1 = conv2d_grad_weight(x, gy, W.shape()).to_vector<float>();
  set_max_threads(2);
  const std::vector<float> y2 = conv2d(x, W, Tensor()).to_vector<float>();
  const std::vector<float> gw2 = conv2d_grad_weight(x, gy, W.shape()).to_vector<float>();
  set_max_threads(threads);
  set_deterministic(was);
  REQUIRE(y1 == y2);
  REQUIRE(gw1 == gw2);
}
