// cuda/cuda.h in a build without --config=cuda: no device, and a clear error for anyone who
// asks for one.
#include "core/error.h"
#include "cuda/cuda.h"

namespace tandem {
namespace cuda {

namespace {
const char* const kReason = "this build has no CUDA (build with --config=cuda)";
}

bool built_with_cuda() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return kReason; }
void require_device(int index, const char* what) { TANDEM_FAIL(what, ": no CUDA device ", index, ": ", kReason); }
void synchronize(int index) { require_device(index, "cuda::synchronize"); }
void set_allow_tf32(bool) {}
bool allow_tf32() { return false; }
void set_deterministic(bool) {}
bool deterministic() { return true; }
void set_cudnn_benchmark(bool) {}
bool cudnn_benchmark() { return false; }
void set_conv_direct_only(bool) {}
bool conv_direct_only() { return true; }
void set_cudnn_rnn(bool) {}
bool cudnn_rnn() { return false; }
std::int64_t cudnn_rnn_forwards() { return 0; }
MemoryStats memory_stats(int index) {
  require_device(index, "cuda::memory_stats");
  return {};
}
void empty_cache(int index) { require_device(index, "cuda::empty_cache"); }

}  // namespace cuda
}  // namespace tandem
