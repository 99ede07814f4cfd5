// How evenly ring attention spreads causal attention's work over the ranks of a context-parallel
// group: for each rank, the fused attention calls ring attention makes on it over the R ring steps
// (functions::ring_attention_blocks: its query runs against every rank's key runs, blocks the
// causal mask hides entirely left out), forward and backward, timed here one rank after another
// on one thread, with nothing else running: the compute each rank does, without the messages.
// One line per layout and rank count, with every rank's median time and max / min:
//
//   OMP_NUM_THREADS=1 bazel run -c opt //bench:context_parallel_balance_bench
//   name=tandem.cp.balance.<contiguous|balanced>.r<R> T=16384 heads=4 d=64 rank_ms=a,b,c,d max_over_min=..
//
// Environment: BENCH_T (default 16384), BENCH_RANKS (default "2 4"), BENCH_SCALE.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "comm/context_parallel/ring_attention.h"
#include "core/ops.h"
#include "core/ops/attention.h"

using namespace tandem;

namespace {

std::vector<int> ints_from_env(const char* name, const std::vector<int>& fallback) {
  const char* text = std::getenv(name);
  if (!text) return fallback;
  std::vector<int> out;
  std::istringstream in(text);
  for (int x; in >> x;) out.push_back(x);
  return out.empty() ? fallback : out;
}

}  // namespace

int main() {
  const std::int64_t T = ints_from_env("BENCH_T", {16384})[0], H = 4, d = 64;
  Generator generator(1);
  const Tensor q = rand_uniform({1, H, T, d}, generator, -1, 1, DType::f32);
  const Tensor k = rand_uniform({1, H, T, d}, generator, -1, 1, DType::f32);
  const Tensor v = rand_uniform({1, H, T, d}, generator, -1, 1, DType::f32);
  const Tensor gout = rand_uniform({1, H, T, d}, generator, -1, 1, DType::f32);
  const double scale = 0.125;
  AttentionMask causal;
  causal.causal = true;
  for (const int R : ints_from_env("BENCH_RANKS", {2, 4}))
    for (const std::string name : {"contiguous", "balanced"}) {
      const SequenceLayout layout =
          name == "balanced" ? SequenceLayout::balanced(T, R) : SequenceLayout::contiguous(T, R);
      std::vector<double> per_rank;
      for (int r = 0; r < R; ++r) {
        // This rank's blocks: (query rows, key rows, the pair's mask), as ring attention forms them.
        struct Block {
          Tensor q, k, v, gout;
          AttentionMask mask;
        };
        std::vector<Block> blocks;
        for (int step = 0; step < R; ++step)
          for (const auto& [qr, kr] : functions::ring_attention_blocks(layout, causal, r, step)) {
            Block b;
            b.q = slice(q, 2, qr.start, qr.start + qr.length);
            b.gout = slice(gout, 2, qr.start, qr.start + qr.length);
            b.k = slice(k, 2, kr.start, kr.start + kr.length);
            b.v = slice(v, 2, kr.start, kr.start + kr.length);
            b.mask.causal = true;
            b.mask.query_start = qr.start;
            b.mask.key_start = kr.start;
            blocks.push_back(b);
          }
        const bench::Stats s = bench::measure(1, bench::scaled(3), [&] {
          for (const Block& b : blocks) {
            const AttentionOutput out = fused_attention_forward(b.q, b.k, b.v, b.mask, scale);
            fused_attention_backward(b.q, b.k, b.v, out.out, out.lse, b.gout, b.mask, scale);
          }
        });
        per_rank.push_back(s.median_ms);
      }
      const auto [low, high] = std::minmax_element(per_rank.begin(), per_rank.end());
      std::ostringstream times;
      for (std::size_t r = 0; r < per_rank.size(); ++r) times << (r ? "," : "") << per_rank[r];
      std::printf("name=tandem.cp.balance.%s.r%d T=%lld heads=%lld d=%lld rank_ms=%s max_over_min=%.3f median_ms=%.3f\n",
                  name.c_str(), R, static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(d),
                  times.str().c_str(), *high / *low, *high);
      std::fflush(stdout);
    }
  return 0;
}
