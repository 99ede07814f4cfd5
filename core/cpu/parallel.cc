#include "core/cpu/parallel.h"

#include <strings.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu/measured_choice.h"
#include "core/error.h"
#include "core/kernel_choices.h"

namespace tandem {
namespace cpu {

namespace {

// The wake-up cost kElementwiseGrain was chosen for: a few microseconds, what a futex wake of a
// sleeping OpenMP thread costs on bare metal (and what a spinning team costs even less than).
constexpr double kGrainWakeMicros = 4.0;
constexpr std::int64_t kMaxGrainScale = 64;
// The scale without timing (TANDEM_KERNEL_TUNING=fixed): under OMP_WAIT_POLICY=PASSIVE a region
// wakes sleeping threads, many times the few microseconds the grains assume on the virtual machines
// tandem is developed on, and 8 lies within the scales measured there (docs/performance.md,
// "Threads"); otherwise the team spins between regions and a region starts in a few (1).
std::int64_t fixed_grain_scale() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  return policy != nullptr && strcasecmp(policy, "passive") == 0 ? 8 : 1;
}

// The median time of an empty region on `threads` threads, in microseconds: each region wakes the
// team that the previous one left (asleep under OMP_WAIT_POLICY=PASSIVE, spinning otherwise).
double empty_region_micros(int threads) {
  std::vector<double> times;
#ifdef _OPENMP
  for (int i = 0; i < 48; ++i) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      volatile int touch = omp_get_thread_num();
      (void)touch;
    }
    times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
#endif
  if (times.empty()) return 0;
  times.erase(times.begin(), times.begin() + 8);  // the team's first wake-ups: its threads' creation
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

std::int64_t measure_grain_scale() {
  const int threads = max_chunks();
  const std::string word = measured_word(
      "parallel.grain_scale.t" + std::to_string(threads),
      [](const std::string& w) {
        char* end = nullptr;
        const long long v = std::strtoll(w.c_str(), &end, 10);
        return !w.empty() && *end == 0 && v >= 1 && v <= kMaxGrainScale && (v & (v - 1)) == 0;
      },
      [&] {
        const double micros = empty_region_micros(threads);
        // A power of two, so that machines of one kind (and one machine from run to run) land on
        // the same scale despite the noise of the measurement.
        std::int64_t scale = 1;
        while (scale < kMaxGrainScale && scale * kGrainWakeMicros * 1.5 < micros) scale *= 2;
        char figures[64];
        std::snprintf(figures, sizeof figures, "empty_region=%.1fus", micros);
        return std::make_pair(std::to_string(scale), std::string(figures));
      },
      std::to_string(fixed_grain_scale()));
  return std::strtoll(word.c_str(), nullptr, 10);
}

}  // namespace

std::int64_t grain_scale() {
  // Asked for: read at every call (a getenv, beside work that is already above the base grain).
  if (const char* env = std::getenv("TANDEM_GRAIN_SCALE")) {
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    TANDEM_CHECK(end != env && *end == 0 && v >= 1 && v <= kMaxGrainScale && (v & (v - 1)) == 0,
                 "TANDEM_GRAIN_SCALE=", env, ": expected a power of two from 1 to ", kMaxGrainScale);
    return v;
  }
  // Asked again only when a resumed snapshot pinned its run's choices.
  static std::atomic<std::int64_t> scale{0};
  static std::atomic<unsigned> scale_generation{0};
  const unsigned generation = kernel_choices_generation();
  std::int64_t s = scale.load(std::memory_order_acquire);
  if (s == 0 || scale_generation.load(std::memory_order_relaxed) != generation) {
    s = measure_grain_scale();
    scale_generation.store(generation, std::memory_order_relaxed);
    scale.store(s, std::memory_order_release);
  }
  return s;
}

}  // namespace cpu
}  // namespace tandem
