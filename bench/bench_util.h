// Timing helpers for tandem's benchmarks, printing the line format of ../shared/bench
// (`name=tandem.<id> key=value ... median_ms=X`), so compare.sh can set them beside LibTorch,
// and the device they run on (BENCH_DEVICE, see Target below).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/deterministic.h"
#include "core/device.h"
#include "core/error.h"
#include "cuda/cuda.h"

namespace tandem {
namespace bench {

struct Stats {
  int iters = 0;
  double median_ms = 0, min_ms = 0, max_ms = 0;
};

// The median, min and max of timed samples (ms).
inline Stats summarize(std::vector<double> t) {
  Stats s;
  s.iters = static_cast<int>(t.size());
  if (t.empty()) return s;
  std::sort(t.begin(), t.end());
  const std::size_t n = t.size();
  s.median_ms = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  s.min_ms = t.front();
  s.max_ms = t.back();
  return s;
}

// `warmup` untimed calls, then `iters` timed ones; the median is what counts.
inline Stats measure(int warmup, int iters, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return summarize(std::move(times));
}

// BENCH_SCALE=0.5 halves the timed iterations (never below 3).
inline int scaled(int iters) {
  const char* e = std::getenv("BENCH_SCALE");
  const double f = e && std::atof(e) > 0 ? std::atof(e) : 1.0;
  return std::max(3, static_cast<int>(iters * f + 0.5));
}

// A value made safe for the space-separated key=value format (as the reference's anchor::kv).
inline std::string kv(std::string v) {
  const std::size_t b = v.find_first_not_of(" \t\n"), e = v.find_last_not_of(" \t\n");
  v = b == std::string::npos ? std::string("none") : v.substr(b, e - b + 1);
  for (auto& c : v)
    if (c == ' ' || c == ',' || c == '=' || c == '\t' || c == '\n') c = '_';
  return v;
}

inline void set_threads(int threads) {
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
}

inline std::string threads_tag(int threads) {
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  return "threads=" + std::to_string(threads) + " omp_wait=" + (wait ? wait : "default");
}

// Prints "name=tandem.<id> <tags> iters=.. median_ms=.. min_ms=.. max_ms=.." without a newline.
// Under deterministic mode (TANDEM_DETERMINISTIC=1, core/deterministic.h) the id ends in ".det",
// so that both modes compare in one table.
inline void print_stats(const std::string& id, const std::string& tags, const Stats& s) {
  const char* det = deterministic() ? ".det" : "";
  std::printf("name=tandem.%s%s lib=tandem %s iters=%d median_ms=%.4f min_ms=%.4f max_ms=%.4f", id.c_str(), det,
              tags.c_str(), s.iters, s.median_ms, s.min_ms, s.max_ms);
}

// The thread counts to run: BENCH_THREADS="1 2" (default both).
inline std::vector<int> thread_list() {
  const char* e = std::getenv("BENCH_THREADS");
  std::vector<int> out;
  if (e) {
    for (const char* p = e; *p;) {
      char* end = nullptr;
      const long v = std::strtol(p, &end, 10);
      if (end == p) break;
      if (v > 0) out.push_back(static_cast<int>(v));
      p = end;
    }
  }
  if (out.empty()) out = {1, 2};
  return out;
}

// ---- the device ------------------------------------------------------------------------------

// BENCH_DEVICE: "cpu" (the default) or "cuda:N" ("cuda" = cuda:0). A CUDA device must exist:
// without one (no GPU, or a build without --config=cuda) this throws a one-line tandem::Error.
inline Device device_from_env() {
  const char* e = std::getenv("BENCH_DEVICE");
  const std::string name = e && *e ? e : "cpu";
  if (name == "cpu") return Device::cpu();
  int index = 0;
  if (name != "cuda") {
    const std::string prefix = "cuda:";
    char* end = nullptr;
    const long v = name.compare(0, prefix.size(), prefix) == 0 ? std::strtol(name.c_str() + prefix.size(), &end, 10) : -1;
    TANDEM_CHECK(end != nullptr && *end == '\0' && end != name.c_str() + prefix.size() && v >= 0,
                 "BENCH_DEVICE=", name, ": expected cpu, cuda or cuda:N");
    index = static_cast<int>(v);
  }
  const std::string what = "BENCH_DEVICE=" + name;
  cuda::require_device(index, what.c_str());
  return Device::cuda(index);
}

// Where a benchmark runs. On the CPU (threads > 0) ids end in ".t<threads>" and the tags say the
// thread count, as the LibTorch anchors; on a GPU ids end in ".gpu" (".gpu.tf32" when TF32
// tensor-core math is allowed) and the tags say the device.
struct Target {
  Device device = Device::cpu();
  int threads = 1;
  bool tf32 = false;

  bool gpu() const { return device.is_cuda(); }
  std::string id(const std::string& base) const {
    return base + (gpu() ? (tf32 ? ".gpu.tf32" : ".gpu") : ".t" + std::to_string(threads));
  }
  std::string tags() const {
    return gpu() ? "device=" + device.str() + " tf32=" + (tf32 ? "1" : "0") : threads_tag(threads);
  }
  // Timed iterations: the CPU counts of the anchors, or the GPU's (steps take milliseconds there).
  int iters(int cpu, int gpu_iters) const { return scaled(gpu() ? gpu_iters : cpu); }
  // Makes the target current: OpenMP threads on the CPU, the TF32 switch on a GPU.
  void apply() const {
    if (gpu()) cuda::set_allow_tf32(tf32);
    else set_threads(threads);
  }
  // Returns when the device has finished all queued work (a timed call must end there).
  void wait() const {
    if (gpu()) cuda::synchronize(device.index());
  }
};

// The targets that BENCH_DEVICE and BENCH_THREADS select: one per thread count on the CPU; on a
// GPU exact FP32, then TF32 too when BENCH_TF32=1.
inline std::vector<Target> targets_from_env() {
  const Device device = device_from_env();
  std::vector<Target> out;
  if (device.is_cuda()) {
    out.push_back(Target{device, 0, false});
    const char* tf32 = std::getenv("BENCH_TF32");
    if (tf32 && std::string(tf32) == "1") out.push_back(Target{device, 0, true});
  } else {
    for (int threads : thread_list()) out.push_back(Target{device, threads, false});
  }
  return out;
}

}  // namespace bench
}  // namespace tandem
