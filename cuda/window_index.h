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

#include <cmath>
#include <cstdint>

#include "core/backend.h"
#include "cuda/strided_index.h"  // TANDEM_HOST_DEVICE

namespace tandem {
namespace cuda {

// A half-open range [begin, end) of positions along one axis.
struct WindowSpan {
  std::int64_t begin, end;
};

// The input positions that pooling window `o` covers, clipped to [0, size) (no dilation).
TANDEM_HOST_DEVICE inline WindowSpan pool_window(std::int64_t o, std::int64_t stride, std::int64_t pad,
                                                 std::int64_t kernel, std::int64_t size) {
  const std::int64_t start = o * stride - pad;
  const std::int64_t begin = start < 0 ? 0 : start;
  const std::int64_t end = start + kernel < size ? start + kernel : size;
  return {begin, end < begin ? begin : end};
}

// The pooling windows o in [0, out) whose (undilated) window [o * stride - pad, o * stride - pad
// + kernel) contains input position i (0 <= i < size, pad >= 0). Clipping a window to the input
// does not change whether it contains an input position, so these are exactly the windows that
// pool_window's span of contains i.
TANDEM_HOST_DEVICE inline WindowSpan windows_containing(std::int64_t i, std::int64_t stride, std::int64_t pad,
                                                        std::int64_t kernel, std::int64_t out) {
  // o * stride - pad <= i           <=>  o <= floor((i + pad) / stride)     (i + pad >= 0)
  // o * stride - pad + kernel > i   <=>  o * stride > i + pad - kernel
  const std::int64_t low = i + pad - kernel;
  const std::int64_t begin = low < 0 ? 0 : low / stride + 1;
  std::int64_t end = (i + pad) / stride + 1;
  if (end > out) end = out;
  return {begin, end < begin ? begin : end};
}

// The output position o in [0, out) whose tap `tap` reads input position i, that is
// o * stride - pad + tap * dilate == i; -1 when there is none.
TANDEM_HOST_DEVICE inline std::int64_t output_reading(std::int64_t i, std::int64_t tap, std::int64_t stride,
                                                      std::int64_t pad, std::int64_t dilate, std::int64_t out) {
  const std::int64_t t = i + pad - tap * dilate;
  if (t < 0 || t % stride != 0) return -1;
  const std::int64_t o = t / stride;
  return o < out ? o : -1;
}

// -inf of T, on host and device (std::numeric_limits is not callable from device code).
template <typename T>
TANDEM_HOST_DEVICE inline T negative_infinity();
template <>
TANDEM_HOST_DEVICE inline float negative_infinity<float>() { return -HUGE_VALF; }
template <>
TANDEM_HOST_DEVICE inline double negative_infinity<double>() { return -HUGE_VAL; }

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

// Max pooling of output element `index`: the first maximum in window order (row by row), as
// the CPU backend: a candidate replaces the best only when strictly greater, so a NaN wins only
// when it comes first. A window entirely in the padding gives -inf and index -1.
template <typename T>
TANDEM_HOST_DEVICE inline void max_pool_element(const T* x, const Conv2DGeometry& g, std::int64_t index, T* value,
                                                std::int64_t* argmax) {
  const std::int64_t ox = index % g.out_w;
  const std::int64_t oy = (index / g.out_w) % g.out_h;
  const std::int64_t plane = index / (g.out_w * g.out_h);
  const T* in = x + plane * g.height * g.width;
  const WindowSpan ry = pool_window(oy, g.stride_y, g.pad_y, g.kernel_h, g.height);
  const WindowSpan rx = pool_window(ox, g.stride_x, g.pad_x, g.kernel_w, g.width);
  T best = negative_infinity<T>();
  std::int64_t best_index = -1;
  for (std::int64_t iy = ry.begin; iy < ry.end; ++iy) {
    for (std::int64_t ix = rx.begin; ix < rx.end; ++ix) {
      const T v = in[iy * g.width + ix];
      if (best_index < 0 || v > best) {
        best = v;
        best_index = iy * g.width + ix;
      }
    }
  }
  *value = best;
  *argmax = best_index;
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

// Average pooling (Chainer's): the window's sum over the input, times scale = 1 / (kernel_h *
// kernel_w), so padding counts as zeros.
template <typename T>
TANDEM_HOST_DEVICE inline T avg_pool_element(const T* x, const Conv2DGeometry& g, T scale, std::int64_t index) {
  const std::int64_t ox = index % g.out_w;
  const std::int64_t oy = (index / g.out_w) % g.out_h;
  const std::int64_t plane = index / (g.out_w * g.out_h);
  const T* in = x + plane * g.height * g.width;
  const WindowSpan ry = pool_window(oy, g.stride_y, g.pad_y, g.kernel_h, g.height);
  const WindowSpan rx = pool_window(ox, g.stride_x, g.pad_x, g.kernel_w, g.width);
  T sum = T(0);
  for (std::int64_t iy = ry.begin; iy < ry.end; ++iy)
    for (std::int64_t ix = rx.begin; ix < rx.end; ++ix) sum += in[iy * g.width + ix];
  return sum * scale;
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
