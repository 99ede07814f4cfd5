// tandem's CUDA runtime, as seen from plain C++: whether a GPU is there, and the knobs of the
// CUDA backend. Link //cuda (which pulls in the backend under --config=cuda); in a build
// without CUDA these functions exist too and report that there is no GPU, so that callers can
// give a clear error instead of failing to link.
#pragma once

#include <cstddef>
#include <string>

namespace tandem {
namespace cuda {

// True when this binary was built with --config=cuda.
bool built_with_cuda();
// Number of visible CUDA devices; 0 without CUDA, without a driver or without a GPU.
int device_count();
// Why device_count() is 0 ("this build has no CUDA (build with --config=cuda)", the driver's
// error string, ...); empty when there is a device.
std::string unavailable_reason();
// Throws naming `what` (e.g. "Tensor::to(cuda:1)", "pure_nccl") unless device `index` exists.
void require_device(int index, const char* what);

// Waits for every kernel queued on device `index`.
void synchronize(int index);

// cuBLAS products run in exact FP32 unless TF32 tensor-core math is allowed (off by default).
void set_allow_tf32(bool allow);
bool allow_tf32();

// Convolutions pick only cuDNN algorithms whose results are the same bit for bit from run to
// run (on by default). Off, cuDNN may also run the backward passes' ALGO_0 and the weight
// gradient's ALGO_3, which add with atomics (still exact FP32 sums, in a varying order), as
// PyTorch does unless torch.backends.cudnn.deterministic is set: its weight gradients are
// several times faster (README, GPU). The environment variable TANDEM_DETERMINISTIC=0 sets the
// starting value.
void set_deterministic(bool deterministic);
bool deterministic();

// The caching allocator of device `index`: bytes handed to tensors, bytes kept for reuse.
struct MemoryStats {
  std::size_t in_use_bytes = 0, cached_bytes = 0, peak_in_use_bytes = 0, raw_allocations = 0;
};
MemoryStats memory_stats(int index);
// Returns the cached (unused) blocks of device `index` to the driver.
void empty_cache(int index);

}  // namespace cuda
}  // namespace tandem
