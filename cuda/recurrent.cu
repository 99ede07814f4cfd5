// The fused LSTM cell of the CUDA backend (semantics: core/cpu/recurrent.cc). One thread per
// (row, unit) reads that unit's four gates (blocks i, f, a, o of the row, H apart) and writes its
// outputs; every element is read before anything of it is written, so gc_prev may be gc.
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernel_util.cuh"

namespace tandem {
namespace cuda {

namespace {

__device__ inline float exp_of(float v) { return ::expf(v); }
__device__ inline double exp_of(double v) { return ::exp(v); }
__device__ inline float tanh_of(float v) { return ::tanhf(v); }
__device__ inline double tanh_of(double v) { return ::tanh(v); }

template <typename T>
__device__ inline T sigmoid(T v) {
  return T(1) / (T(1) + exp_of(-v));
}

// Element e of [B, H] (row b = e / H, unit u = e % H): its gate i sits at b * 4H + u of [B, 4H],
// and f, a, o follow H, 2H and 3H further on.
template <typename Index>
__device__ inline std::int64_t gate_offset(std::int64_t e, Index units) {
  const Index b = static_cast<Index>(e) / units;
  const Index u = static_cast<Index>(e) - b * units;
  return static_cast<std::int64_t>(b) * 4 * static_cast<std::int64_t>(units) + static_cast<std::int64_t>(u);
}

template <typename T, typename Index>
__global__ void lstm_cell_forward_kernel(T* gates, const T* c_prev, T* c, T* h, Index units, std::int64_t n) {
  TANDEM_GRID_STRIDE_LOOP(e, n) {
    T* g = gates + gate_offset(e, units);
    const std::int64_t H = units;
    const T i = sigmoid(g[0]);
    const T f = sigmoid(g[H]);
    const T a = tanh_of(g[2 * H]);
    const T o = sigmoid(g[3 * H]);
    g[0] = i;
    g[H] = f;
    g[2 * H] = a;
    g[3 * H] = o;
    const T ce = f * c_prev[e] + i * a;
    c[e] = ce;
    h[e] = o * tanh_of(ce);
  }
}

template <typename T, typename Index>
__global__ void lstm_cell_backward_kernel(const T* activations, const T* c_prev, const T* c, const T* gh,
                                          const T* gc, T* ggates, T* gc_prev, Index units, std::int64_t n) {
  TANDEM_GRID_STRIDE_LOOP(e, n) {
    const std::int64_t at = gate_offset(e, units);
    const std::int64_t H = units;
    const T* g = activations + at;
    const T i = g[0], f = g[H], a = g[2 * H], o = g[3 * H];
    const T dh = gh[e];
    const T tc = tanh_of(c[e]);
    // The total gradient of c: directly, and through h = o * tanh(c). gc is read here, before
    // gc_prev (possibly the same memory) is written below.
    const T gct = gc[e] + dh * o * (T(1) - tc * tc);
    T* gg = ggates + at;
    gg[0] = gct * a * i * (T(1) - i);
    gg[H] = gct * c_prev[e] * f * (T(1) - f);
    gg[2 * H] = gct * i * (T(1) - a * a);
    gg[3 * H] = dh * tc * o * (T(1) - o);
    gc_prev[e] = gct * f;
  }
}

// 32-bit division per element where every element index fits (the common case).
bool fits_32_bits(std::int64_t n) { return n <= std::numeric_limits<std::int32_t>::max(); }

}  // namespace

void CudaBackend::lstm_cell_forward(Tensor& gates, const Tensor& c_prev, Tensor& c, Tensor& h) {
  const std::int64_t batch = c_prev.size(0), units = c_prev.size(1);
  const std::int64_t n = batch * units;
  if (n == 0) return;
  TANDEM_DISPATCH_FLOAT(gates.dtype(), "lstm_cell_forward", [&] {
    using T = scalar_t;
    DeviceContext& ctx = context_of(gates, "lstm_cell_forward");
    if (fits_32_bits(n)) {
      launch_elementwise("lstm_cell_forward", ctx, n, lstm_cell_forward_kernel<T, std::uint32_t>, gates.data<T>(),
                         c_prev.data<T>(), c.data<T>(), h.data<T>(), static_cast<std::uint32_t>(units), n);
    } else {
      launch_elementwise("lstm_cell_forward", ctx, n, lstm_cell_forward_kernel<T, std::int64_t>, gates.data<T>(),
                         c_prev.data<T>(), c.data<T>(), h.data<T>(), units, n);
    }
  });
}

void CudaBackend::lstm_cell_backward(const Tensor& activations, const Tensor& c_prev, const Tensor& c,
                                     const Tensor& gh, const Tensor& gc, Tensor& ggates, Tensor& gc_prev) {
  const std::int64_t batch = c_prev.size(0), units = c_prev.size(1);
  const std::int64_t n = batch * units;
  if (n == 0) return;
  TANDEM_DISPATCH_FLOAT(activations.dtype(), "lstm_cell_backward", [&] {
    using T = scalar_t;
    DeviceContext& ctx = context_of(activations, "lstm_cell_backward");
    if (fits_32_bits(n)) {
      launch_elementwise("lstm_cell_backward", ctx, n, lstm_cell_backward_kernel<T, std::uint32_t>,
                         activations.data<T>(), c_prev.data<T>(), c.data<T>(), gh.data<T>(), gc.data<T>(),
                         ggates.data<T>(), gc_prev.data<T>(), static_cast<std::uint32_t>(units), n);
    } else {
      launch_elementwise("lstm_cell_backward", ctx, n, lstm_cell_backward_kernel<T, std::int64_t>,
                         activations.data<T>(), c_prev.data<T>(), c.data<T>(), gh.data<T>(), gc.data<T>(),
                         ggates.data<T>(), gc_prev.data<T>(), units, n);
    }
  });
}

}  // namespace cuda
}  // namespace tandem
