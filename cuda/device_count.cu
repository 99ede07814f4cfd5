#include "cuda/device_count.h"

#include <cuda_runtime.h>

namespace tandem {
namespace cuda {

int device_count() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error state
    return 0;
  }
  return n;
}

}  // namespace cuda
}  // namespace tandem
