// Max and average pooling on the GPU, with the CPU backend's exact rules (core/cpu/pooling.cc):
// first maximum in window order, NaN only when it comes first, -inf and index -1 for a window
// entirely in the padding, average over kernel_h * kernel_w. cuDNN's pooling returns no
// indices, hence tandem's own kernels: one thread per output element forwards, one thread per
// input element backwards. The backward passes gather over the windows that contain the
// element, in the CPU's order, instead of scattering with atomics: deterministic, and correct
// for overlapping windows. The per-element code is in cuda/window_index.h.
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernel_util.cuh"
#include "cuda/window_index.h"

namespace tandem {
namespace cuda {

namespace {

void check_pool_geometry(const Conv2DGeometry& g, const char* op) {
  TANDEM_CHECK(g.dilate_y == 1 && g.dilate_x == 1, op, ": pooling kernels take no dilation, got ", g.dilate_y,
               "x", g.dilate_x);
}

template <typename T>
__global__ void max_pool_kernel(const T* x, Conv2DGeometry g, std::int64_t n, T* y, std::int64_t* indices) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    std::int64_t unused;  // no indices wanted (inference)
    max_pool_element(x, g, i, &y[i], indices ? &indices[i] : &unused);
  }
}

template <typename T>
__global__ void max_pool_backward_kernel(const T* gy, const std::int64_t* indices, Conv2DGeometry g, std::int64_t n,
                                         T* gx) {
  TANDEM_GRID_STRIDE_LOOP(i, n) { gx[i] = max_pool_grad_element(gy, indices, g, i); }
}

template <typename T>
__global__ void avg_pool_kernel(const T* x, Conv2DGeometry g, T scale, std::int64_t n, T* y) {
  TANDEM_GRID_STRIDE_LOOP(i, n) { y[i] = avg_pool_element(x, g, scale, i); }
}

template <typename T>
__global__ void avg_pool_backward_kernel(const T* gy, Conv2DGeometry g, T scale, std::int64_t n, T* gx) {
  TANDEM_GRID_STRIDE_LOOP(i, n) { gx[i] = avg_pool_grad_element(gy, g, scale, i); }
}

}  // namespace

void CudaBackend::max_pool2d(const Tensor& x, const Conv2DGeometry& g, Tensor& y, Tensor& indices) {
  check_pool_geometry(g, "max_pool2d");
  const std::int64_t n = y.numel();
  if (n == 0) return;
  DeviceContext& ctx = context_of(y, "max_pool2d");
  TANDEM_DISPATCH_FLOAT(x.dtype(), "max_pool2d", [&] {
    launch_elementwise("max_pool2d", ctx, n, max_pool_kernel<scalar_t>, x.data<scalar_t>(), g, n,
                       y.data<scalar_t>(), indices.defined() ? indices.data<std::int64_t>() : nullptr);
  });
}

void CudaBackend::max_pool2d_backward(const Tensor& gy, const Tensor& indices, const Conv2DGeometry& g,
                                      Tensor& gx) {
  check_pool_geometry(g, "max_pool2d_backward");
  const std::int64_t n = gx.numel();
  if (n == 0) return;
  DeviceContext& ctx = context_of(gx, "max_pool2d_backward");
  TANDEM_DISPATCH_FLOAT(gx.dtype(), "max_pool2d_backward", [&] {
    launch_elementwise("max_pool2d_backward", ctx, n, max_pool_backward_kernel<scalar_t>, gy.data<scalar_t>(),
                       indices.data<std::int64_t>(), g, n, gx.data<scalar_t>());
  });
}

void CudaBackend::avg_pool2d(const Tensor& x, const Conv2DGeometry& g, Tensor& y) {
  check_pool_geometry(g, "avg_pool2d");
  const std::int64_t n = y.numel();
  if (n == 0) return;
  DeviceContext& ctx = context_of(y, "avg_pool2d");
  TANDEM_DISPATCH_FLOAT(x.dtype(), "avg_pool2d", [&] {
    const scalar_t scale = scalar_t(1) / static_cast<scalar_t>(g.kernel_h * g.kernel_w);
    launch_elementwise("avg_pool2d", ctx, n, avg_pool_kernel<scalar_t>, x.data<scalar_t>(), g, scale, n,
                       y.data<scalar_t>());
  });
}

void CudaBackend::avg_pool2d_backward(const Tensor& gy, const Conv2DGeometry& g, Tensor& gx) {
  check_pool_geometry(g, "avg_pool2d_backward");
  const std::int64_t n = gx.numel();
  if (n == 0) return;
  DeviceContext& ctx = context_of(gx, "avg_pool2d_backward");
  TANDEM_DISPATCH_FLOAT(gx.dtype(), "avg_pool2d_backward", [&] {
    const scalar_t scale = scalar_t(1) / static_cast<scalar_t>(g.kernel_h * g.kernel_w);
    launch_elementwise("avg_pool2d_backward", ctx, n, avg_pool_backward_kernel<scalar_t>, gy.data<scalar_t>(), g,
                       scale, n, gx.data<scalar_t>());
  });
}

}  // namespace cuda
}  // namespace tandem
