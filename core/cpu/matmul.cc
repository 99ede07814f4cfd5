// Batched GEMM: fp32/fp64 on OpenBLAS (its OpenMP build, core/cpu/blas.h), integers and the
// sanitizer builds on Eigen. OpenBLAS was measured beside Eigen 3.4 on this machine's shapes: on
// one thread the two are within 10% (either wins some), but on two threads Eigen's OpenMP split
// of a product is poor (99 against 164 GFLOP/s for a convolution's [64x576]x[576x784], 221
// against 252 at n=1024). A single product runs multi-threaded inside the library; batches of
// small products are spread over threads instead, each running serially.
#include <Eigen/Core>
#include <climits>
#include <type_traits>

#include "core/cpu/blas.h"
#include "core/cpu/gemm.h"

#include "core/cpu/cpu_backend.h"
#include "core/cpu/parallel.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tandem {

namespace {

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// One product on BLAS when T is a BLAS type and every size fits its int arguments; false otherwise.
template <typename T>
bool blas_gemm(const T* a, const T* b, T* c, std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb,
               bool accumulate, std::int64_t ldc) {
#ifdef TANDEM_HAS_BLAS
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || ldc > INT_MAX) return false;
    const int lda = static_cast<int>(ta ? m : k), ldb = static_cast<int>(tb ? k : n);
    const auto op_a = ta ? CblasTrans : CblasNoTrans, op_b = tb ? CblasTrans : CblasNoTrans;
    // beta = 0 overwrites C without reading it, so C may start uninitialised.
    const T beta = accumulate ? T(1) : T(0);
    if constexpr (std::is_same_v<T, float>) {
      cblas_sgemm(CblasRowMajor, op_a, op_b, int(m), int(n), int(k), 1.0f, a, lda, b, ldb, beta, c, int(ldc));
    } else {
      cblas_dgemm(CblasRowMajor, op_a, op_b, int(m), int(n), int(k), 1.0, a, lda, b, ldb, beta, c, int(ldc));
    }
    return true;
  }
#endif
  (void)a, (void)b, (void)c, (void)m, (void)n, (void)k, (void)ta, (void)tb, (void)accumulate, (void)ldc;
  return false;
}

}  // namespace

namespace cpu {

template <typename T>
void gemm(const T* a, const T* b, T* c, std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb,
          bool accumulate, std::int64_t ldc) {
  if (ldc == 0) ldc = n;
  if (m == 0 || n == 0) return;
  Eigen::Map<RowMatrix<T>, 0, Eigen::OuterStride<>> C(c, m, n, Eigen::OuterStride<>(ldc));
  if (k == 0) {
    if (!accumulate) C.setZero();
    return;
  }
  if (blas_gemm(a, b, c, m, n, k, ta, tb, accumulate, ldc)) return;
  // A stored [m, k] (or [k, m] when transposed), B stored [k, n] (or [n, k]).
  Eigen::Map<const RowMatrix<T>> A(a, ta ? k : m, ta ? m : k);
  Eigen::Map<const RowMatrix<T>> B(b, tb ? n : k, tb ? k : n);
  auto assign = [&](const auto& product) {
    if (accumulate) C.noalias() += product;
    else C.noalias() = product;
  };
  if (!ta && !tb) assign(A * B);
  else if (ta && !tb) assign(A.transpose() * B);
  else if (!ta && tb) assign(A * B.transpose());
  else assign(A.transpose() * B.transpose());
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
    auto one = [&](std::int64_t i) {
      cpu::gemm(pa + i * stride_a, pb + i * stride_b, pc + i * m * n, m, n, k, transpose_a, transpose_b, accumulate);
    };
    // A single product (or a batch of large ones) lets Eigen use all threads inside one GEMM;
    // many small products run one per thread.
    if (batch == 1 || m * n * k >= (1 << 18)) {
      for (std::int64_t i = 0; i < batch; ++i) one(i);
    } else {
      cpu::parallel_for(batch, m * n * k, 1 << 16, [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t i = lo; i < hi; ++i) one(i);
      });
    }
  });
}

}  // namespace tandem
