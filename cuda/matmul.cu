// Batched matrix products: f32/f64 on cuBLAS, integers (and products too large for cuBLAS's int
// arguments) on a plain kernel, like the CPU backend's BLAS/Eigen split (core/cpu/matmul.cc).
//
// cuBLAS is column-major and tandem row-major. A row-major [r, c] matrix is the column-major
// [c, r] matrix of its transpose, so out = op(A) op(B) is computed as the column-major product
// out^T = op(B)^T op(A)^T: the operands swap places, keep their transpose flags, and every
// leading dimension is the row length of the stored row-major matrix.
//
// Precision: exact FP32 by default. cuBLAS's CUBLAS_DEFAULT_MATH never uses TF32 (or the
// BF16x9 / fixed-point emulations, which need their own math modes); TF32 tensor cores are
// used only under tandem::cuda::allow_tf32() (CUBLAS_TF32_TENSOR_OP_MATH). The handle is shared
// by every op of a device, so the mode is set on each call.
#include <cublas_v2.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "core/tensor.h"
#include "cuda/cuda.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernel_util.cuh"

namespace tandem {
namespace cuda {

namespace {

// ---- the plain kernel: one thread per output element ----

// The type the plain kernel sums in: T for floating types; the unsigned type of the same width
// for integers, whose arithmetic wraps (as the CPU's does in practice) without signed overflow.
template <typename T, bool = std::is_integral_v<T>>
struct Accumulator {
  using type = T;
};
template <typename T>
struct Accumulator<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <typename T>
using AccumulatorOf = typename Accumulator<T>::type;

template <typename T>
__global__ void matmul_kernel(const T* a, const T* b, T* out, std::int64_t m, std::int64_t n, std::int64_t k,
                              std::int64_t stride_a, std::int64_t stride_b, bool transpose_a, bool transpose_b,
                              bool accumulate, std::int64_t total) {
  using Acc = AccumulatorOf<T>;
  TANDEM_GRID_STRIDE_LOOP(index, total) {
    const std::int64_t j = index % n;
    const std::int64_t i = (index / n) % m;
    const std::int64_t batch = index / (m * n);
    const T* pa = a + batch * stride_a;
    const T* pb = b + batch * stride_b;
    Acc sum = Acc(0);
    for (std::int64_t p = 0; p < k; ++p) {
      const T av = transpose_a ? pa[p * m + i] : pa[i * k + p];
      const T bv = transpose_b ? pb[j * k + p] : pb[p * n + j];
      sum += Acc(av) * Acc(bv);
    }
    out[index] = accumulate ? T(Acc(out[index]) + sum) : T(sum);
  }
}

template <typename T>
void matmul_plain(const DeviceContext& ctx, const T* a, const T* b, T* out, std::int64_t batch, std::int64_t m,
                  std::int64_t n, std::int64_t k, std::int64_t stride_a, std::int64_t stride_b, bool ta, bool tb,
                  bool accumulate) {
  const std::int64_t total = batch * m * n;
  launch_elementwise("matmul", ctx, total, matmul_kernel<T>, a, b, out, m, n, k, stride_a, stride_b, ta, tb,
                     accumulate, total);
}

// ---- cuBLAS ----

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const float* alpha, const float* a, int lda, const float* b, int ldb, const float* beta, float* c,
                    int ldc) {
  return cublasSgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const double* alpha, const double* a, int lda, const double* b, int ldb, const double* beta,
                    double* c, int ldc) {
  return cublasDgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const float* alpha, const float* a, int lda, long long stride_a, const float* b, int ldb,
                            long long stride_b, const float* beta, float* c, int ldc, long long stride_c, int count) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                                   stride_c, count);
}
cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const double* alpha, const double* a, int lda, long long stride_a, const double* b,
                            int ldb, long long stride_b, const double* beta, double* c, int ldc, long long stride_c,
                            int count) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                                   stride_c, count);
}

bool fits_int(std::int64_t v) { return v <= INT_MAX; }

// Row-major out[i] [m, n] = (+=) op(a[i]) op(b[i]) for i in [0, batch) on cuBLAS; a's matrices
// are stride_a elements apart (0: one matrix reused), b's stride_b, out's m * n. The caller has
// checked that m, n, k fit in an int; batches beyond INT_MAX go in several calls.
template <typename T>
void matmul_cublas(const DeviceContext& ctx, const T* a, const T* b, T* out, std::int64_t batch, std::int64_t m,
                   std::int64_t n, std::int64_t k, std::int64_t stride_a, std::int64_t stride_b, bool ta, bool tb,
                   bool accumulate) {
  const cublasMath_t math =
      std::is_same_v<T, float> && allow_tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
  TANDEM_CUBLAS_CHECK(cublasSetMathMode(ctx.cublas, math));
  TANDEM_CUBLAS_CHECK(cublasSetPointerMode(ctx.cublas, CUBLAS_POINTER_MODE_HOST));
  const T alpha = T(1), beta = accumulate ? T(1) : T(0);  // beta = 0: out is not read
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = static_cast<int>(ta ? m : k), ldb = static_cast<int>(tb ? k : n), ldc = static_cast<int>(n);

  // One shared right operand and untransposed left ones: the batch is one product of the
  // stacked rows, [batch * m, k] @ [k, n] (a linear layer applied to a 3-D input).
  if (batch > 1 && stride_b == 0 && !ta && stride_a == m * k && fits_int(batch * m)) {
    TANDEM_CUBLAS_CHECK(gemm(ctx.cublas, op_b, op_a, static_cast<int>(n), static_cast<int>(batch * m),
                             static_cast<int>(k), &alpha, b, ldb, a, lda, &beta, out, ldc));
    return;
  }
  if (batch == 1) {
    TANDEM_CUBLAS_CHECK(gemm(ctx.cublas, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                             &alpha, b, ldb, a, lda, &beta, out, ldc));
    return;
  }
  for (std::int64_t first = 0; first < batch; first += INT_MAX) {
    const int count = static_cast<int>(batch - first < INT_MAX ? batch - first : INT_MAX);
    TANDEM_CUBLAS_CHECK(gemm_batched(ctx.cublas, op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                                     static_cast<int>(k), &alpha, b + first * stride_b, ldb, stride_b,
                                     a + first * stride_a, lda, stride_a, &beta, out + first * m * n, ldc, m * n,
                                     count));
  }
}

}  // namespace

void CudaBackend::matmul(const Tensor& a, const Tensor& b, Tensor& out, std::int64_t batch, std::int64_t m,
                         std::int64_t n, std::int64_t k, bool transpose_a, bool transpose_b, bool accumulate) {
  if (out.numel() == 0) return;
  DeviceContext& ctx = context_of(out, "matmul");
  TANDEM_DISPATCH_NUMERIC(a.dtype(), "matmul", [&] {
    // An empty sum: out = 0 (all-zero bytes in every numeric dtype), or unchanged when
    // accumulating. (BLAS would reject lda = k = 0.)
    if (k == 0) {
      if (!accumulate) TANDEM_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), ctx.stream));
      return;
    }
    const scalar_t* pa = a.data<scalar_t>();
    const scalar_t* pb = b.data<scalar_t>();
    scalar_t* pc = out.data<scalar_t>();
    // A batch of one matrix is reused for every product (stride 0).
    const std::int64_t stride_a = a.numel() == m * k ? 0 : m * k;
    const std::int64_t stride_b = b.numel() == k * n ? 0 : k * n;
    if constexpr (std::is_floating_point_v<scalar_t>) {
      if (fits_int(m) && fits_int(n) && fits_int(k)) {
        matmul_cublas(ctx, pa, pb, pc, batch, m, n, k, stride_a, stride_b, transpose_a, transpose_b, accumulate);
        return;
      }
    }
    matmul_plain(ctx, pa, pb, pc, batch, m, n, k, stride_a, stride_b, transpose_a, transpose_b, accumulate);
  });
}

}  // namespace cuda
}  // namespace tandem
