// im2col and col2im on the GPU: one thread per output element, the index arithmetic in
// cuda/window_index.h. col2im gathers (one thread per image element sums the col entries read
// from it, taps in the CPU's order) instead of scattering with atomics, so its sums are
// deterministic and need no zero fill first.
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernel_util.cuh"
#include "cuda/window_index.h"

namespace tandem {
namespace cuda {

namespace {

template <typename T>
__global__ void im2col_kernel(const T* x, Conv2DGeometry g, std::int64_t n, T* col) {
  TANDEM_GRID_STRIDE_LOOP(i, n) { col[i] = im2col_element(x, g, i); }
}

template <typename T>
__global__ void col2im_kernel(const T* col, Conv2DGeometry g, std::int64_t n, T* x) {
  TANDEM_GRID_STRIDE_LOOP(i, n) { x[i] = col2im_element(col, g, i); }
}

}  // namespace

void CudaBackend::im2col(const Tensor& x, const Conv2DGeometry& g, Tensor& col) {
  const std::int64_t n = col.numel();
  if (n == 0) return;
  DeviceContext& ctx = context_of(col, "im2col");
  TANDEM_DISPATCH_FLOAT(x.dtype(), "im2col", [&] {
    launch_elementwise("im2col", ctx, n, im2col_kernel<scalar_t>, x.data<scalar_t>(), g, n, col.data<scalar_t>());
  });
}

void CudaBackend::col2im(const Tensor& col, const Conv2DGeometry& g, Tensor& x) {
  const std::int64_t n = x.numel();
  if (n == 0) return;
  DeviceContext& ctx = context_of(x, "col2im");
  TANDEM_DISPATCH_FLOAT(x.dtype(), "col2im", [&] {
    launch_elementwise("col2im", ctx, n, col2im_kernel<scalar_t>, col.data<scalar_t>(), g, n, x.data<scalar_t>());
  });
}

}  // namespace cuda
}  // namespace tandem
