// Softmax over the last axis as one fused kernel each way (core/backend.h: softmax_forward,
// softmax_backward), with attention's scale and causal mask folded in.
#pragma once

#include "core/tensor.h"

namespace tandem {

// softmax(scale * x) along the last axis of a floating x (scale > 0). causal: x holds score
// matrices [..., tq, n] (n >= tq) and query i of each sees keys j <= i + n - tq only (a
// decoder's self-attention over the last tq of n positions); the others get exactly 0.
Tensor softmax_last_axis(const Tensor& x, double scale = 1.0, bool causal = false);

// The gradient of x, from y = softmax_last_axis(x, scale, causal) and y's gradient gy:
// scale * y * (gy - sum(gy * y)) along the last axis.
Tensor softmax_last_axis_backward(const Tensor& y, const Tensor& gy, double scale = 1.0);

}  // namespace tandem
