// Max and average pooling over [N, C, H, W] images, in parallel over (image, channel) planes:
// each plane's outputs, and in the backward passes each plane's input gradient, belong to one
// thread, so the scatters need no synchronisation. The window of output (oy, ox) is clipped to
// the input once per output; the padding is never materialised. The window arithmetic is
// core/pool_window.h's, which the CUDA kernels share.
#include <algorithm>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/parallel.h"
#include "core/error.h"
#include "core/pool_window.h"
#include "core/tensor.h"

namespace tandem {

namespace {

void check_pool_geometry(const Conv2DGeometry& g, const char* op) {
  TANDEM_CHECK(g.dilate_y == 1 && g.dilate_x == 1, op, ": pooling kernels take no dilation, got ", g.dilate_y,
               "x", g.dilate_x);
}

template <typename Body>
void for_planes(const Conv2DGeometry& g, std::int64_t cost_per_plane, const Body& body) {
  cpu::parallel_for(g.batch * g.channels, std::max<std::int64_t>(cost_per_plane, 1), cpu::kElementwiseGrain,
                    [&](std::int64_t b, std::int64_t e) {
                      for (std::int64_t p = b; p < e; ++p) body(p);
                    });
}

// The common 2x2, stride 2 window without padding, whole inside the input, for one plane: no
// clipping, the same rules as window_max (the first maximum in window order wins; a NaN only when
// it comes first). The maximum is taken first and the index found after it, as the first candidate
// equal to it, so that the loops have no data-dependent branches and vectorize: a branching loop
// mispredicts on the ties that ReLU leaves (docs/performance.md, "Costs outside the products";
// bench id conv.infer.t1). GCC's 512-bit vectors suit rows of 7 or 14 outputs badly (most of them
// fall into the scalar remainder), so these loops ask for 128-bit ones. `index` may be null (no
// indices wanted).
#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#define TANDEM_SHORT_VECTORS __attribute__((target("prefer-vector-width=128")))
#else
#define TANDEM_SHORT_VECTORS
#endif

template <typename T>
TANDEM_SHORT_VECTORS void max_pool_2x2_plane(const T* __restrict in, std::int64_t width, std::int64_t out_h,
                                             std::int64_t out_w, T* __restrict out,
                                             std::int64_t* __restrict index) {
  constexpr std::int64_t kChunk = 256;
  T which[kChunk];  // 0..3: the window position of each maximum, as T so that its loop vectorizes with the values
  for (std::int64_t oy = 0; oy < out_h; ++oy) {
    const T* __restrict r0 = in + 2 * oy * width;
    const T* __restrict r1 = r0 + width;
    T* __restrict y = out + oy * out_w;
    for (std::int64_t from = 0; from < out_w; from += kChunk) {
      const std::int64_t n = std::min(kChunk, out_w - from);
      const T* __restrict a0 = r0 + 2 * from;
      const T* __restrict a1 = r1 + 2 * from;
      T* __restrict yc = y + from;
      if (index == nullptr) {
        for (std::int64_t j = 0; j < n; ++j) {
          T best = a0[2 * j];
          best = a0[2 * j + 1] > best ? a0[2 * j + 1] : best;
          best = a1[2 * j] > best ? a1[2 * j] : best;
          best = a1[2 * j + 1] > best ? a1[2 * j + 1] : best;
          yc[j] = best;
        }
        continue;
      }
      for (std::int64_t j = 0; j < n; ++j) {
        const T a = a0[2 * j], b = a0[2 * j + 1], c = a1[2 * j], d = a1[2 * j + 1];
        T best = a;
        best = b > best ? b : best;
        best = c > best ? c : best;
        best = d > best ? d : best;
        yc[j] = best;
        // The first candidate equal to the maximum; a NaN maximum came first.
        which[j] = (a == best || a != a) ? T(0) : b == best ? T(1) : c == best ? T(2) : T(3);
      }
      std::int64_t* __restrict ic = index + oy * out_w + from;
      const std::int64_t base = 2 * oy * width + 2 * from;
      for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t k = static_cast<std::int64_t>(which[j]);
        ic[j] = base + 2 * j + (k & 1) + (k >> 1) * width;
      }
    }
  }
}

}  // namespace

void CpuBackend::max_pool2d(const Tensor& x, const Conv2DGeometry& g, Tensor& y, Tensor& indices) {
  check_pool_geometry(g, "max_pool2d");
  const std::int64_t plane_in = g.height * g.width, plane_out = g.out_h * g.out_w;
  if (g.batch * g.channels * plane_out == 0) return;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "max_pool2d", [&] {
    const scalar_t* px = x.data<scalar_t>();
    scalar_t* py = y.data<scalar_t>();
    std::int64_t* pi = indices.defined() ? indices.data<std::int64_t>() : nullptr;
    const bool two_by_two = g.kernel_h == 2 && g.kernel_w == 2 && g.stride_y == 2 && g.stride_x == 2 &&
                            g.pad_y == 0 && g.pad_x == 0 && 2 * g.out_h <= g.height && 2 * g.out_w <= g.width;
    for_planes(g, plane_out * g.kernel_h * g.kernel_w, [&](std::int64_t p) {
      const scalar_t* in = px + p * plane_in;
      scalar_t* out = py + p * plane_out;
      std::int64_t* idx = pi ? pi + p * plane_out : nullptr;
      if (two_by_two) {
        max_pool_2x2_plane(in, g.width, g.out_h, g.out_w, out, idx);
        return;
      }
      std::int64_t unused = 0;
      for (std::int64_t oy = 0; oy < g.out_h; ++oy) {
        const WindowSpan ry = pool_window(oy, g.stride_y, g.pad_y, g.kernel_h, g.height);
        for (std::int64_t ox = 0; ox < g.out_w; ++ox) {
          const WindowSpan rx = pool_window(ox, g.stride_x, g.pad_x, g.kernel_w, g.width);
          window_max(in, g.width, ry, rx, &out[oy * g.out_w + ox], idx ? &idx[oy * g.out_w + ox] : &unused);
        }
      }
    });
  });
}

void CpuBackend::max_pool2d_backward(const Tensor& gy, const Tensor& indices, const Conv2DGeometry& g,
                                     Tensor& gx) {
  check_pool_geometry(g, "max_pool2d_backward");
  const std::int64_t plane_in = g.height * g.width, plane_out = g.out_h * g.out_w;
  if (g.batch * g.channels * plane_in == 0) return;
  TANDEM_DISPATCH_FLOAT(gx.dtype(), "max_pool2d_backward", [&] {
    const scalar_t* pg = gy.data<scalar_t>();
    const std::int64_t* pi = indices.data<std::int64_t>();
    scalar_t* px = gx.data<scalar_t>();
    for_planes(g, plane_in + plane_out, [&](std::int64_t p) {
      scalar_t* out = px + p * plane_in;
      const scalar_t* grad = pg + p * plane_out;
      const std::int64_t* idx = pi + p * plane_out;
      std::fill(out, out + plane_in, scalar_t(0));
      for (std::int64_t o = 0; o < plane_out; ++o) {
        const std::int64_t i = idx[o];
        TANDEM_CHECK(i < plane_in, "max_pool2d_backward: index ", i, " out of range for a ", g.height, "x",
                     g.width, " plane");
        if (i >= 0) out[i] += grad[o];
      }
    });
  });
}

void CpuBackend::avg_pool2d(const Tensor& x, const Conv2DGeometry& g, Tensor& y) {
  check_pool_geometry(g, "avg_pool2d");
  const std::int64_t plane_in = g.height * g.width, plane_out = g.out_h * g.out_w;
  if (g.batch * g.channels * plane_out == 0) return;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "avg_pool2d", [&] {
    const scalar_t* px = x.data<scalar_t>();
    scalar_t* py = y.data<scalar_t>();
    const scalar_t scale = scalar_t(1) / static_cast<scalar_t>(g.kernel_h * g.kernel_w);
    for_planes(g, plane_out * g.kernel_h * g.kernel_w, [&](std::int64_t p) {
      const scalar_t* in = px + p * plane_in;
      scalar_t* out = py + p * plane_out;
      for (std::int64_t oy = 0; oy < g.out_h; ++oy) {
        const WindowSpan ry = pool_window(oy, g.stride_y, g.pad_y, g.kernel_h, g.height);
        for (std::int64_t ox = 0; ox < g.out_w; ++ox) {
          const WindowSpan rx = pool_window(ox, g.stride_x, g.pad_x, g.kernel_w, g.width);
          out[oy * g.out_w + ox] = window_sum(in, g.width, ry, rx) * scale;
        }
      }
    });
  });
}

void CpuBackend::avg_pool2d_backward(const Tensor& gy, const Conv2DGeometry& g, Tensor& gx) {
  check_pool_geometry(g, "avg_pool2d_backward");
  const std::int64_t plane_in = g.height * g.width, plane_out = g.out_h * g.out_w;
  if (g.batch * g.channels * plane_in == 0) return;
  TANDEM_DISPATCH_FLOAT(gx.dtype(), "avg_pool2d_backward", [&] {
    const scalar_t* pg = gy.data<scalar_t>();
    scalar_t* px = gx.data<scalar_t>();
    const scalar_t scale = scalar_t(1) / static_cast<scalar_t>(g.kernel_h * g.kernel_w);
    for_planes(g, plane_in + plane_out * g.kernel_h * g.kernel_w, [&](std::int64_t p) {
      scalar_t* out = px + p * plane_in;
      const scalar_t* grad = pg + p * plane_out;
      std::fill(out, out + plane_in, scalar_t(0));
      for (std::int64_t oy = 0; oy < g.out_h; ++oy) {
        const WindowSpan ry = pool_window(oy, g.stride_y, g.pad_y, g.kernel_h, g.height);
        for (std::int64_t ox = 0; ox < g.out_w; ++ox) {
          const WindowSpan rx = pool_window(ox, g.stride_x, g.pad_x, g.kernel_w, g.width);
          const scalar_t v = grad[oy * g.out_w + ox] * scale;
          for (std::int64_t iy = ry.begin; iy < ry.end; ++iy)
            for (std::int64_t ix = rx.begin; ix < rx.end; ++ix) out[iy * g.width + ix] += v;
        }
      }
    });
  });
}

}  // namespace tandem
