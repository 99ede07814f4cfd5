// The fused softmax of the CUDA backend (semantics: core/backend.h, softmax_forward): one warp
// per row (rows are short in attention: a sequence's keys), its lanes striding over the row;
// the maximum and the sum are warp-shuffle reductions, so a row is read twice and written once
// forward, read twice and written once backward. Masked keys are never read and are written as
// exact zeros. Sums are kept in the tensor's dtype, as the CPU keeps them.
#include <cstdint>
#include <cmath>

#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "cuda/elementwise_ops.cuh"
#include "cuda/kernel_util.cuh"

namespace tandem {
namespace cuda {

namespace {

constexpr int kWarp = 32;

template <typename T>
__device__ T warp_max(T v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const T other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

template <typename T>
__device__ T warp_sum(T v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Launched with one thread per (row, lane) as a grid-stride loop over warps.
template <typename T>
__global__ void softmax_forward_kernel(const T* x, T* y, std::int64_t rows, std::int64_t n, T scale,
                                       std::int64_t causal_queries) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t first = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * blockDim.x / kWarp;
  for (std::int64_t r = first; r < rows; r += warps) {
    const std::int64_t k = causal_queries > 0 ? r % causal_queries + n - causal_queries + 1 : n;
    const T* xr = x + r * n;
    T* yr = y + r * n;
    T top = -static_cast<T>(INFINITY);
    for (std::int64_t j = lane; j < k; j += kWarp) top = xr[j] > top ? xr[j] : top;
    top = warp_max(top) * scale;  // scale > 0
    T total = 0;
    for (std::int64_t j = lane; j < k; j += kWarp) {
      const T e = ops::math_exp(xr[j] * scale - top);
      yr[j] = e;
      total += e;
    }
    const T inverse = T(1) / warp_sum(total);
    for (std::int64_t j = lane; j < n; j += kWarp) yr[j] = j < k ? yr[j] * inverse : T(0);
  }
}

template <typename T>
__global__ void softmax_backward_kernel(const T* y, const T* gy, T* gx, std::int64_t rows, std::int64_t n, T scale) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t first = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * blockDim.x / kWarp;
  for (std::int64_t r = first; r < rows; r += warps) {
    const T* yr = y + r * n;
    const T* gr = gy + r * n;
    T dot = 0;
    for (std::int64_t j = lane; j < n; j += kWarp) dot += yr[j] * gr[j];
    dot = warp_sum(dot);
    for (std::int64_t j = lane; j < n; j += kWarp) gx[r * n + j] = scale * yr[j] * (gr[j] - dot);
  }
}

}  // namespace

void CudaBackend::softmax_forward(const Tensor& x, std::int64_t rows, std::int64_t n, double scale,
                                  std::int64_t causal_queries, Tensor& y) {
  TANDEM_DISPATCH_FLOAT(x.dtype(), "softmax", [&] {
    using T = scalar_t;
    DeviceContext& ctx = context_of(x, "softmax");
    launch_elementwise("softmax", ctx, rows * kWarp, softmax_forward_kernel<T>, x.data<T>(), y.data<T>(), rows, n,
                       static_cast<T>(scale), causal_queries);
  });
}

void CudaBackend::softmax_backward(const Tensor& y, const Tensor& gy, std::int64_t rows, std::int64_t n, double scale,
                                   Tensor& gx) {
  TANDEM_DISPATCH_FLOAT(y.dtype(), "softmax (backward)", [&] {
    using T = scalar_t;
    DeviceContext& ctx = context_of(y, "softmax (backward)");
    launch_elementwise("softmax (backward)", ctx, rows * kWarp, softmax_backward_kernel<T>, y.data<T>(),
                       gy.data<T>(), gx.data<T>(), rows, n, static_cast<T>(scale));
  });
}

}  // namespace cuda
}  // namespace tandem
