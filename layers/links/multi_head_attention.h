// MultiHeadSelfAttention: GPT's causal self-attention block. One projection makes every head's
// query, key and value (children "qkv", Linear(dim, 3 dim), packed per head as
// functions::multi_head_self_attention takes them), the heads attend, and "proj"
// (Linear(dim, dim)) mixes their outputs:
//   y = proj(multi_head_self_attention(qkv(x), heads, causal))      x, y: [B, T, dim]
// The tensor-parallel form (comm/tensor_parallel/parallel_transformer.h) splits the same two projections
// by heads over ranks; with the same initialiser both start from the same weights.
#pragma once

#include "autograd/functions/attention.h"
#include "layers/links/linear.h"

namespace tandem {

class MultiHeadSelfAttention : public Chain {
 public:
  // dim must be a multiple of heads (head size dim / heads). options apply to both projections
  // (qkv's W is drawn first, then proj's).
  MultiHeadSelfAttention(std::int64_t dim, std::int64_t heads, bool causal = true, LinearOptions options = {});
  std::string type_name() const override { return "MultiHeadSelfAttention"; }
  Variable forward(const Variable& x) override;
  std::int64_t heads() const { return heads_; }
  // How the heads attend (functions::attention when empty): context parallelism sets its own.
  void set_attention(functions::AttentionFunction attend) { attend_ = std::move(attend); }

 private:
  functions::AttentionFunction attend_;
  std::int64_t dim_, heads_;
  bool causal_;
  std::shared_ptr<Linear> qkv_, proj_;
};

}  // namespace tandem
