// The window arithmetic of 2-D pooling, written once for the CPU backend (core/cpu/pooling.cc)
// and the CUDA kernels (cuda/window_index.h): which input positions a window covers, which
// windows cover an input position, and the first maximum and the sum over a window. Plain C++
// marked TANDEM_HOST_DEVICE, so that both backends run the same code, in the same order of
// comparisons and additions, and tests/cuda checks the GPU's side on the host.
//
// Geometry as in core/backend.h, without dilation: output position o of an axis reads input
// positions o * stride - pad + tap for tap in [0, kernel), clipped to the input (the padding is
// never read).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace tandem {

// A half-open range [begin, end) of positions along one axis.
struct WindowSpan {
  std::int64_t begin, end;
};

// The input positions that pooling window `o` covers, clipped to [0, size).
TANDEM_HOST_DEVICE inline WindowSpan pool_window(std::int64_t o, std::int64_t stride, std::int64_t pad,
                                                 std::int64_t kernel, std::int64_t size) {
  const std::int64_t start = o * stride - pad;
  const std::int64_t begin = start < 0 ? 0 : start;
  const std::int64_t end = start + kernel < size ? start + kernel : size;
  return {begin, end < begin ? begin : end};
}

// The pooling windows o in [0, out) whose (undilated) window [o * stride - pad, o * stride - pad
// + kernel) contains input position i (0 <= i < size, pad >= 0). Clipping a window to the input
// does not change whether it contains an input position, so these are exactly the windows whose
// pool_window span contains i.
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

// -inf of T, on host and device (std::numeric_limits is not callable from device code).
template <typename T>
TANDEM_HOST_DEVICE inline T negative_infinity();
template <>
TANDEM_HOST_DEVICE inline float negative_infinity<float>() {
  return -HUGE_VALF;
}
template <>
TANDEM_HOST_DEVICE inline double negative_infinity<double>() {
  return -HUGE_VAL;
}

// The first maximum of plane[iy * width + ix] over the window rows ry and columns rx, in window
// order (row by row): a candidate replaces the best only when strictly greater, so a NaN wins
// only when it comes first. `*index` is the maximum's offset in the plane; a window entirely in
// the padding (an empty span) gives -inf and index -1.
template <typename T>
TANDEM_HOST_DEVICE inline void window_max(const T* plane, std::int64_t width, WindowSpan ry, WindowSpan rx, T* value,
                                          std::int64_t* index) {
  T best = negative_infinity<T>();
  std::int64_t best_index = -1;
  for (std::int64_t iy = ry.begin; iy < ry.end; ++iy) {
    for (std::int64_t ix = rx.begin; ix < rx.end; ++ix) {
      const T v = plane[iy * width + ix];
      if (best_index < 0 || v > best) {
        best = v;
        best_index = iy * width + ix;
      }
    }
  }
  *value = best;
  *index = best_index;
}

// The sum of plane[iy * width + ix] over the window rows ry and columns rx, row by row.
template <typename T>
TANDEM_HOST_DEVICE inline T window_sum(const T* plane, std::int64_t width, WindowSpan ry, WindowSpan rx) {
  T sum = T(0);
  for (std::int64_t iy = ry.begin; iy < ry.end; ++iy)
    for (std::int64_t ix = rx.begin; ix < rx.end; ++ix) sum += plane[iy * width + ix];
  return sum;
}

}  // namespace tandem
