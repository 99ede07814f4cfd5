// exp through Eigen's vectorised packets, with IEEE's underflow (shared by the element-wise exp
// and the fused softmax, so the two agree on every element).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include <Eigen/Core>

namespace tandem {
namespace cpu {

// Eigen's packet exp clamps its argument to about log(the smallest normal), so below that it
// returns the smallest normal instead of the denormal or 0 that IEEE's exp gives: exp(-inf) was
// 1.2e-38 in f32 (5.6e-309 in f64) in the vector body and 0 in the scalar tail, so a softmax
// over a -inf mask (causal attention) leaked weight and depended on an element's position, and
// differed from the GPU's exp. Those arguments take std::exp instead.
// Almost every chunk has no such argument: one check (a vectorized comparison) and one pass of
// Eigen's packet exp. Otherwise a pass keeps those arguments as they are (negative, where every exp
// is >= 0; safe when out is in), and a scalar pass finishes them. (Eigen's select() is not
// vectorized: written as one select over the chunk, every element cost a libm call, which showed in
// an LSTM language model's training step, in its softmax cross-entropy: docs/performance.md, "Costs
// outside the products".)
template <typename T>
void exp_chunk(const Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>& x,
               Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>& y, T* out, std::int64_t n) {
  const T lowest_normal_log = std::log(std::numeric_limits<T>::min());
  const T* in = x.data();
  int below = 0;
  for (std::int64_t i = 0; i < n; ++i) below |= in[i] < lowest_normal_log ? 1 : 0;
  if (below == 0) {
    y = x.exp();
    return;
  }
  y = (x < lowest_normal_log).select(x, x.exp());
  for (std::int64_t i = 0; i < n; ++i)
    if (out[i] < T(0)) out[i] = std::exp(out[i]);
}

}  // namespace cpu
}  // namespace tandem
