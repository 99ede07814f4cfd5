// The CUDA backend's memory and host transfers, and its registration with core.
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "core/storage.h"
#include "cuda/cuda.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_check.h"
#include "cuda/device_context.h"

namespace tandem {
namespace cuda {

void* CudaBackend::allocate(std::size_t nbytes, int device_index) {
  return use_device(device_index, "allocate").allocator->allocate(nbytes);
}

void CudaBackend::deallocate(void* ptr, std::size_t, int device_index) {
  // Called from Storage's destructor, which must not throw: returning a block to the cache is
  // bookkeeping only (no CUDA call), so a sticky error from a faulted kernel cannot turn the
  // unwinding of its exception into std::terminate.
  release_device_block(ptr, device_index);
}

void CudaBackend::copy_to_host(void* host_dst, const void* src, std::size_t nbytes, int device_index) {
  if (nbytes == 0) return;
  DeviceContext& ctx = use_device(device_index, "copy_to_host");
  // Queued behind the kernels that produce src; the host then waits for the bytes.
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, nbytes, cudaMemcpyDeviceToHost, ctx.stream));
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

namespace {

// Small host-to-device copies (index tables, labels, a batch of token ids: a few per training
// step) go through a ring of page-locked slots, so that they neither wait for the stream (a copy
// from pageable memory waits for the work queued before it, and then the host had to wait for
// the copy before the caller could free its buffer) nor stop the host from running ahead of the
// GPU. The bytes are copied into a slot at once, the caller's buffer is free on return, and an
// event tells when the slot's DMA is done, before the slot is used again.
class StagingRing {
 public:
  static constexpr std::size_t kSlotBytes = 64 << 10;
  static constexpr int kSlots = 32;

  // Queues the copy on ctx's stream and returns true; false when no slot can be had (no
  // page-locked memory), and the caller copies the usual way.
  bool copy(DeviceContext& ctx, void* dst, const void* host_src, std::size_t nbytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!ready_ && !set_up()) return false;
    Slot& slot = slots_[next_];
    next_ = (next_ + 1) % kSlots;
    if (slot.used) TANDEM_CUDA_CHECK(cudaEventSynchronize(slot.done));  // its last DMA, long done
    std::memcpy(slot.bytes, host_src, nbytes);
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, slot.bytes, nbytes, cudaMemcpyHostToDevice, ctx.stream));
    TANDEM_CUDA_CHECK(cudaEventRecord(slot.done, ctx.stream));
    slot.used = true;
    return true;
  }

 private:
  struct Slot {
    void* bytes = nullptr;
    cudaEvent_t done = nullptr;
    bool used = false;
  };

  bool set_up() {
    if (failed_) return false;
    for (Slot& slot : slots_) {
      if (cudaHostAlloc(&slot.bytes, kSlotBytes, cudaHostAllocDefault) != cudaSuccess ||
          cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();  // not sticky: fall back to the waiting copy
        failed_ = true;
        return false;
      }
    }
    ready_ = true;
    return true;
  }

  std::mutex mutex_;
  Slot slots_[kSlots];
  int next_ = 0;
  bool ready_ = false, failed_ = false;
};

StagingRing& staging_ring(int device_index) {
  static std::mutex mutex;
  static auto* rings = new std::map<int, std::unique_ptr<StagingRing>>();  // never destroyed, as backend()
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<StagingRing>& ring = (*rings)[device_index];
  if (!ring) ring = std::make_unique<StagingRing>();
  return *ring;
}

}  // namespace

void CudaBackend::copy_from_host(void* dst, const void* host_src, std::size_t nbytes, int device_index) {
  if (nbytes == 0) return;
  DeviceContext& ctx = use_device(device_index, "copy_from_host");
  if (nbytes <= StagingRing::kSlotBytes && staging_ring(device_index).copy(ctx, dst, host_src, nbytes)) return;
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, ctx.stream));
  // From pageable memory the runtime only promises that the copy "might be synchronous"; the
  // caller may free host_src as soon as this returns, so wait (as PyTorch's blocking copy does).
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

CudaBackend& backend() {
  static auto* instance = new CudaBackend();
  return *instance;
}

namespace {

// Pinned host tensors (Tensor::pin_memory, empty_pinned) from the caching pinned allocator.
// Without a GPU, or when page-locked memory runs out, nullptr: core falls back to ordinary
// memory. Every copy into or out of pinned memory waits for its completion (copy_to_host,
// copy_from_host), so a freed block can be handed out again at once.
void* allocate_pinned(std::size_t nbytes) {
  if (device_count() == 0) return nullptr;
  try {
    return pinned_host_allocator().allocate(nbytes);
  } catch (const std::exception&) {
    return nullptr;
  }
}

void deallocate_pinned(void* ptr) noexcept {
  try {
    pinned_host_allocator().deallocate(ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: could not return a pinned host block to its cache: %s\n", e.what());
  }
}

// Linking //cuda:backend (alwayslink) is what makes Device::cuda(i) usable.
const bool registered = [] {
  register_backend(DeviceType::cuda, &backend());
  register_pinned_host_allocator(PinnedHostAllocator{allocate_pinned, deallocate_pinned});
  return true;
}();

}  // namespace

}  // namespace cuda
}  // namespace tandem
