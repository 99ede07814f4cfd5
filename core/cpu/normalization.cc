// Normalisation kernels for the CPU backend.
//
// Batch normalisation, over x viewed as [outer, channels, inner]: per-channel sums accumulate in
// double. With inner == 1 ([N, C] input) a channel is a strided column, so threads split the
// channels into column blocks and sweep the rows; otherwise each (outer, channel) pair is a
// contiguous run of `inner` elements and threads split channels.
//
// Layer normalisation, over x viewed as [rows, n]: threads split the rows, and every pass over
// a row is a contiguous, vectorised loop. The row statistics accumulate in double.
#include <algorithm>
#include <cmath>
#include <vector>

#include <Eigen/Core>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/parallel.h"
#include "core/deterministic.h"
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

namespace {

// The sums below are written as `omp simd` reductions: GCC vectorises a floating-point reduction
// only when allowed to reorder it, which that pragma does for this loop alone (one partial sum per
// vector lane, combined in an order fixed at compile time, so results are reproducible).
// Accumulating f32 in double this way costs no more than in float; Eigen's cast<double>() of an f32
// row, by contrast, ran element by element, slower than an f64 row (docs/performance.md, "Costs
// outside the products").

template <typename T>
double row_sum(const T* x, std::int64_t n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (std::int64_t j = 0; j < n; ++j) s += static_cast<double>(x[j]);
  return s;
}

template <typename T>
double row_centred_squares(const T* x, std::int64_t n, double mu) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (std::int64_t j = 0; j < n; ++j) {
    const double d = static_cast<double>(x[j]) - mu;
    s += d * d;
  }
  return s;
}

// gx = rstd * (g - mean_n(g) - xhat * mean_n(g * xhat)) for rows [begin, end), adding each row's
// gy * xhat and gy into the running sums sum_gyxhat and sum_gy ([n] each, double). A function of
// its own because the `omp simd` pragma cannot sit inside TANDEM_DISPATCH_FLOAT's argument.
template <typename T>
void layer_norm_backward_rows(const T* gy, const T* x, const T* gamma, const T* mean, const T* rstd,
                              std::int64_t begin, std::int64_t end, std::int64_t n, T* gx, double* sum_gyxhat,
                              double* sum_gy) {
  const double count = static_cast<double>(n);
  std::vector<T> xhat_buffer(static_cast<std::size_t>(n)), g_buffer(static_cast<std::size_t>(n));  // reused
  T* xhat = xhat_buffer.data();
  T* g = g_buffer.data();
  for (std::int64_t r = begin; r < end; ++r) {
    const T* xr = x + r * n;
    const T* gyr = gy + r * n;
    T* gxr = gx + r * n;
    const T mu = mean[r], rs = rstd[r];
    double sum_g = 0, sum_gxhat = 0;
#pragma omp simd reduction(+ : sum_g, sum_gxhat)
    for (std::int64_t j = 0; j < n; ++j) {
      xhat[j] = (xr[j] - mu) * rs;
      g[j] = gyr[j] * gamma[j];
      sum_g += static_cast<double>(g[j]);
      sum_gxhat += static_cast<double>(g[j]) * static_cast<double>(xhat[j]);
    }
    const T mean_g = static_cast<T>(sum_g / count), mean_gxhat = static_cast<T>(sum_gxhat / count);
    for (std::int64_t j = 0; j < n; ++j) {
      gxr[j] = rs * (g[j] - mean_g - xhat[j] * mean_gxhat);
      sum_gyxhat[j] += static_cast<double>(gyr[j] * xhat[j]);
      sum_gy[j] += static_cast<double>(gyr[j]);
    }
  }
}

}  // namespace

void CpuBackend::layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, std::int64_t rows,
                                    std::int64_t n, double eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  if (rows <= 0 || n <= 0) return;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "layer_norm_forward", [&] {
    using T = scalar_t;
    const T* px = x.data<T>();
    const T* pg = gamma.data<T>();
    const T* pb = beta.data<T>();
    T* py = y.data<T>();
    T* pm = mean.data<T>();
    T* pr = rstd.data<T>();
    const double count = static_cast<double>(n);
    cpu::parallel_for(rows, 4 * n, cpu::kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const T* xr = px + r * n;
        T* yr = py + r * n;
        // Two passes (mean, then squared deviations from it): no cancellation for rows far from
        // 0. Dividing the sum (not multiplying by 1 / n) makes the mean of a constant f32 row
        // exact (its sum is, in double), hence its variance exactly 0 and y = beta.
        const double mu = row_sum(xr, n) / count;
        const double rs = 1.0 / std::sqrt(row_centred_squares(xr, n, mu) / count + eps);
        pm[r] = static_cast<T>(mu);
        pr[r] = static_cast<T>(rs);
        // Centred in double too: an f32 mean would shift a row of large offset and small spread.
        for (std::int64_t j = 0; j < n; ++j)
          yr[j] = static_cast<T>((static_cast<double>(xr[j]) - mu) * rs) * pg[j] + pb[j];
      }
    });
  });
}

// ggamma and gbeta sum over the rows, so each thread adds its rows into partial sums of its own
// (in double) and those are added in thread order at the end: deterministic for a fixed thread
// count (OMP_NUM_THREADS), though not bitwise across different counts. Deterministic mode
// (core/deterministic.h) takes fixed blocks of rows instead of one chunk per thread: the same
// sums at any thread count.
void CpuBackend::layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                     const Tensor& rstd, std::int64_t rows, std::int64_t n, Tensor& gx,
                                     Tensor& ggamma, Tensor& gbeta) {
  if (n <= 0) return;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "layer_norm_backward", [&] {
    using T = scalar_t;
    constexpr std::int64_t kBlockRows = 64;
    const bool fixed_blocks = deterministic();
    const std::size_t chunks = static_cast<std::size_t>(fixed_blocks ? (rows + kBlockRows - 1) / kBlockRows
                                                                     : cpu::max_chunks());
    const std::size_t width = static_cast<std::size_t>(n);
    // Per chunk: n sums of gy * xhat (ggamma), then n sums of gy (gbeta).
    std::vector<double> partials(chunks * 2 * width, 0.0);
    auto run = [&](std::int64_t begin, std::int64_t end, std::size_t chunk) {
      double* part = partials.data() + chunk * 2 * width;
      layer_norm_backward_rows(gy.data<T>(), x.data<T>(), gamma.data<T>(), mean.data<T>(), rstd.data<T>(), begin,
                               end, n, gx.data<T>(), part, part + width);
    };
    if (fixed_blocks) {
      cpu::parallel_for(static_cast<std::int64_t>(chunks), 6 * n * kBlockRows, cpu::kElementwiseGrain,
                        [&](std::int64_t first, std::int64_t last) {
                          for (std::int64_t block = first; block < last; ++block)
                            run(block * kBlockRows, std::min(rows, (block + 1) * kBlockRows),
                                static_cast<std::size_t>(block));
                        });
    } else {
      cpu::parallel_chunks(rows, 6 * n, cpu::kElementwiseGrain,
                           [&](std::int64_t begin, std::int64_t end, int chunk) {
                             run(begin, end, static_cast<std::size_t>(chunk));
                           });
    }
    T* pgg = ggamma.data<T>();
    T* pgb = gbeta.data<T>();
    for (std::size_t j = 0; j < width; ++j) {
      double a = 0, b = 0;
      for (std::size_t c = 0; c < chunks; ++c) {
        a += partials[c * 2 * width + j];
        b += partials[c * 2 * width + width + j];
      }
      pgg[j] = static_cast<T>(a);
      pgb[j] = static_cast<T>(b);
    }
  });
}

}  // namespace tandem
