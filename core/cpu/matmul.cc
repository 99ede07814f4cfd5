// Batched GEMM on Eigen. Eigen's own GEMM is blocked, vectorised and parallelised with OpenMP
// for large products; batches of small products are spread over threads instead.
#include <Eigen/Core>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/parallel.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tandem {

namespace {

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <typename T>
void gemm_one(const T* a, const T* b, T* c, std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb,
              bool accumulate) {
  Eigen::Map<RowMatrix<T>> C(c, m, n);
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

}  // namespace

void CpuBackend::matmul(const Tensor& a, const Tensor& b, Tensor& out, std::int64_t batch, std::int64_t m,
                        std::int64_t n, std::int64_t k, bool transpose_a, bool transpose_b, bool accumulate) {
  if (out.numel() == 0) return;
  TANDEM_DISPATCH_NUMERIC(a.dtype(), "matmul", [&] {
    const scalar_t* pa = a.data<scalar_t>();
    const scalar_t* pb = b.data<scalar_t>();
    scalar_t* pc = out.data<scalar_t>();
    if (k == 0) {
      if (!accumulate) std::fill(pc, pc + out.numel(), scalar_t(0));
      return;
    }
    const std::int64_t stride_a = a.numel() == m * k ? 0 : m * k;
    const std::int64_t stride_b = b.numel() == k * n ? 0 : k * n;
    auto one = [&](std::int64_t i) {
      gemm_one(pa + i * stride_a, pb + i * stride_b, pc + i * m * n, m, n, k, transpose_a, transpose_b, accumulate);
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
