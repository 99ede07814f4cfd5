// Status codes of CUDA, cuBLAS, cuDNN and NCCL become tandem::Error exceptions that name the
// library, the code, its meaning, the call as written and where it was made:
//   "CUDA error 2 (out of memory) in cudaMalloc(&ptr, nbytes) at cuda/device_memory.cu:31"
// Each macro is usable only where its library's header is included; this header itself needs
// none of them, so plain C++ (and its tests) can include it.
#pragma once

#include <string>

namespace tandem {
namespace cuda {

// The message above, without throwing (for tests and logs).
std::string status_message(const char* library, long code, const char* meaning, const char* call,
                           const char* file, int line);
[[noreturn]] void throw_status(const char* library, long code, const char* meaning, const char* call,
                               const char* file, int line);

}  // namespace cuda
}  // namespace tandem

#define TANDEM_CUDA_CHECK(call)                                                                        \
  do {                                                                                                 \
    const cudaError_t tandem_status_ = (call);                                                         \
    if (tandem_status_ != cudaSuccess) {                                                               \
      (void)cudaGetLastError(); /* clear a non-sticky error so that the next call starts clean */     \
      ::tandem::cuda::throw_status("CUDA", static_cast<long>(tandem_status_),                         \
                                   cudaGetErrorString(tandem_status_), #call, __FILE__, __LINE__);     \
    }                                                                                                  \
  } while (0)

// After a kernel launch: a bad launch configuration is reported here, by the kernel's name.
#define TANDEM_CUDA_CHECK_LAUNCH(kernel_name)                                                          \
  do {                                                                                                 \
    const cudaError_t tandem_status_ = cudaGetLastError();                                             \
    if (tandem_status_ != cudaSuccess)                                                                 \
      ::tandem::cuda::throw_status("CUDA", static_cast<long>(tandem_status_),                         \
                                   cudaGetErrorString(tandem_status_),                                 \
                                   (std::string("launch of ") + (kernel_name)).c_str(), __FILE__, __LINE__); \
  } while (0)

#define TANDEM_CUBLAS_CHECK(call)                                                                       \
  do {                                                                                                 \
    const cublasStatus_t tandem_status_ = (call);                                                      \
    if (tandem_status_ != CUBLAS_STATUS_SUCCESS)                                                       \
      ::tandem::cuda::throw_status("cuBLAS", static_cast<long>(tandem_status_),                       \
                                   cublasGetStatusString(tandem_status_), #call, __FILE__, __LINE__);  \
  } while (0)

#define TANDEM_CUDNN_CHECK(call)                                                                        \
  do {                                                                                                 \
    const cudnnStatus_t tandem_status_ = (call);                                                       \
    if (tandem_status_ != CUDNN_STATUS_SUCCESS)                                                        \
      ::tandem::cuda::throw_status("cuDNN", static_cast<long>(tandem_status_),                        \
                                   cudnnGetErrorString(tandem_status_), #call, __FILE__, __LINE__);    \
  } while (0)

#define TANDEM_NCCL_CHECK(call)                                                                         \
  do {                                                                                                 \
    const ncclResult_t tandem_status_ = (call);                                                        \
    if (tandem_status_ != ncclSuccess)                                                                 \
      ::tandem::cuda::throw_status("NCCL", static_cast<long>(tandem_status_),                         \
                                   ncclGetErrorString(tandem_status_), #call, __FILE__, __LINE__);     \
  } while (0)
