// The index arithmetic of the sliding-window CUDA kernels (im2col, col2im, pooling), written
// once for host and device: each function computes one output element of a kernel, so the
// kernels in im2col.cu and pooling.cu are thin loops around them and the same code can be run
// and checked against the CPU backend on a machine without a GPU.
//
// Geometry as in core/backend.h: output position o of an axis reads input positions
// o * stride - pad + tap * dilate for tap in [0, kernel). Images are [N, C, H, W] planes of
// H * W elements; col is [N, C * kernel_h * kernel_w, out_h * out_w].
//
// The backward kernels gather rather than scatter: one thread per input element sums, in the
// order the CPU backend adds them, every output that reads it. No atomics, so results are
// deterministic, and equal to the CPU's up to floating-point contraction.
#pragma once

#include <cstdint>

#include "core/backend.h"
#include "core/host_device.h"
#include "core/pool_window.h"  // the pooling windows, shared with the CPU backend

namespace tandem {
namespace cuda {

// The output position o in [0, out) whose tap `tap` reads input position i, that is
// o * stride - pad + tap * dilate == i; -1 when there is none.
TANDEM_HOST_DEVICE inline std::int64_t output_reading(std::int64_t i, std::int64_t tap, std::int64_t stride,
                                                      std::int64_t pad, std::int64_t dilate, std::int64_t out) {
  const std::int64_t t = i + pad - tap * dilate;
  if (t < 0 || t % stride != 0) return -1;
  const std::int64_t o = t / stride;
  return o < out ? o : -1;
}

// ---- per-element bodies of the kernels ----

// im2col: col element `index` of the whole col tensor (0 where the window reads padding).
template <typename T>
TANDEM_HOST_DEVICE inline T im2col_element(const T* x, const Conv2DGeometry& g, std::int64_t index) {
  const std::int64_t ohw = g.out_h * g.out_w;
  const std::int64_t taps = g.kernel_h * g.kernel_w;
  const std::int64_t pixel = index % ohw;
  const std::int64_t row = index / ohw;  // (plane, ky, kx)
  const std::int64_t tap = row % taps;
  const std::int64_t plane = row / taps;  // n * C + c
  const std::int64_t ky = tap / g.kernel_w, kx = tap % g.kernel_w;
  const std::int64_t oy = pixel / g.out_w, ox = pixel % g.out_w;
  const std::int64_t iy = oy * g.stride_y - g.pad_y + ky * g.dilate_y;
  const std::int64_t ix = ox * g.stride_x - g.pad_x + kx * g.dilate_x;
  if (iy < 0 || iy >= g.height || ix < 0 || ix >= g.width) return T(0);
  return x[(plane * g.height + iy) * g.width + ix];
}

// col2im: x element `index` = the sum of the col entries read from it, taps in (ky, kx) order
// (each tap reads a given input element from at most one output position).
template <typename T>
TANDEM_HOST_DEVICE inline T col2im_element(const T* col, const Conv2DGeometry& g, std::int64_t index) {
  const std::int64_t ix = index % g.width;
  const std::int64_t iy = (index / g.width) % g.height;
  const std::int64_t plane = index / (g.width * g.height);
  const std::int64_t ohw = g.out_h * g.out_w;
  const T* plane_col = col + plane * g.kernel_h * g.kernel_w * ohw;
  T sum = T(0);
  for (std::int64_t ky = 0; ky < g.kernel_h; ++ky) {
    const std::int64_t oy = output_reading(iy, ky, g.stride_y, g.pad_y, g.dilate_y, g.out_h);
    if (oy < 0) continue;
    for (std::int64_t kx = 0; kx < g.kernel_w; ++kx) {
      const std::int64_t ox = output_reading(ix, kx, g.stride_x, g.pad_x, g.dilate_x, g.out_w);
      if (ox < 0) continue;
      sum += plane_col[(ky * g.kernel_w + kx) * ohw + oy * g.out_w + ox];
    }
  }
  return sum;
}

// Max pooling of output element `index`: window_max over its window, as the CPU backend (the
// first maximum in window order; -inf and index -1 for a window entirely in the padding).
template <typename T>
TANDEM_HOST_DEVICE inline void max_pool_element(const T* x, const Conv2DGeometry& g, std::int64_t index, T* value,
                                                std::int64_t* argmax) {
  const std::int64_t ox = index % g.out_w;
  const std::int64_t oy = (index / g.out_w) % g.out_h;
  const std::int64_t plane = index / (g.out_w * g.out_h);
  const WindowSpan ry = pool_window(oy, g.stride_y, g.pad_y, g.kernel_h, g.height);
  const WindowSpan rx = pool_window(ox, g.stride_x, g.pad_x, g.kernel_w, g.width);
  window_max(x + plane * g.height * g.width, g.width, ry, rx, value, argmax);
}

// Max pooling's backward at input element `index`: the sum of gy over the windows containing
// it whose recorded maximum is this element, in output order (the CPU's scatter order).
// `indices` must come from max_pool2d with the same geometry (every index lies in its window,
// or is -1); an index outside its window is never matched.
template <typename T>
TANDEM_HOST_DEVICE inline T max_pool_grad_element(const T* gy, const std::int64_t* indices, const Conv2DGeometry& g,
                                                  std::int64_t index) {
  const std::int64_t ix = index % g.width;
  const std::int64_t iy = (index / g.width) % g.height;
  const std::int64_t plane = index / (g.width * g.height);
  const std::int64_t offset = plane * g.out_h * g.out_w;
  const std::int64_t self = iy * g.width + ix;
  const WindowSpan ry = windows_containing(iy, g.stride_y, g.pad_y, g.kernel_h, g.out_h);
  const WindowSpan rx = windows_containing(ix, g.stride_x, g.pad_x, g.kernel_w, g.out_w);
  T sum = T(0);
  for (std::int64_t oy = ry.begin; oy < ry.end; ++oy) {
    for (std::int64_t ox = rx.begin; ox < rx.end; ++ox) {
      const std::int64_t o = offset + oy * g.out_w + ox;
      if (indices[o] == self) sum += gy[o];
    }
  }
  return sum;
}

// Average pooling (Chainer's): window_sum over the input, times scale = 1 / (kernel_h *
// kernel_w), so padding counts as zeros.
template <typename T>
TANDEM_HOST_DEVICE inline T avg_pool_element(const T* x, const Conv2DGeometry& g, T scale, std::int64_t index) {
  const std::int64_t ox = index % g.out_w;
  const std::int64_t oy = (index / g.out_w) % g.out_h;
  const std::int64_t plane = index / (g.out_w * g.out_h);
  const WindowSpan ry = pool_window(oy, g.stride_y, g.pad_y, g.kernel_h, g.height);
  const WindowSpan rx = pool_window(ox, g.stride_x, g.pad_x, g.kernel_w, g.width);
  return window_sum(x + plane * g.height * g.width, g.width, ry, rx) * scale;
}

// Average pooling's backward at input element `index`: the sum of gy * scale over the windows
// containing it, in output order.
template <typename T>
TANDEM_HOST_DEVICE inline T avg_pool_grad_element(const T* gy, const Conv2DGeometry& g, T scale, std::int64_t index) {
  const std::int64_t ix = index % g.width;
  const std::int64_t iy = (index / g.width) % g.height;
  const std::int64_t plane = index / (g.width * g.height);
  const T* grad = gy + plane * g.out_h * g.out_w;
  const WindowSpan ry = windows_containing(iy, g.stride_y, g.pad_y, g.kernel_h, g.out_h);
  const WindowSpan rx = windows_containing(ix, g.stride_x, g.pad_x, g.kernel_w, g.out_w);
  T sum = T(0);
  for (std::int64_t oy = ry.begin; oy < ry.end; ++oy)
    for (std::int64_t ox = rx.begin; ox < rx.end; ++ox) sum += grad[oy * g.out_w + ox] * scale;
  return sum;
}

}  // namespace cuda
}  // namespace tandem
