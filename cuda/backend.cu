// The CUDA backend's memory and host transfers, and its registration with core.
#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_check.h"
#include "cuda/device_context.h"

namespace tandem {
namespace cuda {

void* CudaBackend::allocate(std::size_t nbytes, int device_index) {
  return use_device(device_index, "allocate").allocator->allocate(nbytes);
}

void CudaBackend::deallocate(void* ptr, std::size_t, int device_index) {
  if (ptr == nullptr) return;
  use_device(device_index, "deallocate").allocator->deallocate(ptr);
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
  // From pageable memory the call returns once host_src has been staged, so the caller may
  // free or reuse it at once; the device sees the bytes in stream order.
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, ctx.stream));
}

CudaBackend& backend() {
  static auto* instance = new CudaBackend();
  return *instance;
}

namespace {
// Linking //cuda:backend (alwayslink) is what makes Device::cuda(i) usable.
const bool registered = [] {
  register_backend(DeviceType::cuda, &backend());
  return true;
}();
}  // namespace

}  // namespace cuda
}  // namespace tandem
