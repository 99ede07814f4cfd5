// Helpers shared by the CUDA kernels: the launch shape of element-wise (grid-stride) kernels,
// the checked launch, and the context of the device a tensor lives on.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/tensor.h"
#include "cuda/cuda_check.h"
#include "cuda/device_context.h"

namespace tandem {
namespace cuda {

constexpr int kBlockThreads = 256;

// Blocks for n elements of a grid-stride loop: enough to fill the GPU, never more than needed.
inline unsigned grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + kBlockThreads - 1) / kBlockThreads;
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>(blocks, 65535LL * 8)));
}

// The context of the device `t` lives on, made current.
inline DeviceContext& context_of(const Tensor& t, const char* what) { return use_device(t.device().index(), what); }

// Launches kernel<<<grid_for(n), kBlockThreads, 0, ctx.stream>>>(args...) and checks the launch;
// nothing happens for n == 0.
template <typename... KernelArgs, typename... Args>
void launch_elementwise(const char* name, const DeviceContext& ctx, std::int64_t n, void (*kernel)(KernelArgs...),
                        Args&&... args) {
  if (n <= 0) return;
  kernel<<<grid_for(n), kBlockThreads, 0, ctx.stream>>>(std::forward<Args>(args)...);
  TANDEM_CUDA_CHECK_LAUNCH(name);
}

}  // namespace cuda
}  // namespace tandem

// for (i = this thread's first element; i < n; i += all threads): the body of element-wise kernels.
#define TANDEM_GRID_STRIDE_LOOP(i, n)                                                              \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)
