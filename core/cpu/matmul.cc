// Batched GEMM on the library measured fastest for each shape on this machine (OpenBLAS, oneDNN
// or Eigen: core/cpu/gemm_choice.h). A single product runs multi-threaded inside the library;
// batches of small products are spread over threads instead, each running serially.
#include <algorithm>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "core/cpu/gemm.h"
#include "core/cpu/gemm_choice.h"
#include "core/cpu/measured_choice.h"
#include "core/cpu/packed_weights.h"

#include "core/cpu/cpu_backend.h"
#include "core/cpu/parallel.h"
#include "core/deterministic.h"
#include "core/error.h"
#include "core/half_types.h"
#include "core/kernel_choices.h"
#include "core/tensor.h"

namespace tandem {

namespace {

// One product with explicit row strides: A stored [m, k] (or [k, m] when ta) with rows lda
// apart, B stored [k, n] (or [n, k] when tb) with rows ldb apart, C [m, n] with rows ldc apart,
// on the library measured fastest for its shape here (core/cpu/gemm_choice.h).
template <typename T>
void gemm_strided(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc, std::int64_t m,
                  std::int64_t n, std::int64_t k, bool ta, bool tb, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) {
      for (std::int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
    }
    return;
  }
  cpu::gemm_on(cpu::gemm_backend_for<T>(m, n, k, ta, tb), a, lda, b, ldb, c, ldc, m, n, k, ta, tb, accumulate);
}

// Whether splitting one product over the threads by tandem is worth measuring: large products with
// a short side (an MLP's [100 x 784] x [784 x 1000], its weight gradients with k = 100). On two
// cores two serial GEMMs on halves of C beat OpenBLAS's own split of those, and oneDNN's own split
// beat both (docs/performance.md, "CPU kernels: the fastest library per shape"). So the split is a
// candidate, measured per class against one threaded product.
bool split_candidate(std::int64_t m, std::int64_t n, std::int64_t k) {
  return std::min({m, n, k}) <= 128 && m * n * k >= (std::int64_t(1) << 26);
}

// C's rows (or columns, whichever side is longer) in one block per thread, each a serial GEMM.
template <typename T>
void split_product(const T* a, const T* b, T* c, std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb,
                   bool accumulate) {
  const std::int64_t lda = ta ? m : k, ldb = tb ? k : n;
  if (m >= n) {
    cpu::parallel_for(m, n * k, 1, [&](std::int64_t lo, std::int64_t hi) {
      // Rows lo..hi of op(A): rows of A, or columns when A is stored transposed.
      gemm_strided(ta ? a + lo : a + lo * lda, lda, b, ldb, c + lo * n, n, hi - lo, n, k, ta, tb, accumulate);
    });
  } else {
    cpu::parallel_for(n, m * k, 1, [&](std::int64_t lo, std::int64_t hi) {
      // Columns lo..hi of op(B): columns of B, or rows when B is stored transposed.
      gemm_strided(a, lda, tb ? b + lo * ldb : b + lo, ldb, c + lo, n, m, hi - lo, k, ta, tb, accumulate);
    });
  }
}

// Deterministic mode (core/deterministic.h): C in fixed tiles of kTile rows (or columns, whichever
// side is longer), each one serial library call, spread over the threads. Every element is
// then summed by the same call at any thread count (a library that splits k over its threads
// sums in another order at each count).
template <typename T>
void deterministic_product(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc,
                           std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, bool accumulate) {
  constexpr std::int64_t kTile = 256;
  const bool by_rows = m >= n;
  const std::int64_t tiles = ((by_rows ? m : n) + kTile - 1) / kTile;
  cpu::parallel_for(tiles, kTile * (by_rows ? n : m) * k, 1 << 16, [&](std::int64_t lo, std::int64_t hi) {
    const cpu::SerialLibraryCalls serial;
    for (std::int64_t t = lo; t < hi; ++t) {
      const std::int64_t begin = t * kTile, size = std::min(kTile, (by_rows ? m : n) - begin);
      if (by_rows) {
        // Rows begin.. of op(A): rows of A, or columns when A is stored transposed.
        gemm_strided(ta ? a + begin : a + begin * lda, lda, b, ldb, c + begin * ldc, ldc, size, n, k, ta, tb,
                     accumulate);
      } else {
        // Columns begin.. of op(B): columns of B, or rows when B is stored transposed.
        gemm_strided(a, lda, tb ? b + begin * ldb : b + begin, ldb, c + begin, ldc, m, size, k, ta, tb, accumulate);
      }
    }
  });
}

// Whether the split was measured faster than one threaded product for this class (with
// TANDEM_GEMM forcing a library: always, as before the libraries were measured).
template <typename T>
bool split_measured_faster(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb) {
  if (cpu::gemm_backend_forced()) return true;
  thread_local std::unordered_map<std::uint64_t, bool> memo;  // as in gemm_backend_for
  thread_local unsigned memo_generation = 0;
  if (memo_generation != kernel_choices_generation()) memo.clear(), memo_generation = kernel_choices_generation();
  const std::uint64_t code = cpu::gemm_class_code(m, n, k, ta, tb);
  if (const auto it = memo.find(code); it != memo.end()) return it->second;
  auto measure = [&] {
    std::vector<T> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n)),
        c(static_cast<std::size_t>(m * n));
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<T>(static_cast<int>(i % 7) - 3);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<T>(static_cast<int>(i % 5) - 2);
    return cpu::time_interleaved(
        2,
        [&](std::size_t whole) {
          if (whole) gemm_strided(a.data(), ta ? m : k, b.data(), tb ? k : n, c.data(), n, m, n, k, ta, tb, false);
          else split_product(a.data(), b.data(), c.data(), m, n, k, ta, tb, false);
        },
        3, 1);
  };
  bool recorded = false;
  const bool split = cpu::measured_choice(cpu::gemm_class_key<T>("gemm_split", m, n, k, ta, tb), {"split", "whole"},
                                          measure, 2.0 * double(m) * double(n) * double(k),
                                          std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k),
                                          &recorded, /*fixed: one threaded call*/ 1) == 0;
  if (recorded) memo.emplace(code, split);
  return split;
}

// One product on all threads: split by tandem where split_measured_faster says so, otherwise
// one call, which the library threads itself.
template <typename T>
void gemm_threaded(const T* a, const T* b, T* c, std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb,
                   bool accumulate) {
  if (deterministic()) return deterministic_product(a, ta ? m : k, b, tb ? k : n, c, n, m, n, k, ta, tb, accumulate);
  if (cpu::max_chunks() >= 2 && split_candidate(m, n, k) && split_measured_faster<T>(m, n, k, ta, tb)) {
    split_product(a, b, c, m, n, k, ta, tb, accumulate);
    return;
  }
  gemm_strided(a, ta ? m : k, b, tb ? k : n, c, n, m, n, k, ta, tb, accumulate);
}

// f32 products whose right-hand side serves again unchanged run on a packed copy of it when that
// pays (core/cpu/packed_weights.h); true when it ran this one.
template <typename T>
bool on_packed_rhs(const T* a, const Tensor& b, T* c, std::int64_t m, std::int64_t n, std::int64_t k, bool ta,
                   bool tb, bool accumulate) {
  if constexpr (std::is_same_v<T, float>) {
    if (deterministic()) return false;  // a packed product rounds otherwise than a plain one
    return cpu::gemm_packed_rhs(a, b, c, m, n, k, ta, tb, accumulate, &gemm_threaded<float>);
  } else {
    return false;
  }
}

}  // namespace

namespace cpu {

template <typename T>
void gemm(const T* a, const T* b, T* c, std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb,
          bool accumulate, std::int64_t ldc) {
  if (deterministic())
    return deterministic_product(a, ta ? m : k, b, tb ? k : n, c, ldc == 0 ? n : ldc, m, n, k, ta, tb, accumulate);
  gemm_strided(a, ta ? m : k, b, tb ? k : n, c, ldc == 0 ? n : ldc, m, n, k, ta, tb, accumulate);
}

template void gemm<float>(const float*, const float*, float*, std::int64_t, std::int64_t, std::int64_t, bool, bool,
                          bool, std::int64_t);
template void gemm<double>(const double*, const double*, double*, std::int64_t, std::int64_t, std::int64_t, bool,
                           bool, bool, std::int64_t);
template void gemm<std::int32_t>(const std::int32_t*, const std::int32_t*, std::int32_t*, std::int64_t,
                                 std::int64_t, std::int64_t, bool, bool, bool, std::int64_t);
template void gemm<std::int64_t>(const std::int64_t*, const std::int64_t*, std::int64_t*, std::int64_t,
                                 std::int64_t, std::int64_t, bool, bool, bool, std::int64_t);
template void gemm<bfloat16>(const bfloat16*, const bfloat16*, bfloat16*, std::int64_t, std::int64_t, std::int64_t,
                             bool, bool, bool, std::int64_t);

}  // namespace cpu

bool CpuBackend::runs_16bit_products(DType dtype) const { return dtype == DType::bf16 && cpu::bf16_products_native(); }

namespace {

template <typename scalar_t>
void cpu_matmul(const Tensor& a, const Tensor& b, Tensor& out, std::int64_t batch, std::int64_t m, std::int64_t n,
                std::int64_t k, bool transpose_a, bool transpose_b, bool accumulate) {
  const scalar_t* pa = a.data<scalar_t>();
  const scalar_t* pb = b.data<scalar_t>();
  scalar_t* pc = out.data<scalar_t>();
  const std::int64_t stride_a = a.numel() == m * k ? 0 : m * k;
  const std::int64_t stride_b = b.numel() == k * n ? 0 : k * n;
  // A right-hand side that serves again unchanged (weights) may run on a packed copy.
  if (batch == 1 && on_packed_rhs(pa, b, pc, m, n, k, transpose_a, transpose_b, accumulate)) return;
  // A single product (or a batch of large ones) uses all threads inside one GEMM; many small
  // products run one per thread.
  if (batch == 1 || m * n * k >= (1 << 18) || deterministic()) {
    for (std::int64_t i = 0; i < batch; ++i) {
      gemm_threaded(pa + i * stride_a, pb + i * stride_b, pc + i * m * n, m, n, k, transpose_a, transpose_b,
                    accumulate);
    }
  } else {
    cpu::parallel_for(batch, m * n * k, 1 << 16, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        cpu::gemm(pa + i * stride_a, pb + i * stride_b, pc + i * m * n, m, n, k, transpose_a, transpose_b, accumulate);
      }
    });
  }
}

}  // namespace

void CpuBackend::matmul(const Tensor& a, const Tensor& b, Tensor& out, std::int64_t batch, std::int64_t m,
                        std::int64_t n, std::int64_t k, bool transpose_a, bool transpose_b, bool accumulate) {
  if (out.numel() == 0) return;
  if (a.dtype() == DType::bf16) {
    TANDEM_CHECK(runs_16bit_products(DType::bf16),
                 "matmul: bf16 products need oneDNN on a processor with bf16 dot "
                 "products (the ops widen them to f32 elsewhere)");
    return cpu_matmul<bfloat16>(a, b, out, batch, m, n, k, transpose_a, transpose_b, accumulate);
  }
  TANDEM_DISPATCH_NUMERIC(a.dtype(), "matmul", [&] {
    cpu_matmul<scalar_t>(a, b, out, batch, m, n, k, transpose_a, transpose_b, accumulate);
  });
}

}  // namespace tandem
