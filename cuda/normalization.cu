// Batch-normalisation kernels of the CUDA backend, over x viewed as [outer, channels, inner]
// (semantics: core/cpu/normalization.cc).
//
// Per-channel sums are taken in double (for f32 too), in two kernels: one block per (channel,
// chunk) adds its chunk's terms (a grid-stride run per thread, then a shared-memory tree), and
// one thread per channel adds the chunks' partial sums in chunk order. No atomics: the order of
// every addition is fixed by the shape alone (cuda/channel_index.h), so results are
// reproducible run to run and GPU to GPU. The statistics take two such passes, like the CPU:
// the mean, then the squared deviations from it (no cancellation for data far from 0).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "cuda/channel_index.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernel_util.cuh"

namespace tandem {
namespace cuda {

namespace {

// ---- the terms summed per channel: term(c, flat, a0, a1) adds the element's contributions ----

template <typename T>
struct SumTerm {  // a0 += x
  const T* x;
  __device__ void operator()(std::int64_t, std::int64_t i, double& a0, double&) const {
    a0 += static_cast<double>(x[i]);
  }
};

template <typename T>
struct CentredSquareTerm {  // a0 += (x - mean[c])^2, with the mean kept in double
  const T* x;
  const double* mean;
  __device__ void operator()(std::int64_t c, std::int64_t i, double& a0, double&) const {
    const double d = static_cast<double>(x[i]) - mean[c];
    a0 += d * d;
  }
};

template <typename T>
struct BackwardTerm {  // a0 += gy, a1 += gy * (x - mean[c])
  const T* gy;
  const T* x;
  const T* mean;
  __device__ void operator()(std::int64_t c, std::int64_t i, double& a0, double& a1) const {
    const double g = static_cast<double>(gy[i]);
    a0 += g;
    a1 += g * (static_cast<double>(x[i]) - static_cast<double>(mean[c]));
  }
};

// partials[2 * (c * chunks + chunk) + {0, 1}] = the two sums of the chunk's terms. Launched with
// kBlockThreads (a power of two) threads per block; blocks loop over the (channel, chunk) tasks.
template <typename Term>
__global__ void channel_partial_sums_kernel(Term term, std::int64_t channels, std::int64_t inner,
                                            std::int64_t count, ChannelChunks plan, double* partials) {
  __shared__ double s0[kBlockThreads];
  __shared__ double s1[kBlockThreads];
  const int t = static_cast<int>(threadIdx.x);
  const std::int64_t tasks = channels * plan.chunks;
  for (std::int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const std::int64_t c = task / plan.chunks;
    const std::int64_t begin = (task - c * plan.chunks) * plan.chunk_size;
    const std::int64_t end = begin + plan.chunk_size < count ? begin + plan.chunk_size : count;
    double a0 = 0, a1 = 0;
    if (begin + t < end) {
      ChannelWalk walk(c, channels, inner, begin + t, kBlockThreads);
      for (std::int64_t j = begin + t; j < end; j += kBlockThreads) {
        term(c, walk.offset(), a0, a1);
        walk.advance();
      }
    }
    s0[t] = a0;
    s1[t] = a1;
    __syncthreads();
    for (int half = kBlockThreads / 2; half > 0; half /= 2) {
      if (t < half) {
        s0[t] += s0[t + half];
        s1[t] += s1[t + half];
      }
      __syncthreads();
    }
    if (t == 0) {
      partials[2 * task] = s0[0];
      partials[2 * task + 1] = s1[0];
    }
    __syncthreads();  // s0/s1 are rewritten by the next task
  }
}

// The chunks' partial sums of channel c, added in chunk order.
__device__ void add_chunks(const double* partials, std::int64_t c, std::int64_t chunks, double& a0, double& a1) {
  a0 = 0;
  a1 = 0;
  for (std::int64_t k = 0; k < chunks; ++k) {
    a0 += partials[2 * (c * chunks + k)];
    a1 += partials[2 * (c * chunks + k) + 1];
  }
}

__global__ void channel_mean_kernel(const double* partials, std::int64_t channels, std::int64_t chunks,
                                    double count, double* mean) {
  TANDEM_GRID_STRIDE_LOOP(c, channels) {
    double sum, unused;
    add_chunks(partials, c, chunks, sum, unused);
    mean[c] = count > 0 ? sum / count : 0.0;
  }
}

template <typename T>
__global__ void channel_stats_kernel(const double* partials, const double* mean_d, std::int64_t channels,
                                     std::int64_t chunks, double count, T* mean, T* var) {
  TANDEM_GRID_STRIDE_LOOP(c, channels) {
    double centred, unused;
    add_chunks(partials, c, chunks, centred, unused);
    mean[c] = static_cast<T>(mean_d[c]);
    var[c] = static_cast<T>(count > 0 ? centred / count : 0.0);
  }
}

template <typename T>
__global__ void channel_sums_kernel(const double* partials, std::int64_t channels, std::int64_t chunks, T* sum0,
                                    T* sum1) {
  TANDEM_GRID_STRIDE_LOOP(c, channels) {
    double a0, a1;
    add_chunks(partials, c, chunks, a0, a1);
    sum0[c] = static_cast<T>(a0);
    sum1[c] = static_cast<T>(a1);
  }
}

// Per-channel partial sums of `term` over [outer, channels, inner] into `partials` (2 doubles per
// (channel, chunk) of `plan`); nothing is launched when the channels are empty.
template <typename Term>
void launch_partial_sums(const char* name, const DeviceContext& ctx, const Term& term, std::int64_t channels,
                         std::int64_t inner, std::int64_t count, const ChannelChunks& plan, double* partials) {
  const std::int64_t tasks = channels * plan.chunks;
  if (tasks <= 0) return;
  const unsigned grid = static_cast<unsigned>(std::min<std::int64_t>(tasks, 1 << 20));
  channel_partial_sums_kernel<Term><<<grid, kBlockThreads, 0, ctx.stream>>>(term, channels, inner, count, plan,
                                                                             partials);
  TANDEM_CUDA_CHECK_LAUNCH(name);
}

// Scratch for the partial sums of `plan` (at least one double, so that the pointer is valid).
DeviceBuffer partials_buffer(std::int64_t channels, const ChannelChunks& plan, int device) {
  const std::int64_t doubles = std::max<std::int64_t>(1, 2 * channels * plan.chunks);
  return DeviceBuffer(static_cast<std::size_t>(doubles) * sizeof(double), device);
}

}  // namespace

void CudaBackend::batch_norm_stats(const Tensor& x, std::int64_t outer, std::int64_t channels, std::int64_t inner,
                                   Tensor& mean, Tensor& var) {
  if (channels == 0) return;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "batch_norm_stats", [&] {
    using T = scalar_t;
    DeviceContext& ctx = context_of(x, "batch_norm_stats");
    const std::int64_t count = outer * inner;
    const ChannelChunks plan = plan_channel_chunks(channels, count);
    DeviceBuffer partials = partials_buffer(channels, plan, ctx.index);
    DeviceBuffer mean_d(static_cast<std::size_t>(channels) * sizeof(double), ctx.index);
    const T* px = x.data<T>();
    // Pass 1: the mean of each channel, kept in double for pass 2.
    launch_partial_sums("batch_norm_stats (sums)", ctx, SumTerm<T>{px}, channels, inner, count, plan,
                        partials.as<double>());
    launch_elementwise("batch_norm_stats (mean)", ctx, channels, channel_mean_kernel,
                       static_cast<const double*>(partials.as<double>()), channels, plan.chunks,
                       static_cast<double>(count), mean_d.as<double>());
    // Pass 2: the squared deviations from it.
    launch_partial_sums("batch_norm_stats (centred sums)", ctx,
                        CentredSquareTerm<T>{px, mean_d.as<double>()}, channels, inner, count, plan,
                        partials.as<double>());
    launch_elementwise("batch_norm_stats (variance)", ctx, channels, channel_stats_kernel<T>,
                       static_cast<const double*>(partials.as<double>()),
                       static_cast<const double*>(mean_d.as<double>()), channels, plan.chunks,
                       static_cast<double>(count), mean.data<T>(), var.data<T>());
  });
}

namespace {

// out = x * scale[c] + shift[c], or x * scale[c] + z * zscale[c] + shift[c] when z is given
// (z == nullptr otherwise); the additions in the CPU's order.
template <typename T, typename Index>
__global__ void channel_affine_kernel(const T* x, const T* scale, const T* z, const T* zscale, const T* shift,
                                      Index channels, Index inner, std::int64_t n, T* out) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    const Index c = channel_of(static_cast<Index>(i), channels, inner);
    T v = x[i] * scale[c];
    if (z != nullptr) v = v + z[i] * zscale[c];
    out[i] = v + shift[c];
  }
}

}  // namespace

void CudaBackend::channel_affine(const Tensor& x, const Tensor& scale, const Tensor& z, const Tensor& zscale,
                                 const Tensor& shift, std::int64_t outer, std::int64_t channels, std::int64_t inner,
                                 Tensor& out) {
  (void)outer;  // implied by n, channels and inner
  const std::int64_t n = out.numel();
  if (n == 0) return;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "channel_affine", [&] {
    using T = scalar_t;
    DeviceContext& ctx = context_of(x, "channel_affine");
    const bool has_z = z.defined();
    const T* pz = has_z ? z.data<T>() : nullptr;
    const T* pzs = has_z ? zscale.data<T>() : nullptr;
    // 32-bit division per element where every flat index fits (the common case).
    if (n <= std::numeric_limits<std::int32_t>::max()) {
      launch_elementwise("channel_affine", ctx, n, channel_affine_kernel<T, std::uint32_t>, x.data<T>(),
                         scale.data<T>(), pz, pzs, shift.data<T>(), static_cast<std::uint32_t>(channels),
                         static_cast<std::uint32_t>(inner), n, out.data<T>());
    } else {
      launch_elementwise("channel_affine", ctx, n, channel_affine_kernel<T, std::int64_t>, x.data<T>(),
                         scale.data<T>(), pz, pzs, shift.data<T>(), channels, inner, n, out.data<T>());
    }
  });
}

void CudaBackend::batch_norm_backward_sums(const Tensor& gy, const Tensor& x, const Tensor& mean, std::int64_t outer,
                                           std::int64_t channels, std::int64_t inner, Tensor& sum_gy,
                                           Tensor& sum_gy_xmu) {
  if (channels == 0) return;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "batch_norm_backward_sums", [&] {
    using T = scalar_t;
    DeviceContext& ctx = context_of(x, "batch_norm_backward_sums");
    const std::int64_t count = outer * inner;
    const ChannelChunks plan = plan_channel_chunks(channels, count);
    DeviceBuffer partials = partials_buffer(channels, plan, ctx.index);
    launch_partial_sums("batch_norm_backward_sums", ctx, BackwardTerm<T>{gy.data<T>(), x.data<T>(), mean.data<T>()},
                        channels, inner, count, plan, partials.as<double>());
    launch_elementwise("batch_norm_backward_sums (per channel)", ctx, channels, channel_sums_kernel<T>,
                       static_cast<const double*>(partials.as<double>()), channels, plan.chunks,
                       sum_gy.data<T>(), sum_gy_xmu.data<T>());
  });
}

}  // namespace cuda
}  // namespace tandem
