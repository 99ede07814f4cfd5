// cuda/cuda.h in a build with CUDA.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "cuda/cuda.h"
#include "cuda/cuda_check.h"
#include "cuda/device_context.h"

namespace tandem {
namespace cuda {

namespace {
// The boolean value of the environment variable `name`: `fallback` when it is unset or empty,
// false for "0", "false" or "off", true for anything else ("1", "true", "on").
bool env_flag(const char* name, bool fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || value[0] == '\0') return fallback;
  const std::string v = value;
  return !(v == "0" || v == "false" || v == "off");
}

std::atomic<bool> tf32_allowed{false};
// TANDEM_DETERMINISTIC=0 (or "false", "off") starts with deterministic convolutions off.
std::atomic<bool> deterministic_only{env_flag("TANDEM_DETERMINISTIC", true)};
// TANDEM_CUDNN_BENCHMARK=1 (or "true", "on") starts with cuDNN's algorithms timed.
std::atomic<bool> benchmark_on{env_flag("TANDEM_CUDNN_BENCHMARK", false)};
// TANDEM_CONV_DIRECT_ONLY=0 (or "false", "off") admits FFT and Winograd in exact mode too.
std::atomic<bool> direct_only_on{env_flag("TANDEM_CONV_DIRECT_ONLY", true)};

// cudaGetDeviceCount's answer, asked once: without a driver or GPU it returns an error, which
// is remembered as the reason.
struct Probe {
  int count = 0;
  std::string reason;
};

const Probe& probe() {
  static const Probe result = [] {
    Probe p;
    const cudaError_t status = cudaGetDeviceCount(&p.count);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      p.count = 0;
      p.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
    } else if (p.count == 0) {
      p.reason = "cudaGetDeviceCount found no CUDA device";
    }
    return p;
  }();
  return result;
}
}  // namespace

bool built_with_cuda() { return true; }
int device_count() { return probe().count; }
std::string unavailable_reason() { return probe().reason; }

void require_device(int index, const char* what) {
  const Probe& p = probe();
  TANDEM_CHECK(p.count > 0, what, ": no CUDA device: ", p.reason);
  TANDEM_CHECK(index >= 0 && index < p.count, what, ": there is no device cuda:", index, " (", p.count,
               " visible device", p.count == 1 ? "" : "s", ")");
}

void synchronize(int index) { TANDEM_CUDA_CHECK(cudaStreamSynchronize(use_device(index, "cuda::synchronize").stream)); }

void set_allow_tf32(bool allow) { tf32_allowed.store(allow); }
bool allow_tf32() { return tf32_allowed.load(); }
void set_deterministic(bool deterministic) { deterministic_only.store(deterministic); }
bool deterministic() { return deterministic_only.load(); }
void set_cudnn_benchmark(bool benchmark) { benchmark_on.store(benchmark); }
bool cudnn_benchmark() { return benchmark_on.load(); }
void set_conv_direct_only(bool direct_only) { direct_only_on.store(direct_only); }
bool conv_direct_only() { return direct_only_on.load(); }

MemoryStats memory_stats(int index) {
  const AllocatorStats s = use_device(index, "cuda::memory_stats").allocator->stats();
  return MemoryStats{s.in_use_bytes, s.cached_bytes, s.peak_in_use_bytes, s.raw_allocations};
}

void empty_cache(int index) { use_device(index, "cuda::empty_cache").allocator->empty_cache(); }

}  // namespace cuda
}  // namespace tandem
