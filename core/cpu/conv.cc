// im2col / col2im for GEMM-based convolution. Both work one (image, channel) plane at a time,
// in parallel over planes: a plane's kernel_h * kernel_w rows of col are written (im2col) or
// read (col2im) by a single thread, so col2im's accumulation needs no synchronisation.
#include <algorithm>
#include <cstring>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/parallel.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tandem {

namespace {

// The output columns ox in [lo, hi) read input columns ox * stride + offset inside [0, size);
// the others fall into the padding.
struct ValidRange {
  std::int64_t lo, hi;
};

ValidRange valid_range(std::int64_t offset, std::int64_t stride, std::int64_t size, std::int64_t out) {
  auto ceil_div = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };  // a >= 0, b > 0
  std::int64_t lo = offset >= 0 ? 0 : ceil_div(-offset, stride);
  std::int64_t hi = size - offset <= 0 ? 0 : ceil_div(size - offset, stride);
  lo = std::min(lo, out);
  hi = std::max(lo, std::min(hi, out));
  return {lo, hi};
}

template <typename T>
void im2col_plane(const T* x, const Conv2DGeometry& g, T* col) {
  const std::int64_t H = g.height, W = g.width, oh = g.out_h, ow = g.out_w, ohw = oh * ow;
  for (std::int64_t ky = 0; ky < g.kernel_h; ++ky) {
    for (std::int64_t kx = 0; kx < g.kernel_w; ++kx) {
      T* dst = col + (ky * g.kernel_w + kx) * ohw;
      const std::int64_t x_off = kx * g.dilate_x - g.pad_x;
      const ValidRange r = valid_range(x_off, g.stride_x, W, ow);
      for (std::int64_t oy = 0; oy < oh; ++oy) {
        T* d = dst + oy * ow;
        const std::int64_t iy = oy * g.stride_y - g.pad_y + ky * g.dilate_y;
        if (iy < 0 || iy >= H) {
          std::fill(d, d + ow, T(0));
          continue;
        }
        std::fill(d, d + r.lo, T(0));
        const T* row = x + iy * W;  // row[x_off + ox * stride_x] is in range for ox in [lo, hi)
        if (g.stride_x == 1) {
          if (r.hi > r.lo) std::memcpy(d + r.lo, row + x_off + r.lo, (r.hi - r.lo) * sizeof(T));
        } else {
          for (std::int64_t ox = r.lo; ox < r.hi; ++ox) d[ox] = row[x_off + ox * g.stride_x];
        }
        std::fill(d + r.hi, d + ow, T(0));
      }
    }
  }
}

template <typename T>
void col2im_plane(const T* col, const Conv2DGeometry& g, T* x) {
  const std::int64_t H = g.height, W = g.width, oh = g.out_h, ow = g.out_w, ohw = oh * ow;
  std::fill(x, x + H * W, T(0));
  for (std::int64_t ky = 0; ky < g.kernel_h; ++ky) {
    for (std::int64_t kx = 0; kx < g.kernel_w; ++kx) {
      const T* src = col + (ky * g.kernel_w + kx) * ohw;
      const std::int64_t x_off = kx * g.dilate_x - g.pad_x;
      const ValidRange r = valid_range(x_off, g.stride_x, W, ow);
      if (r.hi <= r.lo) continue;
      for (std::int64_t oy = 0; oy < oh; ++oy) {
        const std::int64_t iy = oy * g.stride_y - g.pad_y + ky * g.dilate_y;
        if (iy < 0 || iy >= H) continue;
        const T* s = src + oy * ow;
        T* row = x + iy * W;
        if (g.stride_x == 1) {
          T* d = row + x_off + r.lo;
          const T* s0 = s + r.lo;
          for (std::int64_t i = 0, n = r.hi - r.lo; i < n; ++i) d[i] += s0[i];
        } else {
          for (std::int64_t ox = r.lo; ox < r.hi; ++ox) row[x_off + ox * g.stride_x] += s[ox];
        }
      }
    }
  }
}

}  // namespace

void CpuBackend::im2col(const Tensor& x, const Conv2DGeometry& g, Tensor& col) {
  const std::int64_t planes = g.batch * g.channels;
  const std::int64_t plane_in = g.height * g.width;
  const std::int64_t plane_col = g.kernel_h * g.kernel_w * g.out_h * g.out_w;
  if (planes == 0 || plane_col == 0) return;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "im2col", [&] {
    const scalar_t* px = x.data<scalar_t>();
    scalar_t* pc = col.data<scalar_t>();
    cpu::parallel_for(planes, plane_col, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t p = b; p < e; ++p) im2col_plane(px + p * plane_in, g, pc + p * plane_col);
    });
  });
}

void CpuBackend::col2im(const Tensor& col, const Conv2DGeometry& g, Tensor& x) {
  const std::int64_t planes = g.batch * g.channels;
  const std::int64_t plane_in = g.height * g.width;
  const std::int64_t plane_col = g.kernel_h * g.kernel_w * g.out_h * g.out_w;
  if (planes == 0 || plane_in == 0) return;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "col2im", [&] {
    const scalar_t* pc = col.data<scalar_t>();
    scalar_t* px = x.data<scalar_t>();
    cpu::parallel_for(planes, plane_col + plane_in, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t p = b; p < e; ++p) col2im_plane(pc + p * plane_col, g, px + p * plane_in);
    });
  });
}

}  // namespace tandem
