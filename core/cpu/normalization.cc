// Batch-normalisation kernels for the CPU backend, over x viewed as [outer, channels, inner].
// Per-channel sums accumulate in double. With inner == 1 ([N, C] input) a channel is a strided
// column, so threads split the channels into column blocks and sweep the rows; otherwise each
// (outer, channel) pair is a contiguous run of `inner` elements and threads split channels.
#include <algorithm>
#include <vector>

#include <Eigen/Core>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/parallel.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tandem {

namespace {

constexpr std::int64_t kColumnBlock = 16;

// acc0[c] = sum of f0(c, x...), acc1[c] = sum of f1(c, x...) over outer and inner, where the
// element functor `accumulate(c, flat, a0, a1)` adds its terms for the element at `flat`.
template <typename Accumulate>
void channel_sums(std::int64_t outer, std::int64_t channels, std::int64_t inner, const Accumulate& accumulate,
                  std::vector<double>& acc0, std::vector<double>& acc1) {
  acc0.assign(static_cast<std::size_t>(channels), 0.0);
  acc1.assign(static_cast<std::size_t>(channels), 0.0);
  if (inner == 1) {
    const std::int64_t blocks = (channels + kColumnBlock - 1) / kColumnBlock;
    cpu::parallel_for(blocks, outer * kColumnBlock, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
      const std::int64_t c0 = b * kColumnBlock, c1 = std::min(channels, e * kColumnBlock);
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t c = c0; c < c1; ++c) accumulate(c, o * channels + c, acc0[c], acc1[c]);
    });
    return;
  }
  cpu::parallel_for(channels, outer * inner, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t c = b; c < e; ++c) {
      double a0 = 0, a1 = 0;
      for (std::int64_t o = 0; o < outer; ++o) {
        const std::int64_t base = (o * channels + c) * inner;
        for (std::int64_t k = 0; k < inner; ++k) accumulate(c, base + k, a0, a1);
      }
      acc0[c] = a0;
      acc1[c] = a1;
    }
  });
}

}  // namespace

void CpuBackend::batch_norm_stats(const Tensor& x, std::int64_t outer, std::int64_t channels, std::int64_t inner,
                                  Tensor& mean, Tensor& var) {
  if (channels == 0) return;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "batch_norm_stats", [&] {
    using T = scalar_t;
    const T* px = x.data<T>();
    const double count = static_cast<double>(outer * inner);
    std::vector<double> sums, unused, centred;
    // Two passes (mean, then squared deviations from it): no cancellation for data far from 0.
    channel_sums(outer, channels, inner,
                 [&](std::int64_t, std::int64_t i, double& a0, double&) { a0 += static_cast<double>(px[i]); }, sums,
                 unused);
    for (double& s : sums) s = count > 0 ? s / count : 0.0;
    channel_sums(outer, channels, inner,
                 [&](std::int64_t c, std::int64_t i, double& a0, double&) {
                   const double d = static_cast<double>(px[i]) - sums[c];
                   a0 += d * d;
                 },
                 centred, unused);
    T* pm = mean.data<T>();
    T* pv = var.data<T>();
    for (std::int64_t c = 0; c < channels; ++c) {
      pm[c] = static_cast<T>(sums[c]);
      pv[c] = static_cast<T>(count > 0 ? centred[c] / count : 0.0);
    }
  });
}

void CpuBackend::channel_affine(const Tensor& x, const Tensor& scale, const Tensor& z, const Tensor& zscale,
                                const Tensor& shift, std::int64_t outer, std::int64_t channels, std::int64_t inner,
                                Tensor& out) {
  if (out.numel() == 0) return;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "channel_affine", [&] {
    using T = scalar_t;
    using ConstMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
    using Map = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
    const T* px = x.data<T>();
    const T* ps = scale.data<T>();
    const T* pt = shift.data<T>();
    const bool has_z = z.defined();
    const T* pz = has_z ? z.data<T>() : nullptr;
    const T* pzs = has_z ? zscale.data<T>() : nullptr;
    T* po = out.data<T>();
    if (inner == 1) {
      // Rows of `channels` elements against the per-channel vectors.
      const ConstMap s(ps, channels), t(pt, channels);
      cpu::parallel_for(outer, channels * (has_z ? 2 : 1), cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t o = b; o < e; ++o) {
          Map y(po + o * channels, channels);
          const ConstMap xr(px + o * channels, channels);
          if (has_z) y = xr * s + ConstMap(pz + o * channels, channels) * ConstMap(pzs, channels) + t;
          else y = xr * s + t;
        }
      });
      return;
    }
    // Runs of `inner` elements, each with its channel's scalars.
    cpu::parallel_for(outer * channels, inner * (has_z ? 2 : 1), cpu::kElementwiseGrain,
                      [&](std::int64_t b, std::int64_t e) {
                        for (std::int64_t r = b; r < e; ++r) {
                          const std::int64_t c = r % channels;
                          Map y(po + r * inner, inner);
                          const ConstMap xr(px + r * inner, inner);
                          if (has_z) y = xr * ps[c] + ConstMap(pz + r * inner, inner) * pzs[c] + pt[c];
                          else y = xr * ps[c] + pt[c];
                        }
                      });
  });
}

void CpuBackend::batch_norm_backward_sums(const Tensor& gy, const Tensor& x, const Tensor& mean, std::int64_t outer,
                                          std::int64_t channels, std::int64_t inner, Tensor& sum_gy,
                                          Tensor& sum_gy_xmu) {
  if (channels == 0) return;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "batch_norm_backward_sums", [&] {
    using T = scalar_t;
    const T* pg = gy.data<T>();
    const T* px = x.data<T>();
    const T* pm = mean.data<T>();
    std::vector<double> s0, s1;
    channel_sums(outer, channels, inner,
                 [&](std::int64_t c, std::int64_t i, double& a0, double& a1) {
                   const double g = static_cast<double>(pg[i]);
                   a0 += g;
                   a1 += g * (static_cast<double>(px[i]) - static_cast<double>(pm[c]));
                 },
                 s0, s1);
    T* p0 = sum_gy.data<T>();
    T* p1 = sum_gy_xmu.data<T>();
    for (std::int64_t c = 0; c < channels; ++c) {
      p0[c] = static_cast<T>(s0[c]);
      p1[c] = static_cast<T>(s1[c]);
    }
  });
}

}  // namespace tandem
