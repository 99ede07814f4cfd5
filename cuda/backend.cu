// The CUDA backend's memory and host transfers, and its registration with core.
#include <cstdio>

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

void CudaBackend::copy_from_host(void* dst, const void* host_src, std::size_t nbytes, int device_index) {
  if (nbytes == 0) return;
  DeviceContext& ctx = use_device(device_index, "copy_from_host");
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
