#include "cuda/device_context.h"

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/cuda.h"
#include "cuda/cuda_check.h"

namespace tandem {
namespace cuda {

namespace {

// cudaMalloc behind the caching allocator of one device. Exhaustion is reported as nullptr so
// that the allocator can release its cache and retry; any other status throws.
class DeviceMemory final : public RawMemory {
 public:
  explicit DeviceMemory(int device) : device_(device) {}
  void* allocate(std::size_t nbytes) override {
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, nbytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    TANDEM_CUDA_CHECK(status);
    return ptr;
  }
  void release(void* ptr, std::size_t) override {
    // The block may still be read by queued work of this device's stream.
    TANDEM_CUDA_CHECK(cudaSetDevice(device_));
    TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
    TANDEM_CUDA_CHECK(cudaFree(ptr));
  }

 private:
  int device_;
};

class PinnedMemory final : public RawMemory {
 public:
  void* allocate(std::size_t nbytes) override {
    void* ptr = nullptr;
    const cudaError_t status = cudaMallocHost(&ptr, nbytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    TANDEM_CUDA_CHECK(status);
    return ptr;
  }
  void release(void* ptr, std::size_t) override { TANDEM_CUDA_CHECK(cudaFreeHost(ptr)); }
};

struct DeviceSlot {
  std::unique_ptr<DeviceMemory> memory;
  std::unique_ptr<CachingAllocator> allocator;
  DeviceContext context;
};

std::mutex& slots_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Contexts live until the process ends (handles are not destroyed at exit: the driver may be
// shutting down by then, and it frees everything with the process anyway).
std::vector<std::unique_ptr<DeviceSlot>>& slots() {
  static auto* all = new std::vector<std::unique_ptr<DeviceSlot>>();
  return *all;
}

DeviceSlot& create_slot(int index) {
  auto slot = std::make_unique<DeviceSlot>();
  TANDEM_CUDA_CHECK(cudaSetDevice(index));
  DeviceContext& ctx = slot->context;
  ctx.index = index;
  TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&ctx.properties, index));
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
  TANDEM_CUBLAS_CHECK(cublasCreate(&ctx.cublas));
  TANDEM_CUBLAS_CHECK(cublasSetStream(ctx.cublas, ctx.stream));
  TANDEM_CUDNN_CHECK(cudnnCreate(&ctx.cudnn));
  TANDEM_CUDNN_CHECK(cudnnSetStream(ctx.cudnn, ctx.stream));
  slot->memory = std::make_unique<DeviceMemory>(index);
  slot->allocator = std::make_unique<CachingAllocator>(*slot->memory, "cuda:" + std::to_string(index));
  ctx.allocator = slot->allocator.get();
  auto& all = slots();
  if (all.size() <= static_cast<std::size_t>(index)) all.resize(index + 1);
  all[index] = std::move(slot);
  return *all[index];
}

}  // namespace

DeviceContext& use_device(int index, const char* what) {
  DeviceContext* ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(slots_mutex());
    auto& all = slots();
    if (index >= 0 && static_cast<std::size_t>(index) < all.size() && all[index]) {
      ctx = &all[index]->context;
    } else {
      require_device(index, what);
      ctx = &create_slot(index).context;
    }
  }
  // Cheap when the device is already current (the common case: one GPU per process).
  TANDEM_CUDA_CHECK(cudaSetDevice(index));
  return *ctx;
}

void release_device_block(void* ptr, int index) noexcept {
  if (ptr == nullptr) return;
  try {
    CachingAllocator* allocator = nullptr;
    {
      std::lock_guard<std::mutex> lock(slots_mutex());
      auto& all = slots();
      if (index >= 0 && static_cast<std::size_t>(index) < all.size() && all[index])
        allocator = all[index]->allocator.get();
    }
    if (allocator == nullptr) throw Error("no context for device cuda:" + std::to_string(index));
    allocator->deallocate(ptr);
  } catch (const std::exception& e) {
    static std::atomic<bool> reported{false};
    if (!reported.exchange(true))
      std::fprintf(stderr, "tandem: could not return a block of cuda:%d to its cache: %s\n", index, e.what());
  }
}

CachingAllocator& pinned_host_allocator() {
  static auto* memory = new PinnedMemory();
  static auto* allocator = new CachingAllocator(*memory, "pinned host memory");
  return *allocator;
}

DeviceBuffer::DeviceBuffer(std::size_t nbytes, int device) : nbytes_(nbytes), device_(device) {
  data_ = use_device(device, "DeviceBuffer").allocator->allocate(nbytes);
}

DeviceBuffer::~DeviceBuffer() { release_device_block(data_, device_); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(other.data_), nbytes_(other.nbytes_), device_(other.device_) {
  other.data_ = nullptr;
  other.nbytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release_device_block(data_, device_);
    data_ = other.data_;
    nbytes_ = other.nbytes_;
    device_ = other.device_;
    other.data_ = nullptr;
    other.nbytes_ = 0;
  }
  return *this;
}

}  // namespace cuda
}  // namespace tandem
