// Counter-based uniform numbers on the GPU: the same Philox stream as the CPU (core/philox.h),
// so a dropout mask drawn on cuda:0 equals the one drawn on the host from the same seed.
#include "core/error.h"
#include "core/philox.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernel_util.cuh"

namespace tandem {
namespace cuda {

namespace {

__global__ void uniform_f32_kernel(float* y, std::int64_t n, std::uint64_t seed, double low, double high) {
  TANDEM_GRID_STRIDE_LOOP(i, n) { y[i] = philox::uniform_f32(seed, static_cast<std::uint64_t>(i), low, high); }
}

__global__ void uniform_f64_kernel(double* y, std::int64_t n, std::uint64_t seed, double low, double high) {
  TANDEM_GRID_STRIDE_LOOP(i, n) { y[i] = philox::uniform_f64(seed, static_cast<std::uint64_t>(i), low, high); }
}

}  // namespace

void CudaBackend::random_uniform(Tensor& out, std::uint64_t seed, double low, double high) {
  DeviceContext& ctx = context_of(out, "random_uniform");
  const std::int64_t n = out.numel();
  if (out.dtype() == DType::f32) {
    launch_elementwise("random_uniform", ctx, n, uniform_f32_kernel, out.data<float>(), n, seed, low, high);
  } else if (out.dtype() == DType::f64) {
    launch_elementwise("random_uniform", ctx, n, uniform_f64_kernel, out.data<double>(), n, seed, low, high);
  } else {
    TANDEM_FAIL("random_uniform: needs a floating dtype, got ", dtype_name(out.dtype()));
  }
}

}  // namespace cuda
}  // namespace tandem
