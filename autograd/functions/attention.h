// Attention (the transformer's, #21): composed of differentiable functions (batched matmul,
// softmax), so it runs, and is differentiated, on every device.
#pragma once

#include "autograd/variable.h"

namespace tandem {
namespace functions {

// Scaled dot-product attention over the last two axes: softmax(q k^T / sqrt(d) + mask) v, for
// q [..., Tq, d], k [..., Tk, d] and v [..., Tk, dv] with equal leading axes; returns
// [..., Tq, dv]. causal: query i sees only keys j <= i + (Tk - Tq) (the last Tq positions of a
// sequence of Tk), as a decoder's self-attention; masked scores are -inf, so they get exactly
// zero weight and zero gradient, and every query sees at least one key (Tk >= Tq is required).
Variable scaled_dot_product_attention(const Variable& q, const Variable& k, const Variable& v, bool causal = false);

}  // namespace functions
}  // namespace tandem
