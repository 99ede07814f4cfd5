// Attention (the transformer's): fused (core/ops/attention.h: O(T) memory, tiles of scores
// never kept) where the device has the kernels, composed of differentiable functions (batched
// matmul, softmax) elsewhere and as the reference.
#pragma once

#include <cstdint>
#include <functional>

#include "autograd/variable.h"
#include "core/ops/attention.h"
#include "core/random.h"

namespace tandem {
namespace functions {

struct AttentionOptions {
  AttentionMask mask;              // causal, sliding window, packed documents (core/ops/attention.h)
  double scale = 0;                // multiplies the scores; 0: 1 / sqrt(d)
  double dropout = 0;              // on the attention weights, in train mode only
  Generator* generator = nullptr;  // dropout's seed is drawn from it (global_generator() if null)
  std::int64_t head_offset = 0;    // the first local head's global index (dropout's stream)
};

// softmax(scale * q k^T + mask) v for q [B, Hq, Tq, d], k [B, Hkv, Tk, d], v [B, Hkv, Tk, dv]
// (grouped-query attention when Hkv < Hq: query head h reads key/value head h / (Hq / Hkv)):
// [B, Hq, Tq, dv]. A query that sees no key gets 0. The fused kernels where q's device has them
// (fused_attention_available), the composed reference otherwise.
Variable attention(const Variable& q, const Variable& k, const Variable& v, const AttentionOptions& options = {});

// The same computation composed of differentiable functions (matmul, softmax, where), holding
// every [Tq, Tk] score matrix: the reference the fused kernels are tested against. It draws
// dropout's seed from the generator exactly as attention() does.
Variable composed_attention(const Variable& q, const Variable& k, const Variable& v,
                            const AttentionOptions& options = {});

// How a multi-head attention attends, given its q, k, v [B, H, T, d] and options: attention()
// by default; context parallelism (comm/context_parallel) puts its own in its place, a collective
// over the ranks that split the sequence (the links' set_attention).
using AttentionFunction =
    std::function<Variable(const Variable& q, const Variable& k, const Variable& v, const AttentionOptions& options)>;

// Scaled dot-product attention over the last two axes: softmax(q k^T / sqrt(d) + mask) v, for
// q [..., Tq, d], k [..., Tk, d] and v [..., Tk, dv] with equal leading axes; returns
// [..., Tq, dv]. causal: query i sees only keys j <= i + (Tk - Tq) (the last Tq positions of a
// sequence of Tk), as a decoder's self-attention; masked scores are -inf, so they get exactly
// zero weight and zero gradient, and every query sees at least one key (Tk >= Tq is required).
// Runs attention() with the leading axes as the batch and one head.
Variable scaled_dot_product_attention(const Variable& q, const Variable& k, const Variable& v, bool causal = false);

// Multi-head self-attention from the projected queries, keys and values of every head, packed
// per head as Megatron-LM packs them: qkv [B, T, heads * 3 * d] holds, for head h, q, k and v
// (d features each) at [h * 3d, h * 3d + 3d). Returns the heads' outputs side by side,
// [B, T, heads * d] (head h at [h * d, h * d + d)). Packing per head lets a tensor-parallel
// projection give each rank whole heads: a contiguous share of the features is a set of heads.
// attend (attention() when empty) runs the heads' attention; head_offset is the first head's
// index among all heads (a tensor-parallel rank's), for dropout's stream.
Variable multi_head_self_attention(const Variable& qkv, std::int64_t heads, bool causal = true,
                                   const AttentionFunction& attend = nullptr, std::int64_t head_offset = 0);

}  // namespace functions
}  // namespace tandem
