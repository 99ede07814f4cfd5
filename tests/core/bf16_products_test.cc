// bf16 products on the CPU: oneDNN's bf16 matmul where the processor has bf16 dot products
// (CpuBackend::runs_16bit_products), the widened f32 product elsewhere or when TANDEM_GEMM names
// another library. Either way each result is the f32 sum of exact bf16 products, rounded once;
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
