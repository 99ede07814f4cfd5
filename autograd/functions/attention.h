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

// Multi-head self-attention from the projected queries, keys and values of every head, packed
// per head as Megatron-LM packs them: qkv [B, T, heads * 3 * d] holds, for head h, q, k and v
// (d features each) at [h * 3d, h * 3d + 3d). Returns the heads' outputs side by side,
// [B, T, heads * d] (head h at [h * d, h * d + d)). Packing per head lets a tensor-parallel
// projection give each rank whole heads: a contiguous share of the features is a set of heads.
Variable multi_head_self_attention(const Variable& qkv, std::int64_t heads, bool causal = true);

}  // namespace functions
}  // namespace tandem
