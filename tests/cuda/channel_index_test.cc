// The index arithmetic of the CUDA batch-normalisation kernels (cuda/channel_index.h) run on
// the host:
//  - ChannelWalk yields the flat offset of every position it steps to;
//  - the kernels' split of each channel into chunks (plan_channel_chunks) and their walk of a
//    chunk (thread t of kBlockThreads starts at begin + t and steps by kBlockThreads) visit
//    every element of the channel exactly once, and no element of another channel;
//  - channel_of agrees with the CPU backend's channel_affine about which channel an element is in;
//  - the whole reduction, emulated in the kernels' order (per-thread runs, shared-memory tree,
//    chunks in order), gives the CPU's statistics: exactly where every sum is exact, and to
//    rounding (double accumulation) otherwise.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/ops/normalization.h"
#include "core/tensor.h"
#include "cuda/channel_index.h"

using namespace tandem;
using namespace tandem::cuda;

namespace {

using I = std::int64_t;

// kBlockThreads of cuda/kernel_util.cuh (a CUDA header): the walk's step and the tree's width.
constexpr I kThreads = 256;

// The flat offset of position j of channel c in [outer, channels, inner].
I reference_offset(I j, I c, I channels, I inner) { return ((j / inner) * channels + c) * inner + j % inner; }

// The kernels' per-(channel, chunk) loops: calls visit(c, j, offset) for every position j that
// thread t of the block would reach, in that thread's order.
template <typename Visit>
void walk_like_the_kernel(I channels, I inner, I count, const ChannelChunks& plan, I threads, const Visit& visit) {
  for (I task = 0; task < channels * plan.chunks; ++task) {
    const I c = task / plan.chunks;
    const I begin = (task - c * plan.chunks) * plan.chunk_size;
    const I end = begin + plan.chunk_size < count ? begin + plan.chunk_size : count;
    for (I t = 0; t < threads; ++t) {
      if (begin + t >= end) continue;
      ChannelWalk walk(c, channels, inner, begin + t, threads);
      for (I j = begin + t; j < end; j += threads) {
        visit(c, task, t, j, walk.offset());
        walk.advance();
      }
    }
  }
}

// partials[2 * task + k] as channel_partial_sums_kernel computes them, then per channel the sum
// of its chunks in chunk order (add_chunks): term(c, offset, a0, a1) adds one element's terms.
template <typename Term>
void kernel_channel_sums(I channels, I inner, I count, const Term& term, std::vector<double>& sum0,
                         std::vector<double>& sum1) {
  const ChannelChunks plan = plan_channel_chunks(channels, count);
  const I tasks = channels * plan.chunks;
  std::vector<double> partials(static_cast<std::size_t>(2 * tasks));
  std::vector<double> s0(kThreads), s1(kThreads);
  for (I task = 0; task < tasks; ++task) {
    const I c = task / plan.chunks;
    const I begin = (task - c * plan.chunks) * plan.chunk_size;
    const I end = begin + plan.chunk_size < count ? begin + plan.chunk_size : count;
    for (I t = 0; t < kThreads; ++t) {
      double a0 = 0, a1 = 0;
      if (begin + t < end) {
        ChannelWalk walk(c, channels, inner, begin + t, kThreads);
        for (I j = begin + t; j < end; j += kThreads) {
          term(c, walk.offset(), a0, a1);
          walk.advance();
        }
      }
      s0[t] = a0;
      s1[t] = a1;
    }
    for (I half = kThreads / 2; half > 0; half /= 2) {
      for (I t = 0; t < half; ++t) {
        s0[t] += s0[t + half];
        s1[t] += s1[t + half];
      }
    }
    partials[2 * task] = s0[0];
    partials[2 * task + 1] = s1[0];
  }
  sum0.assign(static_cast<std::size_t>(channels), 0.0);
  sum1.assign(static_cast<std::size_t>(channels), 0.0);
  for (I c = 0; c < channels; ++c) {
    for (I k = 0; k < plan.chunks; ++k) {
      sum0[c] += partials[2 * (c * plan.chunks + k)];
      sum1[c] += partials[2 * (c * plan.chunks + k) + 1];
    }
  }
}

struct Dims {
  I outer, channels, inner;
};

// The statistics of batch_norm_stats (two passes, as the kernels), from the emulated sums.
template <typename T>
void kernel_batch_norm_stats(const std::vector<T>& x, const Dims& d, std::vector<T>& mean, std::vector<T>& var) {
  const I count = d.outer * d.inner;
  std::vector<double> sums, unused, centred;
  kernel_channel_sums(d.channels, d.inner, count,
                      [&](I, I i, double& a0, double&) { a0 += static_cast<double>(x[i]); }, sums, unused);
  std::vector<double> mean_d(sums.size());
  for (std::size_t c = 0; c < sums.size(); ++c) mean_d[c] = count > 0 ? sums[c] / static_cast<double>(count) : 0.0;
  kernel_channel_sums(d.channels, d.inner, count,
                      [&](I c, I i, double& a0, double&) {
                        const double e = static_cast<double>(x[i]) - mean_d[c];
                        a0 += e * e;
                      },
                      centred, unused);
  mean.resize(sums.size());
  var.resize(sums.size());
  for (std::size_t c = 0; c < sums.size(); ++c) {
    mean[c] = static_cast<T>(mean_d[c]);
    var[c] = static_cast<T>(count > 0 ? centred[c] / static_cast<double>(count) : 0.0);
  }
}

}  // namespace

TEST_CASE("ChannelWalk steps through the flat offsets of its channel") {
  std::mt19937_64 engine(11);
  auto integer = [&](I lo, I hi) { return std::uniform_int_distribution<I>(lo, hi)(engine); };
  for (int trial = 0; trial < 3000; ++trial) {
    const I channels = integer(1, 7);
    const I inner = trial % 5 == 0 ? 1 : integer(1, 40);
    const I c = integer(0, channels - 1);
    const I start = integer(0, 500);
    // Steps smaller than, equal to, multiples of and larger than inner.
    I step;
    switch (trial % 4) {
      case 0: step = integer(1, inner); break;
      case 1: step = inner * integer(1, 4); break;
      case 2: step = integer(inner, 3 * inner + 5); break;
      default: step = kThreads; break;
    }
    ChannelWalk walk(c, channels, inner, start, step);
    for (I k = 0; k < 60; ++k) {
      const I j = start + k * step;
      INFO("channels " << channels << ", inner " << inner << ", channel " << c << ", start " << start << ", step "
                       << step << ", position " << j);
      REQUIRE(walk.offset() == reference_offset(j, c, channels, inner));
      REQUIRE(walk.inner_index >= 0);
      REQUIRE(walk.inner_index < inner);
      walk.advance();
    }
  }
  // Positions past 2^32 (a channel of a tensor with more than 4G elements).
  const I channels = 3, inner = 1000003, c = 2;
  const I start = (I(1) << 33) + 12345, step = kThreads;
  ChannelWalk walk(c, channels, inner, start, step);
  for (I k = 0; k < 100000; ++k) {
    if (walk.offset() != reference_offset(start + k * step, c, channels, inner)) FAIL("position " << start + k * step);
    walk.advance();
  }
}

TEST_CASE("plan_channel_chunks splits each channel into non-empty chunks that cover it") {
  CHECK(plan_channel_chunks(0, 100).chunks == 0);
  CHECK(plan_channel_chunks(5, 0).chunks == 0);
  CHECK(plan_channel_chunks(-1, 10).chunks == 0);
  std::vector<I> channel_counts{1, 2, 3, 7, 16, 64, 100, 1000, 1023, 1024, 1025, 5000};
  std::vector<I> counts{1, 2, 255, 256, 257, 4095, 4096, 4097, 8191, 8192, 8193, 100000, 1 << 20, 12345678,
                        I(1) << 33, I(1) << 40};
  for (I channels : channel_counts) {
    for (I count : counts) {
      const ChannelChunks plan = plan_channel_chunks(channels, count);
      INFO("channels " << channels << ", count " << count << ": " << plan.chunks << " chunks of "
                       << plan.chunk_size);
      REQUIRE(plan.chunks >= 1);
      REQUIRE(plan.chunk_size >= 1);
      REQUIRE(plan.chunks * plan.chunk_size >= count);           // covers the channel
      REQUIRE((plan.chunks - 1) * plan.chunk_size < count);      // no empty chunk
      REQUIRE(plan.chunk_size >= std::min(count, kChannelMinChunk));  // not too short
      // About kChannelTargetBlocks blocks, never many more.
      REQUIRE(channels * plan.chunks <= std::max<I>(kChannelTargetBlocks + channels - 1, channels));
      // The split depends on the shape only: the same again.
      const ChannelChunks again = plan_channel_chunks(channels, count);
      REQUIRE(again.chunks == plan.chunks);
      REQUIRE(again.chunk_size == plan.chunk_size);
    }
  }
}

TEST_CASE("the kernels' chunked walk visits every element of its channel once") {
  // Shapes with one and with several chunks per channel, inner 1 ([N, C]) and inner > 1.
  const std::vector<Dims> shapes{{1, 1, 1},    {3, 2, 1},    {1000, 3, 1}, {2, 5, 7},       {4, 3, 300},
                                 {9000, 1, 1}, {1, 2, 9000}, {37, 4, 611}, {100, 16, 121},  {20000, 2, 1},
                                 {3, 1, 50000}, {5, 700, 3}, {257, 1, 257}, {0, 4, 5},      {4, 0, 5}};
  for (const Dims& d : shapes) {
    const I count = d.outer * d.inner, n = d.outer * d.channels * d.inner;
    const ChannelChunks plan = plan_channel_chunks(d.channels, count);
    INFO("[" << d.outer << ", " << d.channels << ", " << d.inner << "]: " << plan.chunks << " chunks of "
             << plan.chunk_size);
    for (I threads : {kThreads, I(1), I(3), I(1024)}) {
      INFO("step " << threads);
      std::vector<int> visits(static_cast<std::size_t>(n), 0);
      I wrong = 0;
      walk_like_the_kernel(d.channels, d.inner, count, plan, threads, [&](I c, I, I, I j, I offset) {
        if (offset != reference_offset(j, c, d.channels, d.inner) || offset < 0 || offset >= n) {
          ++wrong;
          return;
        }
        ++visits[offset];
      });
      REQUIRE(wrong == 0);
      I not_once = 0;
      for (int v : visits) not_once += v != 1;
      REQUIRE(not_once == 0);
    }
  }
}

TEST_CASE("channel_of agrees with the CPU backend's channel_affine") {
  const std::vector<Dims> shapes{{1, 1, 1}, {3, 4, 1}, {2, 3, 5}, {5, 1, 7}, {4, 6, 33}, {1, 9, 2}, {7, 2, 64}};
  for (const Dims& d : shapes) {
    const I n = d.outer * d.channels * d.inner;
    INFO("[" << d.outer << ", " << d.channels << ", " << d.inner << "]");
    // x = 0, scale = 1, shift[c] = c: the CPU writes each element's channel.
    std::vector<double> shift(static_cast<std::size_t>(d.channels));
    for (I c = 0; c < d.channels; ++c) shift[c] = static_cast<double>(c);
    const Tensor out = tandem::channel_affine(zeros({d.outer, d.channels, d.inner}, DType::f64),
                                              ones({d.channels}, DType::f64), from_vector(shift, {d.channels}));
    const std::vector<double> channel = out.to_vector<double>();
    for (I i = 0; i < n; ++i) {
      INFO("element " << i);
      REQUIRE(channel_of<I>(i, d.channels, d.inner) == static_cast<I>(channel[i]));
      REQUIRE(channel_of<std::uint32_t>(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(d.channels),
                                        static_cast<std::uint32_t>(d.inner)) == static_cast<std::uint32_t>(channel[i]));
    }
  }
  // 32-bit division up to the largest index the launcher lets it see (n <= INT32_MAX).
  const std::uint32_t big = static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::max() - 1);
  for (std::uint32_t channels : {1u, 3u, 1000u}) {
    for (std::uint32_t inner : {1u, 7u, 65536u}) {
      for (std::uint32_t flat = big - 5000; flat <= big; ++flat)
        REQUIRE(channel_of<std::uint32_t>(flat, channels, inner) ==
                static_cast<std::uint32_t>(channel_of<I>(flat, channels, inner)));
    }
  }
}

TEST_CASE("the emulated reduction gives the CPU's batch-norm statistics and sums") {
  std::mt19937_64 engine(3);
  const std::vector<Dims> shapes{{1, 1, 1},   {8, 3, 1},  {16, 4, 8},    {2, 2, 4096}, {8192, 2, 1},
                                 {64, 5, 64}, {3, 7, 11}, {1000, 3, 13}, {5, 1, 9001}, {0, 3, 4}};
  for (const Dims& d : shapes) {
    const I n = d.outer * d.channels * d.inner, count = d.outer * d.inner;
    const Shape shape{d.outer, d.channels, d.inner};
    // Integer data: every sum is exact in double, in any order; with a power-of-two count the
    // mean and the deviations are exact too. Otherwise only rounding may differ.
    const bool power_of_two = count > 0 && (count & (count - 1)) == 0;
    for (bool integers : {true, false}) {
      INFO("[" << d.outer << ", " << d.channels << ", " << d.inner << "], " << (integers ? "integers" : "reals"));
      const bool exact = integers && (power_of_two || count == 0);
      std::vector<float> x(static_cast<std::size_t>(n)), gy(static_cast<std::size_t>(n));
      for (I i = 0; i < n; ++i) {
        if (integers) {
          x[i] = static_cast<float>(std::uniform_int_distribution<int>(-50, 50)(engine)) + 1000;
          gy[i] = static_cast<float>(std::uniform_int_distribution<int>(-8, 8)(engine));
        } else {
          x[i] = std::normal_distribution<float>(3, 2)(engine);
          gy[i] = std::normal_distribution<float>(0, 1)(engine);
        }
      }
      const Tensor xt = from_vector(x, shape), gyt = from_vector(gy, shape);

      const auto [mean, var] = batch_norm_statistics(xt);
      std::vector<float> kmean, kvar;
      kernel_batch_norm_stats(x, d, kmean, kvar);
      const std::vector<float> cmean = mean.to_vector<float>(), cvar = var.to_vector<float>();
      for (I c = 0; c < d.channels; ++c) {
        INFO("channel " << c << ": CPU mean " << cmean[c] << " var " << cvar[c] << ", kernels' mean " << kmean[c]
                        << " var " << kvar[c]);
        if (exact) {
          CHECK(kmean[c] == cmean[c]);
          CHECK(kvar[c] == cvar[c]);
        } else {
          // Sums in double, rounded to float once: at most an ulp of float apart.
          CHECK(kmean[c] == Approx(cmean[c]).epsilon(1e-6).margin(1e-6));
          CHECK(kvar[c] == Approx(cvar[c]).epsilon(1e-6).margin(1e-6));
        }
      }

      const auto [sum_gy, sum_gy_xmu] = tandem::batch_norm_backward_sums(gyt, xt, mean);
      const std::vector<float> cs0 = sum_gy.to_vector<float>(), cs1 = sum_gy_xmu.to_vector<float>();
      std::vector<double> k0, k1;
      kernel_channel_sums(d.channels, d.inner, count,
                          [&](I c, I i, double& a0, double& a1) {
                            const double g = static_cast<double>(gy[i]);
                            a0 += g;
                            a1 += g * (static_cast<double>(x[i]) - static_cast<double>(cmean[c]));
                          },
                          k0, k1);
      for (I c = 0; c < d.channels; ++c) {
        INFO("channel " << c << ": CPU " << cs0[c] << ", " << cs1[c] << "; kernels' " << k0[c] << ", " << k1[c]);
        if (integers) {
          // gy, x - mean (two nearby floats) and their product are exact in double, and so are
          // the sums of such terms: equal in any order.
          CHECK(static_cast<float>(k0[c]) == cs0[c]);
          CHECK(static_cast<float>(k1[c]) == cs1[c]);
        } else {
          CHECK(static_cast<float>(k0[c]) == Approx(cs0[c]).epsilon(1e-6).margin(1e-4));
          CHECK(static_cast<float>(k1[c]) == Approx(cs1[c]).epsilon(1e-6).margin(1e-4));
        }
      }
    }
  }
}
