// The FP32 multiply-adds a core really retires, measured: every thread runs independent chains of
// fused multiply-adds on the widest vectors the build targets, nothing else.
//
//   name=tandem.cpu.fma_peak.t{1,2} lib=tandem threads= isa= gflops= gflops_per_core=
//
// Why measured and not computed: the anchors' peak (../shared/bench/cpu_peak.cpp) is the nominal
// clock x FMA units x lanes, and the lanes are the ISA's. A core that runs AVX-512 on 256-bit
// units (AMD Zen 4) retires half of that: on the Zen 4 of 2026-11-30 cpu_peak said 166 GFLOP/s a
// core and this measures 116 (32 FP32 FLOP a cycle at 3.6 GHz, the boost clock /proc/cpuinfo
// does not show). scripts/bench.sh puts the products' rates beside it in its targets table: a
// step at 93% of what the core can retire has no more than 7% left to win.
//
// A round runs 2^24 steps of the ten chains on every thread (20-60 ms) and the best of 5 rounds
// counts (the peak, not a typical rate: the machine's noise only lowers it).
//
//   bazel run -c opt //bench:fma_peak_bench      BENCH_SCALE=0.3: 3 rounds
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "bench/bench_util.h"

namespace {

#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kLanes = 16;
constexpr const char* kIsa = "avx512";
inline Vec splat(float x) { return _mm512_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float first(Vec a) { return _mm512_cvtss_f32(a); }
#elif defined(__FMA__)
using Vec = __m256;
constexpr int kLanes = 8;
constexpr const char* kIsa = "avx2";
inline Vec splat(float x) { return _mm256_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float first(Vec a) { return _mm256_cvtss_f32(a); }
#elif !defined(__x86_64__) && !defined(__i386__)  // another architecture: GCC's vectors, a * b + c
// (contracted to its fused multiply-add where it has one), 4 lanes
using Vec = float __attribute__((vector_size(16)));
constexpr int kLanes = 4;
constexpr const char* kIsa = "generic";
inline Vec splat(float x) { return Vec{x, x, x, x}; }
inline Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }
inline float first(Vec a) { return a[0]; }
#else  // no FMA3 in the build (a processor from before 2013): a multiply and an add, SSE's width
using Vec = __m128;
constexpr int kLanes = 4;
constexpr const char* kIsa = "sse-mul-add";
inline Vec splat(float x) { return _mm_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm_add_ps(_mm_mul_ps(a, b), c); }
inline float first(Vec a) { return _mm_cvtss_f32(a); }
#endif

// An asm operand that keeps a vector in a vector register (x86: "v", AArch64: "w"; elsewhere in
// memory, which costs a store and a load a step: a floor, not the peak).
#if defined(__x86_64__) || defined(__i386__)
#define KEEP(v) "+v"(v)
#elif defined(__aarch64__)
#define KEEP(v) "+w"(v)
#else
#define KEEP(v) "+m"(v)
#endif

// Ten chains: enough to cover a 4-cycle FMA latency on two units with room to spare, few enough
// for the 16 vector registers of AVX2. The empty asm keeps the compiler from folding the chains.
float run_chains(long steps, float seed) {
  const Vec b = splat(0.999999f), c = splat(1e-7f);
  Vec a0 = splat(seed), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
  for (long i = 0; i < steps; ++i) {
    a0 = fma(a0, b, c), a1 = fma(a1, b, c), a2 = fma(a2, b, c), a3 = fma(a3, b, c), a4 = fma(a4, b, c);
    a5 = fma(a5, b, c), a6 = fma(a6, b, c), a7 = fma(a7, b, c), a8 = fma(a8, b, c), a9 = fma(a9, b, c);
    __asm__ volatile("" : KEEP(a0), KEEP(a1), KEEP(a2), KEEP(a3), KEEP(a4), KEEP(a5), KEEP(a6), KEEP(a7),
                     KEEP(a8), KEEP(a9));
  }
  return first(a0) + first(a5) + first(a9);
}
constexpr int kChains = 10;

// GFLOP/s of `threads` threads running the chains at once, the best of `rounds`, and that
// round's time (ms: the line's median_ms, which ../shared/bench/aggregate.sh picks runs by).
struct Peak {
  double gflops = 0, ms = 0;
};
Peak measure(int threads, long steps, int rounds) {
  Peak best;
  std::vector<float> sink(threads);
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::thread> workers;
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) workers.emplace_back([&, t] { sink[t] = run_chains(steps, 1.0f + t); });
    for (auto& w : workers) w.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double gflops = double(threads) * steps * kChains * kLanes * 2 / s / 1e9;
    if (gflops > best.gflops) best = {gflops, s * 1e3};
  }
  if (sink[0] == 12345.f) std::printf("#\n");  // uses the results
  return best;
}

}  // namespace

int main() {
  for (int threads : {1, 2}) {
    const Peak peak = measure(threads, 1L << 24, tandem::bench::scaled(5));
    std::printf("name=tandem.cpu.fma_peak.t%d lib=tandem threads=%d isa=%s lanes=%d median_ms=%.3f gflops=%.1f "
                "gflops_per_core=%.1f\n",
                threads, threads, kIsa, kLanes, peak.ms, peak.gflops, peak.gflops / threads);
    std::fflush(stdout);
  }
}
