// Fused scaled dot-product attention (FlashAttention-2's algorithm: Dao, "FlashAttention-2",
// 2023): the scores are made, masked, normalised with an online softmax and multiplied into the
// values one tile at a time, so that no [Tq, Tk] matrix is ever held; backward recomputes the
// tiles from q, k, v and the per-query log-sum-exp that forward keeps. Memory is O(T), not
// O(T^2). Masks: causal, sliding window, packed documents (segment ids), any combination;
// grouped-query attention (fewer key/value heads than query heads); dropout on the attention
// weights drawn from a counter-based stream keyed by (seed, batch, head, query position, key
// position), so backward redraws it and a sequence split over ranks draws what one process
// draws. Queries and keys carry global positions (query_start, key_start), which is what
// context parallelism needs to attend a local block of queries to another rank's keys.
// The CPU backend runs tiled kernels (core/cpu/attention.cc); a backend without them (the
// Backend defaults, core/ops/attention.cc) composes each call from the front-end operations,
// holding the scores only while the call runs. 16-bit inputs compute in f32.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tandem {

// Which keys a query sees. Query i sits at position p = query_start + i, key j at position
// s = key_start + j. Key j is visible to query i when all of these hold:
//   causal:      s <= p;
//   window > 0:  p - s < window, and also s - p < window unless causal (a band around p);
//   segments:    query_segments[b, i] == key_segments[b, j] (packed documents: queries see only
//                keys of their own document; i32 or i64, [B, Tq] and [B, Tk]).
// A query that sees no key gets output 0 and gradient 0 (and log-sum-exp -inf).
struct AttentionMask {
  bool causal = false;
  std::int64_t window = 0;
  Tensor query_segments;
  Tensor key_segments;
  // -1: Tk - Tq, the last Tq of Tk positions (a decoder continuing a sequence).
  std::int64_t query_start = -1;
  std::int64_t key_start = 0;
};

// Dropout on the normalised attention weights: each weight is kept with probability 1 - ratio
// and then scaled by 1 / (1 - ratio). Weight (b, h, p, s) is kept when
// attention_dropout_uniform(seed, b, head_offset + h, p, s) >= ratio (core/attention_dropout.h):
// head_offset is the first local head's global index (tensor parallelism splits heads).
struct AttentionDropout {
  double ratio = 0;
  std::uint64_t seed = 0;
  std::int64_t head_offset = 0;
};

// q [B, Hq, Tq, d], k [B, Hkv, Tk, d], v [B, Hkv, Tk, dv] of one floating dtype on one device,
// Hq a multiple of Hkv (query head h uses key/value head h / (Hq / Hkv)). scale multiplies the
// scores (1 / sqrt(d) for the transformer's attention).
struct AttentionOutput {
  Tensor out;  // [B, Hq, Tq, dv], q's dtype
  Tensor lse;  // [B, Hq, Tq]: log sum over visible keys of exp(scale * q.k) (f32 for 16-bit q)
};
AttentionOutput fused_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                                        double scale, const AttentionDropout& dropout = {});

// The gradients of q, k and v for the output gradient gout, from forward's out and lse. Context
// parallelism calls it per block of keys with the whole row's out and lse (the merged ones), and
// sums the blocks' gradients.
struct AttentionGradients {
  Tensor q, k, v;
};
AttentionGradients fused_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                            const Tensor& lse, const Tensor& gout, const AttentionMask& mask,
                                            double scale, const AttentionDropout& dropout = {});

// The mask as booleans [B, 1, Tq, Tk] (B = 1 without segments), and dropout's keep decisions
// [B, H, Tq, Tk], on the CPU: for the composed reference and for tests.
Tensor attention_visibility(const AttentionMask& mask, std::int64_t batch, std::int64_t tq, std::int64_t tk);
Tensor attention_dropout_keep(const AttentionDropout& dropout, std::int64_t batch, std::int64_t heads,
                              std::int64_t query_start, std::int64_t tq, std::int64_t key_start, std::int64_t tk);

}  // namespace tandem
