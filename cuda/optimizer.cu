// Fused optimizer updates of the CUDA backend: one pass over each parameter and its state, with
// the CPU backend's formulas in the parameter's dtype (core/cpu/optimizer.cc), and the sum of
// squares behind gradient clipping.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "core/tensor.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernel_util.cuh"

namespace tandem {
namespace cuda {

namespace {

template <typename T>
__global__ void sgd_kernel(std::int64_t n, T* p, const T* g, T rate) {
  TANDEM_GRID_STRIDE_LOOP(i, n) p[i] -= rate * g[i];
}

template <typename T>
__global__ void momentum_sgd_kernel(std::int64_t n, T* p, const T* g, T* v, T rate, T mu) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    const T velocity = mu * v[i] - rate * g[i];
    v[i] = velocity;
    p[i] += velocity;
  }
}

template <typename T>
__device__ T square_root(T x) {
  if constexpr (std::is_same<T, float>::value) {
    return sqrtf(x);
  } else {
    return sqrt(x);
  }
}

template <typename T>
struct AdamConstants {
  T one_minus_beta1, one_minus_beta2, alpha_t, eps, eta, decay;
};

// vhat is null unless amsgrad.
template <typename T>
__global__ void adam_kernel(std::int64_t n, T* p, const T* g, T* m, T* v, T* vhat, AdamConstants<T> k) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    const T grad = g[i];
    const T mi = m[i] + k.one_minus_beta1 * (grad - m[i]);
    const T vi = v[i] + k.one_minus_beta2 * (grad * grad - v[i]);
    m[i] = mi;
    v[i] = vi;
    T denominator = vi;
    if (vhat != nullptr) {
      const T h = vhat[i] > vi ? vhat[i] : vi;
      vhat[i] = h;
      denominator = h;
    }
    const T param = p[i];
    p[i] = param - k.eta * (k.alpha_t * mi / (square_root(denominator) + k.eps) + k.decay * param);
  }
}

// sum_of_squares: block b sums x[i]^2 (in double) over i in [b * chunk, min((b + 1) * chunk, n))
// in a fixed order (thread t takes every blockDim.x-th element, then a shared-memory tree), so the
// result depends only on n. With kSquare false it sums doubles: pass 2 over the block totals.
constexpr int kSumThreads = 256;
constexpr std::int64_t kSumMaxBlocks = 1024;
constexpr std::int64_t kSumMinChunk = 8192;

template <typename T, bool kSquare>
__global__ void sum_of_squares_kernel(const T* x, std::int64_t n, std::int64_t chunk, double* sums) {
  __shared__ double partial[kSumThreads];
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.x) * chunk;
  const std::int64_t end = begin + chunk < n ? begin + chunk : n;
  double acc = 0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += kSumThreads) {
    const double value = static_cast<double>(x[i]);
    acc += kSquare ? value * value : value;
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int width = kSumThreads / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) sums[blockIdx.x] = partial[0];
}

}  // namespace

void CudaBackend::sgd_update(Tensor& param, const Tensor& grad, double lr) {
  TANDEM_DISPATCH_FLOAT(param.dtype(), "sgd_update", [&] {
    const std::int64_t n = param.numel();
    launch_elementwise("sgd_update", context_of(param, "sgd_update"), n, sgd_kernel<scalar_t>, n,
                       param.data<scalar_t>(), grad.data<scalar_t>(), static_cast<scalar_t>(lr));
  });
}

void CudaBackend::momentum_sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, double lr,
                                      double momentum) {
  TANDEM_DISPATCH_FLOAT(param.dtype(), "momentum_sgd_update", [&] {
    const std::int64_t n = param.numel();
    launch_elementwise("momentum_sgd_update", context_of(param, "momentum_sgd_update"), n,
                       momentum_sgd_kernel<scalar_t>, n, param.data<scalar_t>(), grad.data<scalar_t>(),
                       velocity.data<scalar_t>(), static_cast<scalar_t>(lr), static_cast<scalar_t>(momentum));
  });
}

void CudaBackend::adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor& vhat,
                              const AdamStep& step) {
  TANDEM_DISPATCH_FLOAT(param.dtype(), "adam_update", [&] {
    const std::int64_t n = param.numel();
    AdamConstants<scalar_t> k;
    k.one_minus_beta1 = static_cast<scalar_t>(1 - step.beta1);
    k.one_minus_beta2 = static_cast<scalar_t>(1 - step.beta2);
    k.alpha_t = static_cast<scalar_t>(step.alpha_t);
    k.eps = static_cast<scalar_t>(step.eps);
    k.eta = static_cast<scalar_t>(step.eta);
    k.decay = static_cast<scalar_t>(step.weight_decay_rate);
    scalar_t* vhat_data = step.amsgrad ? vhat.data<scalar_t>() : nullptr;
    launch_elementwise("adam_update", context_of(param, "adam_update"), n, adam_kernel<scalar_t>, n,
                       param.data<scalar_t>(), grad.data<scalar_t>(), m.data<scalar_t>(), v.data<scalar_t>(),
                       vhat_data, k);
  });
}

double CudaBackend::sum_of_squares(const Tensor& x) {
  double total = 0;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "sum_of_squares", [&] {
    const std::int64_t n = x.numel();
    if (n == 0) return;
    const DeviceContext& ctx = context_of(x, "sum_of_squares");
    // Pass 1: one partial per block; pass 2: one block sums the partials (into sums[blocks]).
    std::int64_t blocks = std::min(kSumMaxBlocks, (n + kSumMinChunk - 1) / kSumMinChunk);
    const std::int64_t chunk = (n + blocks - 1) / blocks;
    blocks = (n + chunk - 1) / chunk;
    DeviceBuffer sums(static_cast<std::size_t>(blocks + 1) * sizeof(double), ctx.index);
    double* partials = sums.as<double>();
    sum_of_squares_kernel<scalar_t, true>
        <<<static_cast<unsigned>(blocks), kSumThreads, 0, ctx.stream>>>(x.data<scalar_t>(), n, chunk, partials);
    TANDEM_CUDA_CHECK_LAUNCH("sum_of_squares");
    double* result = partials;
    if (blocks > 1) {
      result = partials + blocks;
      sum_of_squares_kernel<double, false><<<1, kSumThreads, 0, ctx.stream>>>(partials, blocks, blocks, result);
      TANDEM_CUDA_CHECK_LAUNCH("sum_of_squares");
    }
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(&total, result, sizeof(double), cudaMemcpyDeviceToHost, ctx.stream));
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  });
  return total;
}

}  // namespace cuda
}  // namespace tandem
