// Counter-based uniform numbers (core/philox.h): each element is a function of (seed, index),
// so the threads split the tensor freely and the result matches the CUDA backend bit for bit.
#include "core/cpu/cpu_backend.h"
#include "core/cpu/parallel.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/tensor.h"

namespace tandem {

void CpuBackend::random_uniform(Tensor& out, std::uint64_t seed, double low, double high) {
  const std::int64_t n = out.numel();
  if (out.dtype() == DType::f32) {
    float* y = out.data<float>();
    // About 50 instructions per element for the ten rounds (shared by two elements).
    cpu::parallel_for(n, 16, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) y[i] = philox::uniform_f32(seed, static_cast<std::uint64_t>(i), low, high);
    });
  } else if (out.dtype() == DType::f64) {
    double* y = out.data<double>();
    cpu::parallel_for(n, 16, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) y[i] = philox::uniform_f64(seed, static_cast<std::uint64_t>(i), low, high);
    });
  } else {
    TANDEM_FAIL("random_uniform: needs a floating dtype, got ", dtype_name(out.dtype()));
  }
}

}  // namespace tandem
