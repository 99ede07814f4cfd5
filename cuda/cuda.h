// tandem's CUDA runtime, as seen from plain C++: whether a GPU is there, and the knobs of the
// CUDA backend. Link //cuda (which pulls in the backend under --config=cuda); in a build
// without CUDA these functions exist too and report that there is no GPU, so that callers can
// give a clear error instead of failing to link.
#pragma once

#include <cstddef>
#include <cstdint>
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
// several times faster (docs/gpus.md). The environment variable TANDEM_DETERMINISTIC=0 sets the
// starting value.
void set_deterministic(bool deterministic);
bool deterministic();

// Benchmark mode, as torch.backends.cudnn.benchmark (off by default). Off, each convolution
// shape takes the first algorithm of cuDNN's heuristic ranking that runs: the same choice on
// every run, so results are reproducible from run to run. On, the first call of a shape times
// every algorithm that the rules above and below admit, on its own inputs (into a scratch
// output: one untimed run, then the median of three), and keeps the fastest; the choice may then
// differ between runs, and so may the last bits of the results. The environment variable
// TANDEM_CUDNN_BENCHMARK=1 (or "true", "on") sets the starting value; TANDEM_CUDNN_VERBOSE=1
// prints each candidate's time.
void set_cudnn_benchmark(bool benchmark);
bool cudnn_benchmark();

// Convolutions in exact mode (f64, and f32 unless TF32 is allowed) take only direct algorithms,
// which sum each output over its own window (on by default). FFT and Winograd transform a whole
// tile instead: an Inf or NaN in the input then reaches outputs whose window does not contain
// it (Inf - Inf in the transform), and their rounding error is relative to the largest
// magnitude of the tile, not to each output's own terms, so small outputs beside large ones lose
// their relative accuracy and no longer match the CPU. Off, every algorithm cuDNN offers is
// admitted, still with FMA math (exact FP32 products, no TF32 unless set_allow_tf32): PyTorch's
// default FP32 semantics, and often faster. The environment variable TANDEM_CONV_DIRECT_ONLY=0
// (or "false", "off") sets the starting value.
void set_conv_direct_only(bool direct_only);
bool conv_direct_only();

// n_step_lstm without dropout runs the whole LSTM on cuDNN's RNN API (as PyTorch's nn.LSTM) on a
// GPU; off, it runs cell by cell as on the CPU (on by default; TANDEM_CUDNN_RNN=0 starts off).
void set_cudnn_rnn(bool on);
bool cudnn_rnn();
// How many LSTM forwards have run on cuDNN's RNN in this process (tests, diagnostics).
std::int64_t cudnn_rnn_forwards();

// The caching allocator of device `index`: bytes handed to tensors, bytes kept for reuse.
struct MemoryStats {
  std::size_t in_use_bytes = 0, cached_bytes = 0, peak_in_use_bytes = 0, raw_allocations = 0;
};
MemoryStats memory_stats(int index);
// Returns the cached (unused) blocks of device `index` to the driver.
void empty_cache(int index);

}  // namespace cuda
}  // namespace tandem
