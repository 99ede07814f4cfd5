// Batched GEMM on the library measured fastest for each shape on this machine (OpenBLAS, oneDNN
// or Eigen: core/cpu/gemm_choice.h). A single product runs multi-threaded inside the library;
// batches of small products are spread over threads instead, each running serially.
#include <algorithm>

#include "core/cpu/gemm.h"
#include "core/cpu/gemm_choice.h"

#include "core/cpu/cpu_backend.h"
#include "core/cpu/parallel.h"
#include "core/error.h"
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

// Whether one product is better split over the threads by tandem than threaded inside OpenBLAS:
// large products with a short side (an MLP's [100 x 784] x [784 x 1000], its weight gradients
// with k = 100). On two cores OpenBLAS's own split of those ran at 145-167 GFLOP/s, two serial
// GEMMs on halves of C at 179-203; for square products (n = 1024, 4096) and small ones (an LSTM
// step, [64 x 256] x [256 x 1024]) OpenBLAS's split was the faster.
bool split_by_tandem(std::int64_t m, std::int64_t n, std::int64_t k) {
  return std::min({m, n, k}) <= 128 && m * n * k >= (std::int64_t(1) << 26);
}

// One product on all threads: C's rows (or columns, whichever side is longer) in one block per
// thread, each a serial GEMM, for the products split_by_tandem picks; otherwise one call,
// which BLAS threads itself.
template <typename T>
void gemm_threaded(const T* a, const T* b, T* c, std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb,
                   bool accumulate) {
  const std::int64_t lda = ta ? m : k, ldb = tb ? k : n;
  if (cpu::max_chunks() < 2 || !split_by_tandem(m, n, k)) {
    gemm_strided(a, lda, b, ldb, c, n, m, n, k, ta, tb, accumulate);
    return;
  }
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

}  // namespace

namespace cpu {

template <typename T>
void gemm(const T* a, const T* b, T* c, std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb,
          bool accumulate, std::int64_t ldc) {
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

}  // namespace cpu

void CpuBackend::matmul(const Tensor& a, const Tensor& b, Tensor& out, std::int64_t batch, std::int64_t m,
                        std::int64_t n, std::int64_t k, bool transpose_a, bool transpose_b, bool accumulate) {
  if (out.numel() == 0) return;
  TANDEM_DISPATCH_NUMERIC(a.dtype(), "matmul", [&] {
    const scalar_t* pa = a.data<scalar_t>();
    const scalar_t* pb = b.data<scalar_t>();
    scalar_t* pc = out.data<scalar_t>();
    const std::int64_t stride_a = a.numel() == m * k ? 0 : m * k;
    const std::int64_t stride_b = b.numel() == k * n ? 0 : k * n;
    // A single product (or a batch of large ones) uses all threads inside one GEMM; many small
    // products run one per thread.
    if (batch == 1 || m * n * k >= (1 << 18)) {
      for (std::int64_t i = 0; i < batch; ++i) {
        gemm_threaded(pa + i * stride_a, pb + i * stride_b, pc + i * m * n, m, n, k, transpose_a, transpose_b,
                      accumulate);
      }
    } else {
      cpu::parallel_for(batch, m * n * k, 1 << 16, [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t i = lo; i < hi; ++i) {
          cpu::gemm(pa + i * stride_a, pb + i * stride_b, pc + i * m * n, m, n, k, transpose_a, transpose_b,
                    accumulate);
        }
      });
    }
  });
}

}  // namespace tandem
