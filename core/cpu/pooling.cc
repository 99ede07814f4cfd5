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

}  // namespace

void CpuBackend::max_pool2d(const Tensor& x, const Conv2DGeometry& g, Tensor& y, Tensor& indices) {
  check_pool_geometry(g, "max_pool2d");
  const std::int64_t plane_in = g.height * g.width, plane_out = g.out_h * g.out_w;
  if (g.batch * g.channels * plane_out == 0) return;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "max_pool2d", [&] {
    const scalar_t* px = x.data<scalar_t>();
    scalar_t* py = y.data<scalar_t>();
    std::int64_t* pi = indices.data<std::int64_t>();
    // The common 2x2, stride 2 window without padding, whole inside the input: no clipping, and
    // the four candidates compared in window order (the first maximum wins, as below).
    const bool two_by_two = g.kernel_h == 2 && g.kernel_w == 2 && g.stride_y == 2 && g.stride_x == 2 &&
                            g.pad_y == 0 && g.pad_x == 0 && 2 * g.out_h <= g.height && 2 * g.out_w <= g.width;
    for_planes(g, plane_out * g.kernel_h * g.kernel_w, [&](std::int64_t p) {
      const scalar_t* in = px + p * plane_in;
      scalar_t* out = py + p * plane_out;
      std::int64_t* idx = pi + p * plane_out;
      if (two_by_two) {
        for (std::int64_t oy = 0; oy < g.out_h; ++oy) {
          const scalar_t* r0 = in + 2 * oy * g.width;
          const scalar_t* r1 = r0 + g.width;
          for (std::int64_t ox = 0; ox < g.out_w; ++ox) {
            const std::int64_t i0 = 2 * oy * g.width + 2 * ox;
            scalar_t best = r0[2 * ox];
            std::int64_t best_index = i0;
            if (r0[2 * ox + 1] > best) best = r0[2 * ox + 1], best_index = i0 + 1;
            if (r1[2 * ox] > best) best = r1[2 * ox], best_index = i0 + g.width;
            if (r1[2 * ox + 1] > best) best = r1[2 * ox + 1], best_index = i0 + g.width + 1;
            out[oy * g.out_w + ox] = best;
            idx[oy * g.out_w + ox] = best_index;
          }
        }
        return;
      }
      for (std::int64_t oy = 0; oy < g.out_h; ++oy) {
        const WindowSpan ry = pool_window(oy, g.stride_y, g.pad_y, g.kernel_h, g.height);
        for (std::int64_t ox = 0; ox < g.out_w; ++ox) {
          const WindowSpan rx = pool_window(ox, g.stride_x, g.pad_x, g.kernel_w, g.width);
          window_max(in, g.width, ry, rx, &out[oy * g.out_w + ox], &idx[oy * g.out_w + ox]);
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
