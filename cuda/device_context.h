// Per-device state of the CUDA backend: one stream on which every kernel, copy, cuBLAS and
// cuDNN call and NCCL collective of that device is queued (so work is ordered without events
// and freed memory can be reused at once), the library handles bound to that stream, and the
// device's caching allocator. Created on first use of a device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>

#include "cuda/caching_allocator.h"

namespace tandem {
namespace cuda {

struct DeviceContext {
  int index = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;  // bound to `stream`; math mode follows allow_tf32()
  cudnnHandle_t cudnn = nullptr;    // bound to `stream`
  CachingAllocator* allocator = nullptr;
  cudaDeviceProp properties{};
};

// Makes device `index` current for this thread and returns its context. Throws naming `what`
// when the device does not exist.
DeviceContext& use_device(int index, const char* what = "cuda");

// Returns a block of device `index`'s caching allocator to its cache without any CUDA call
// and without throwing (for destructors); a failure is reported on stderr once.
void release_device_block(void* ptr, int index) noexcept;

// Page-locked host memory for staging transfers (communication through the host), cached
// like device memory. Unlike device memory, its reuse is not ordered by a stream: a caller that
// queues an asynchronous copy from or into a block must wait for it before freeing the block.
CachingAllocator& pinned_host_allocator();

// A temporary buffer from a device's caching allocator (cuDNN workspaces, scratch space); it
// goes back to the cache when the object dies, and stream order keeps later reuse safe.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t nbytes, int device);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T> T* as() const { return static_cast<T*>(data_); }
  std::size_t size() const { return nbytes_; }

 private:
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  int device_ = 0;
};

}  // namespace cuda
}  // namespace tandem
