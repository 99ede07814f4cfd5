// Normalisation kernels of the CUDA backend (semantics: core/cpu/normalization.cc): batch
// normalisation over x viewed as [outer, channels, inner], here, and layer normalisation over
// [rows, n], further down.
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

// ---- layer normalisation over x viewed as [rows, n] ----
//
// A group of threads per row, striding along it (adjacent threads read adjacent elements), and
// reducing with warp shuffles: a warp per row (kRowsPerBlock rows per block) up to
// kWarpRowMaxFeatures features, a whole block per row beyond, its warps' sums then added through
// shared memory. Statistics in float for f32 (two passes: the mean, then the squared deviations
// from it, so no cancellation), in double for f64. ggamma and gbeta are column sums over the
// rows: a block per (32 columns, chunk of rows) writes partial sums in double, and one thread per
// column adds the chunks in order. No atomics anywhere: every order of addition is fixed by the
// shape, so results are reproducible run to run.

namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kBlockThreads / kWarp;
constexpr std::int64_t kWarpRowMaxFeatures = 1024;

template <typename T>
struct LayerNormAcc {
  using type = float;
};
template <>
struct LayerNormAcc<double> {
  using type = double;
};

// The sum of v over the kGroup threads of a row (a warp, or the whole block), on every one of
// them. `scratch` holds a value per warp; the whole block must call this when kGroup is the block.
template <int kGroup, typename A>
__device__ A row_sum(A v, A* scratch) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (kGroup == kWarp) return v;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  __syncthreads();  // the previous call's readers are done with scratch
  if (threadIdx.x % kWarp == 0) scratch[warp] = v;
  __syncthreads();
  A total = 0;
  for (int w = 0; w < kBlockThreads / kWarp; ++w) total += scratch[w];
  return total;
}

// Where a group's row loop starts and how far it strides, and its threads' lane.
template <int kGroup>
struct RowGroup {
  std::int64_t first, stride;
  int lane;
  __device__ RowGroup() {
    constexpr int groups = kBlockThreads / kGroup;
    first = static_cast<std::int64_t>(blockIdx.x) * groups + threadIdx.x / kGroup;
    stride = static_cast<std::int64_t>(gridDim.x) * groups;
    lane = static_cast<int>(threadIdx.x % kGroup);
  }
};

template <typename T, int kGroup>
__global__ void layer_norm_forward_kernel(const T* x, const T* gamma, const T* beta, std::int64_t rows,
                                          std::int64_t n, double eps, T* y, T* mean, T* rstd) {
  using A = typename LayerNormAcc<T>::type;
  __shared__ A scratch[kBlockThreads / kWarp];
  const RowGroup<kGroup> group;
  // The bound is the same for every thread of a group: all of them take part in each row_sum.
  for (std::int64_t r = group.first; r < rows; r += group.stride) {
    const T* xr = x + r * n;
    A s = 0;
    for (std::int64_t j = group.lane; j < n; j += kGroup) s += static_cast<A>(xr[j]);
    const A mu = row_sum<kGroup>(s, scratch) / static_cast<A>(n);
    A q = 0;
    for (std::int64_t j = group.lane; j < n; j += kGroup) {
      const A d = static_cast<A>(xr[j]) - mu;
      q += d * d;
    }
    const A rs = A(1) / sqrt(row_sum<kGroup>(q, scratch) / static_cast<A>(n) + static_cast<A>(eps));
    if (group.lane == 0) {
      mean[r] = static_cast<T>(mu);
      rstd[r] = static_cast<T>(rs);
    }
    T* yr = y + r * n;
    for (std::int64_t j = group.lane; j < n; j += kGroup)
      yr[j] = static_cast<T>((static_cast<A>(xr[j]) - mu) * rs) * gamma[j] + beta[j];
  }
}

// gx = rstd * (g - mean_n(g) - xhat * mean_n(g * xhat)) per row, g = gy * gamma.
template <typename T, int kGroup>
__global__ void layer_norm_grad_x_kernel(const T* gy, const T* x, const T* gamma, const T* mean, const T* rstd,
                                         std::int64_t rows, std::int64_t n, T* gx) {
  using A = typename LayerNormAcc<T>::type;
  __shared__ A scratch[kBlockThreads / kWarp];
  const RowGroup<kGroup> group;
  for (std::int64_t r = group.first; r < rows; r += group.stride) {
    const T* xr = x + r * n;
    const T* gyr = gy + r * n;
    const A mu = static_cast<A>(mean[r]), rs = static_cast<A>(rstd[r]);
    A sum_g = 0, sum_gxhat = 0;
    for (std::int64_t j = group.lane; j < n; j += kGroup) {
      const A g = static_cast<A>(gyr[j]) * static_cast<A>(gamma[j]);
      sum_g += g;
      sum_gxhat += g * ((static_cast<A>(xr[j]) - mu) * rs);
    }
    const A mean_g = row_sum<kGroup>(sum_g, scratch) / static_cast<A>(n);
    const A mean_gxhat = row_sum<kGroup>(sum_gxhat, scratch) / static_cast<A>(n);
    T* gxr = gx + r * n;
    for (std::int64_t j = group.lane; j < n; j += kGroup) {
      const A g = static_cast<A>(gyr[j]) * static_cast<A>(gamma[j]);
      const A xhat = (static_cast<A>(xr[j]) - mu) * rs;
      gxr[j] = static_cast<T>(rs * (g - mean_g - xhat * mean_gxhat));
    }
  }
}

// The column sums are cut into chunks of rows: at most kParamMaxChunks (the second pass adds
// that many partials per column), at least kParamMinChunkRows rows each. Shape-only, like
// cuda/channel_index.h's plan, so that the order of additions is the same on every GPU.
constexpr std::int64_t kParamMaxChunks = 1024;
constexpr std::int64_t kParamMinChunkRows = 64;
constexpr int kParamRowLanes = kBlockThreads / kWarp;  // rows a block reads at once

struct RowChunks {
  std::int64_t chunks, chunk_rows;
};

RowChunks plan_row_chunks(std::int64_t rows) {
  std::int64_t chunk_rows = std::max(kParamMinChunkRows, (rows + kParamMaxChunks - 1) / kParamMaxChunks);
  return {(rows + chunk_rows - 1) / chunk_rows, chunk_rows};
}

// Block (column tile blockIdx.x, chunk blockIdx.y) of kWarp x kParamRowLanes threads: column
// j = tile * kWarp + threadIdx.x % kWarp (coalesced), rows strided by kParamRowLanes. Writes
// partials[(chunk * 2 + {0, 1}) * n + j] = the chunk's sum of gy * xhat and of gy.
template <typename T>
__global__ void layer_norm_param_partials_kernel(const T* gy, const T* x, const T* mean, const T* rstd,
                                                 std::int64_t rows, std::int64_t n, std::int64_t chunk_rows,
                                                 double* partials) {
  using A = typename LayerNormAcc<T>::type;
  __shared__ A s_gamma[kParamRowLanes][kWarp + 1];  // +1: no bank conflicts on the column reads
  __shared__ A s_beta[kParamRowLanes][kWarp + 1];
  const int tx = static_cast<int>(threadIdx.x) % kWarp, ty = static_cast<int>(threadIdx.x) / kWarp;
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * kWarp + tx;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * chunk_rows;
  const std::int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
  A a_gamma = 0, a_beta = 0;
  if (j < n) {
    for (std::int64_t r = begin + ty; r < end; r += kParamRowLanes) {
      const A g = static_cast<A>(gy[r * n + j]);
      a_gamma += g * ((static_cast<A>(x[r * n + j]) - static_cast<A>(mean[r])) * static_cast<A>(rstd[r]));
      a_beta += g;
    }
  }
  s_gamma[ty][tx] = a_gamma;
  s_beta[ty][tx] = a_beta;
  __syncthreads();
  if (ty == 0 && j < n) {
    double sum_gamma = 0, sum_beta = 0;
    for (int k = 0; k < kParamRowLanes; ++k) {
      sum_gamma += static_cast<double>(s_gamma[k][tx]);
      sum_beta += static_cast<double>(s_beta[k][tx]);
    }
    partials[(2 * static_cast<std::int64_t>(blockIdx.y)) * n + j] = sum_gamma;
    partials[(2 * static_cast<std::int64_t>(blockIdx.y) + 1) * n + j] = sum_beta;
  }
}

template <typename T>
__global__ void layer_norm_param_grads_kernel(const double* partials, std::int64_t chunks, std::int64_t n,
                                              T* ggamma, T* gbeta) {
  TANDEM_GRID_STRIDE_LOOP(j, n) {
    double sum_gamma = 0, sum_beta = 0;
    for (std::int64_t c = 0; c < chunks; ++c) {
      sum_gamma += partials[2 * c * n + j];
      sum_beta += partials[(2 * c + 1) * n + j];
    }
    ggamma[j] = static_cast<T>(sum_gamma);
    gbeta[j] = static_cast<T>(sum_beta);
  }
}

// Launches a row kernel (forward or grad_x) with a warp per row for short rows, a block per
// row for long ones.
template <typename WarpKernel, typename BlockKernel, typename... Args>
void launch_rows(const char* name, const DeviceContext& ctx, std::int64_t rows, std::int64_t n,
                 WarpKernel warp_kernel, BlockKernel block_kernel, Args... args) {
  const std::int64_t max_grid = 65535LL * 8;
  if (n <= kWarpRowMaxFeatures) {
    const auto grid = static_cast<unsigned>(std::min((rows + kRowsPerBlock - 1) / kRowsPerBlock, max_grid));
    warp_kernel<<<grid, kBlockThreads, 0, ctx.stream>>>(args...);
  } else {
    const auto grid = static_cast<unsigned>(std::min(rows, max_grid));
    block_kernel<<<grid, kBlockThreads, 0, ctx.stream>>>(args...);
  }
  TANDEM_CUDA_CHECK_LAUNCH(name);
}

}  // namespace

void CudaBackend::layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, std::int64_t rows,
                                     std::int64_t n, double eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  if (rows <= 0 || n <= 0) return;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "layer_norm_forward", [&] {
    using T = scalar_t;
    DeviceContext& ctx = context_of(x, "layer_norm_forward");
    launch_rows("layer_norm_forward", ctx, rows, n, layer_norm_forward_kernel<T, kWarp>,
                layer_norm_forward_kernel<T, kBlockThreads>, x.data<T>(), gamma.data<T>(), beta.data<T>(), rows, n,
                eps, y.data<T>(), mean.data<T>(), rstd.data<T>());
  });
}

void CudaBackend::layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                      const Tensor& rstd, std::int64_t rows, std::int64_t n, Tensor& gx,
                                      Tensor& ggamma, Tensor& gbeta) {
  if (rows <= 0 || n <= 0) return;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "layer_norm_backward", [&] {
    using T = scalar_t;
    DeviceContext& ctx = context_of(x, "layer_norm_backward");
    launch_rows("layer_norm_backward (gx)", ctx, rows, n, layer_norm_grad_x_kernel<T, kWarp>,
                layer_norm_grad_x_kernel<T, kBlockThreads>, gy.data<T>(), x.data<T>(), gamma.data<T>(),
                mean.data<T>(), rstd.data<T>(), rows, n, gx.data<T>());
    const RowChunks plan = plan_row_chunks(rows);
    DeviceBuffer partials(static_cast<std::size_t>(2 * plan.chunks * n) * sizeof(double), ctx.index);
    const dim3 grid(static_cast<unsigned>((n + kWarp - 1) / kWarp), static_cast<unsigned>(plan.chunks));
    layer_norm_param_partials_kernel<T><<<grid, kBlockThreads, 0, ctx.stream>>>(
        gy.data<T>(), x.data<T>(), mean.data<T>(), rstd.data<T>(), rows, n, plan.chunk_rows, partials.as<double>());
    TANDEM_CUDA_CHECK_LAUNCH("layer_norm_backward (ggamma, gbeta partials)");
    launch_elementwise("layer_norm_backward (ggamma, gbeta)", ctx, n, layer_norm_param_grads_kernel<T>,
                       static_cast<const double*>(partials.as<double>()), plan.chunks, n, ggamma.data<T>(),
                       gbeta.data<T>());
  });
}

}  // namespace cuda
}  // namespace tandem
