// Convolution: oneDNN's direct kernels (core/cpu/onednn_conv.h), Winograd F(2x2, 3x3) for 3x3
// stride-1 kernels (core/cpu/winograd_conv.h) or im2col + GEMM,
// whichever was measured fastest for the geometry on this machine (core/cpu/measured_choice.h;
// TANDEM_CONV=im2col|onednn|winograd|auto forces one). im2col also runs f64 and builds without
// oneDNN.
//
// im2col + GEMM: im2col / col2im work one (image, channel) plane at a time: a
// plane's kernel_h * kernel_w rows of col are written (im2col) or read (col2im) by one thread,
// so col2im's accumulation needs no synchronisation.
//
// The convolution kernels work image by image, each thread on its own images with its own
// column buffer and a single-threaded GEMM (the product runs inside a parallel region). An
// image's columns are consumed right after they are made, while they are still in cache, and
// the threads share no work; splitting each (small) product over the threads instead scales
// poorly (see bench/train_step_bench's conv workload).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/gemm.h"
#include "core/cpu/gemm_choice.h"
#include "core/cpu/measured_choice.h"
#include "core/cpu/onednn_conv.h"
#include "core/cpu/parallel.h"
#include "core/cpu/winograd_conv.h"
#include "core/deterministic.h"
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

// Copies and zero fills of a few dozen elements (an image row): inline, where a memcpy or memset
// call costs as much as the work (the calls showed in profiles of the benchmark CNN's step:
// docs/performance.md, "Costs outside the products"). GCC would turn the loops back into those
// calls, hence the attribute.
template <typename T>
__attribute__((optimize("no-tree-loop-distribute-patterns"))) inline void copy_short(const T* src, T* dst,
                                                                                     std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

template <typename T>
__attribute__((optimize("no-tree-loop-distribute-patterns"))) inline void zero_short(T* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = T(0);
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
          zero_short(d, ow);
          continue;
        }
        zero_short(d, r.lo);
        const T* row = x + iy * W;  // row[x_off + ox * stride_x] is in range for ox in [lo, hi)
        if (g.stride_x == 1) {
          copy_short(row + x_off + r.lo, d + r.lo, r.hi - r.lo);
        } else {
          for (std::int64_t ox = r.lo; ox < r.hi; ++ox) d[ox] = row[x_off + ox * g.stride_x];
        }
        zero_short(d + r.hi, ow - r.hi);
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

// The sizes every per-image convolution step needs.
struct ConvSizes {
  std::int64_t C, O, G, Og, K, CK, ohw, hw;
  bool pointwise;  // 1x1 kernel, stride 1, no padding: an image's columns are the image itself

  ConvSizes(const Conv2DGeometry& g, std::int64_t out_channels, std::int64_t groups)
      : C(g.channels),
        O(out_channels),
        G(groups),
        Og(out_channels / groups),
        K(g.channels / groups * g.kernel_h * g.kernel_w),
        CK(g.channels * g.kernel_h * g.kernel_w),
        ohw(g.out_h * g.out_w),
        hw(g.height * g.width),
        pointwise(g.kernel_h == 1 && g.kernel_w == 1 && g.stride_y == 1 && g.stride_x == 1 && g.pad_y == 0 &&
                  g.pad_x == 0) {}
};

// The columns [CK, ohw] of one image: the image itself for a pointwise convolution, otherwise
// im2col into buffer.
template <typename T>
const T* image_columns(const T* image, const Conv2DGeometry& g, const ConvSizes& s, T* buffer) {
  if (s.pointwise) return image;
  const std::int64_t plane_col = g.kernel_h * g.kernel_w * s.ohw;
  for (std::int64_t c = 0; c < s.C; ++c) im2col_plane(image + c * s.hw, g, buffer + c * plane_col);
  return buffer;
}

// One column buffer per parallel chunk (none for a pointwise convolution).
Tensor column_buffers(const ConvSizes& s, const Tensor& like) {
  if (s.pointwise) return Tensor();
  return Tensor({cpu::max_chunks(), s.CK * s.ohw}, like.dtype(), like.device());
}

void conv2d_im2col(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DGeometry& g, std::int64_t groups,
                   Tensor& y) {
  const ConvSizes s(g, W.size(0), groups);
  Tensor buffers = column_buffers(s, x);
  TANDEM_DISPATCH_FLOAT(x.dtype(), "conv2d", [&] {
    const scalar_t* px = x.data<scalar_t>();
    const scalar_t* pw = W.data<scalar_t>();
    const scalar_t* pb = b.defined() ? b.data<scalar_t>() : nullptr;
    scalar_t* py = y.data<scalar_t>();
    cpu::parallel_chunks(g.batch, s.O * s.K * s.ohw, 1, [&](std::int64_t lo, std::int64_t hi, int chunk) {
      scalar_t* buffer = s.pointwise ? nullptr : buffers.data<scalar_t>() + chunk * s.CK * s.ohw;
      for (std::int64_t n = lo; n < hi; ++n) {
        const scalar_t* col = image_columns(px + n * s.C * s.hw, g, s, buffer);
        scalar_t* yn = py + n * s.O * s.ohw;
        // The bias is broadcast into y first and the products accumulate onto it.
        if (pb) {
          for (std::int64_t o = 0; o < s.O; ++o) std::fill(yn + o * s.ohw, yn + (o + 1) * s.ohw, pb[o]);
        }
        // y[n, group] [Og, ohw] (+)= W[group] [Og, K] @ col[group] [K, ohw]
        for (std::int64_t gi = 0; gi < s.G; ++gi) {
          cpu::gemm(pw + gi * s.Og * s.K, col + gi * s.K * s.ohw, yn + gi * s.Og * s.ohw, s.Og, s.ohw, s.K, false,
                    false, pb != nullptr);
        }
      }
    });
  });
}

void conv2d_grad_input_im2col(const Tensor& gy, const Tensor& W, const Conv2DGeometry& g, std::int64_t groups,
                              Tensor& gx) {
  const ConvSizes s(g, W.size(0), groups);
  Tensor buffers = column_buffers(s, gy);
  TANDEM_DISPATCH_FLOAT(gy.dtype(), "conv2d_grad_input", [&] {
    const scalar_t* pgy = gy.data<scalar_t>();
    const scalar_t* pw = W.data<scalar_t>();
    scalar_t* pgx = gx.data<scalar_t>();
    const std::int64_t plane_col = g.kernel_h * g.kernel_w * s.ohw;
    cpu::parallel_chunks(g.batch, s.O * s.K * s.ohw, 1, [&](std::int64_t lo, std::int64_t hi, int chunk) {
      scalar_t* buffer = s.pointwise ? nullptr : buffers.data<scalar_t>() + chunk * s.CK * s.ohw;
      for (std::int64_t n = lo; n < hi; ++n) {
        scalar_t* gxn = pgx + n * s.C * s.hw;
        // gcol[group] [K, ohw] = W[group]^T [K, Og] @ gy[n, group] [Og, ohw]; a pointwise
        // convolution writes it straight into gx.
        scalar_t* gcol = s.pointwise ? gxn : buffer;
        for (std::int64_t gi = 0; gi < s.G; ++gi) {
          cpu::gemm(pw + gi * s.Og * s.K, pgy + (n * s.O + gi * s.Og) * s.ohw, gcol + gi * s.K * s.ohw, s.K, s.ohw,
                    s.Og, true, false, false);
        }
        if (!s.pointwise) {
          for (std::int64_t c = 0; c < s.C; ++c) col2im_plane(gcol + c * plane_col, g, gxn + c * s.hw);
        }
      }
    });
  });
}

void conv2d_grad_weight_im2col(const Tensor& x, const Tensor& gy, const Conv2DGeometry& g, std::int64_t groups,
                               Tensor& gW) {
  const ConvSizes s(g, gW.size(0), groups);
  // Each thread sums its images' products into its own slot; the slots are added at the end.
  // Deterministic mode: one slot, the images in order (each product is split by tandem instead).
  const bool in_order = deterministic();
  const std::int64_t slots = in_order ? 1 : cpu::max_chunks(), wsize = gW.numel();
  Tensor buffers = s.pointwise ? Tensor() : Tensor({slots, s.CK * s.ohw}, x.dtype(), x.device());
  Tensor partial({slots, wsize}, gW.dtype(), gW.device());
  TANDEM_DISPATCH_FLOAT(x.dtype(), "conv2d_grad_weight", [&] {
    const scalar_t* px = x.data<scalar_t>();
    const scalar_t* pgy = gy.data<scalar_t>();
    scalar_t* pp = partial.data<scalar_t>();
    std::fill(pp, pp + slots * wsize, scalar_t(0));
    auto images = [&](std::int64_t lo, std::int64_t hi, int slot) {
      scalar_t* buffer = s.pointwise ? nullptr : buffers.data<scalar_t>() + slot * s.CK * s.ohw;
      scalar_t* acc = pp + slot * wsize;
      for (std::int64_t n = lo; n < hi; ++n) {
        const scalar_t* col = image_columns(px + n * s.C * s.hw, g, s, buffer);
        // gW[group] [Og, K] += gy[n, group] [Og, ohw] @ col[group]^T [ohw, K]
        for (std::int64_t gi = 0; gi < s.G; ++gi) {
          cpu::gemm(pgy + (n * s.O + gi * s.Og) * s.ohw, col + gi * s.K * s.ohw, acc + gi * s.Og * s.K, s.Og, s.K,
                    s.ohw, false, true, true);
        }
      }
    };
    if (in_order) images(0, g.batch, 0);
    else cpu::parallel_chunks(g.batch, s.O * s.K * s.ohw, 1, images);
    scalar_t* pg = gW.data<scalar_t>();
    std::copy(pp, pp + wsize, pg);
    for (std::int64_t t = 1; t < slots; ++t) {  // a slot no chunk used is still zero
      const scalar_t* src = pp + t * wsize;
      for (std::int64_t i = 0; i < wsize; ++i) pg[i] += src[i];
    }
  });
}

// The kernels a convolution can run on; the measured choice's candidate names, in this order.
enum class ConvKernel { im2col, onednn, winograd };
const char* const kConvKernelNames[] = {"im2col", "onednn", "winograd"};

// The kernel this convolution runs on: among im2col, oneDNN and Winograd (each where it
// applies), the one measured fastest for the geometry, or the one TANDEM_CONV
// names (im2col where the named one does not apply). run(kernel) runs one on the caller's
// tensors, whose output the chosen one then writes again.
template <typename Run>
ConvKernel conv_kernel(const char* direction, const Conv2DGeometry& g, std::int64_t out_channels,
                       std::int64_t groups, DType dtype, bool bias, const Run& run) {
  // bf16 runs on oneDNN alone (CpuBackend::runs_16bit_convolutions: not in deterministic mode).
  if (dtype == DType::bf16) {
    TANDEM_CHECK(cpu::onednn_conv_supported(g, out_channels, groups, dtype), "conv2d (", direction,
                 "): bf16 convolutions need oneDNN on a processor with bf16 dot products and a geometry it "
                 "takes (the ops widen them to f32 otherwise)");
    return ConvKernel::onednn;
  }
  // Deterministic mode: im2col, whose products and sums run alike at any thread count.
  if (deterministic()) return ConvKernel::im2col;
  std::vector<ConvKernel> kernels = {ConvKernel::im2col};
  if (cpu::onednn_conv_supported(g, out_channels, groups, dtype)) kernels.push_back(ConvKernel::onednn);
  if (cpu::winograd_conv_supported(g, out_channels, groups, dtype)) kernels.push_back(ConvKernel::winograd);
  const char* forced = std::getenv("TANDEM_CONV");
  if (forced != nullptr && *forced != 0 && std::strcmp(forced, "auto") != 0) {
    const auto named = std::find_if(std::begin(kConvKernelNames), std::end(kConvKernelNames),
                                    [&](const char* name) { return std::strcmp(forced, name) == 0; });
    TANDEM_CHECK(named != std::end(kConvKernelNames), "TANDEM_CONV=", forced,
                 ": expected auto, im2col, onednn or winograd");
    const auto kernel = static_cast<ConvKernel>(named - std::begin(kConvKernelNames));
    return std::find(kernels.begin(), kernels.end(), kernel) != kernels.end() ? kernel : ConvKernel::im2col;
  }
  if (kernels.size() == 1) return ConvKernel::im2col;
  std::vector<std::string> names;
  for (ConvKernel k : kernels) names.push_back(kConvKernelNames[static_cast<int>(k)]);
  // The candidates are part of the key: a geometry measured before Winograd was one of them is
  // measured again.
  char key[288];
  std::snprintf(key, sizeof(key),
                "conv.%s.f32.t%d.n%lldc%lldh%lldw%lld.o%lldg%lld.k%lldx%lld.s%lldx%lld.p%lldx%lld.d%lldx%lld.b%d%s",
                direction, cpu::max_chunks(), (long long)g.batch, (long long)g.channels, (long long)g.height,
                (long long)g.width, (long long)out_channels, (long long)groups, (long long)g.kernel_h,
                (long long)g.kernel_w, (long long)g.stride_y, (long long)g.stride_x, (long long)g.pad_y,
                (long long)g.pad_x, (long long)g.dilate_y, (long long)g.dilate_x, bias ? 1 : 0,
                kernels.back() == ConvKernel::winograd ? ".wino" : "");
  const double flops = 2.0 * double(g.batch) * double(out_channels) * double(g.channels / groups) *
                       double(g.kernel_h * g.kernel_w) * double(g.out_h * g.out_w);
  const int rounds = flops >= 4e9 ? 1 : 3;
  // Without timing (TANDEM_KERNEL_TUNING=fixed): Winograd where it applies with 16 channels or more
  // on both sides (its transforms pay there: it ran faster than oneDNN on the 64- and 128-channel
  // layers of the CNN benchmark and far slower with 1 input channel: docs/performance.md, "CPU
  // kernels: the fastest library per shape"), else oneDNN where it applies, else im2col.
  auto index = [&](ConvKernel k) {
    return static_cast<std::size_t>(std::find(kernels.begin(), kernels.end(), k) - kernels.begin());
  };
  std::size_t fixed = 0;
  if (index(ConvKernel::onednn) < kernels.size()) fixed = index(ConvKernel::onednn);
  if (index(ConvKernel::winograd) < kernels.size() && g.channels / groups >= 16 && out_channels / groups >= 16)
    fixed = index(ConvKernel::winograd);
  const std::size_t chosen = cpu::measured_choice(
      key, names,
      [&] { return cpu::time_interleaved(kernels.size(), [&](std::size_t i) { run(kernels[i]); }, rounds, 1); },
      flops, "", nullptr, fixed);
  return kernels[chosen];
}

}  // namespace

bool CpuBackend::runs_16bit_convolutions(DType dtype, const Conv2DGeometry& g, std::int64_t out_channels,
                                         std::int64_t groups) const {
  // Deterministic mode's convolutions are im2col's, alike at every thread count; oneDNN's are not.
  return dtype == DType::bf16 && !deterministic() && cpu::bf16_products_native() &&
         cpu::onednn_conv_supported(g, out_channels, groups, dtype);
}

void CpuBackend::conv2d_forward(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DGeometry& g,
                                std::int64_t groups, bool relu, Tensor& y) {
  if (y.numel() == 0) return;
  // The choice is the convolution's own, measured without the ReLU; oneDNN applies the ReLU as
  // a post-op, Winograd as it writes the outputs.
  auto run = [&](ConvKernel kernel, bool with_relu) {
    switch (kernel) {
      case ConvKernel::onednn: cpu::onednn_conv2d(x, W, b, g, groups, with_relu, y); break;
      case ConvKernel::winograd: cpu::winograd_conv2d(x, W, b, g, with_relu, y); break;
      case ConvKernel::im2col:
        conv2d_im2col(x, W, b, g, groups, y);
        if (with_relu) unary(UnaryOp::relu, y, y, 0, 0);
        break;
    }
  };
  run(conv_kernel("fwd", g, W.size(0), groups, x.dtype(), b.defined(),
                  [&](ConvKernel kernel) { run(kernel, false); }),
      relu);
}

void CpuBackend::conv2d(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DGeometry& g,
                        std::int64_t groups, Tensor& y) {
  conv2d_forward(x, W, b, g, groups, false, y);
}

void CpuBackend::conv2d_relu(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DGeometry& g,
                             std::int64_t groups, Tensor& y) {
  conv2d_forward(x, W, b, g, groups, true, y);
}

void CpuBackend::conv2d_grad_input(const Tensor& gy, const Tensor& W, const Conv2DGeometry& g, std::int64_t groups,
                                   Tensor& gx) {
  if (gx.numel() == 0) return;
  auto run = [&](ConvKernel kernel) {
    switch (kernel) {
      case ConvKernel::onednn: cpu::onednn_conv2d_grad_input(gy, W, g, groups, gx); break;
      case ConvKernel::winograd: cpu::winograd_conv2d_grad_input(gy, W, g, gx); break;
      case ConvKernel::im2col: conv2d_grad_input_im2col(gy, W, g, groups, gx); break;
    }
  };
  run(conv_kernel("bwd_data", g, W.size(0), groups, gy.dtype(), false, run));
}

void CpuBackend::conv2d_grad_weight(const Tensor& x, const Tensor& gy, const Conv2DGeometry& g, std::int64_t groups,
                                    Tensor& gW) {
  if (gW.numel() == 0) return;
  auto run = [&](ConvKernel kernel) {
    switch (kernel) {
      case ConvKernel::onednn: cpu::onednn_conv2d_grad_weight(x, gy, g, groups, gW); break;
      case ConvKernel::winograd: cpu::winograd_conv2d_grad_weight(x, gy, g, gW); break;
      case ConvKernel::im2col: conv2d_grad_weight_im2col(x, gy, g, groups, gW); break;
    }
  };
  run(conv_kernel("bwd_weights", g, gW.size(0), groups, x.dtype(), false, run));
}

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
