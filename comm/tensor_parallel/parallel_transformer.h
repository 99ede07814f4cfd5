// The transformer's branches in Megatron-LM's tensor-parallel form, split over the ranks of a
// communicator (the tensor-parallel group), for TransformerBlock (layers/links/transformer.h):
//
// ParallelSelfAttention: "qkv" is a ColumnParallelLinear(dim, 3 dim) whose features are packed
// per head (functions::multi_head_self_attention), so rank r's share is whole heads: it attends
// with its heads only, and "proj", a RowParallelLinear(dim, dim), takes its heads' outputs and
// sums the ranks' partial products. One allreduce forward (proj's), one backward (qkv's input).
// ParallelMLP: "fc1" ColumnParallelLinear(dim, hidden) -> gelu -> "fc2" RowParallelLinear(hidden, dim).
//
// With the same initialiser as the single-process MultiHeadSelfAttention / TransformerMLP (the
// whole weights are drawn in the same order, each rank keeping its share), the split model
// starts as the unsplit one, and computes the same values and gradients up to float rounding.
// Heads must split evenly (heads a multiple of the group's size), so every rank's share of qkv
// is whole heads; the MLP's hidden size may split unevenly (share_of).
#pragma once

#include "comm/tensor_parallel/tensor_parallel_linear.h"
#include "layers/links/transformer.h"

namespace tandem {

class ParallelSelfAttention : public Chain {
 public:
  ParallelSelfAttention(CommunicatorPtr comm, std::int64_t dim, std::int64_t heads, bool causal = true,
                        LinearOptions options = {});
  std::string type_name() const override { return "ParallelSelfAttention"; }
  Variable forward(const Variable& x) override;  // x, y: [B, T, dim], the same on every rank
  std::int64_t local_heads() const { return local_heads_; }

 private:
  std::int64_t dim_, local_heads_;
  bool causal_;
  std::shared_ptr<ColumnParallelLinear> qkv_;
  std::shared_ptr<RowParallelLinear> proj_;
};

class ParallelMLP : public Chain {
 public:
  ParallelMLP(CommunicatorPtr comm, std::int64_t dim, std::int64_t hidden, LinearOptions options = {});
  std::string type_name() const override { return "ParallelMLP"; }
  Variable forward(const Variable& x) override;

 private:
  std::shared_ptr<ColumnParallelLinear> fc1_;
  std::shared_ptr<RowParallelLinear> fc2_;
};

// A TransformerBlock whose attention and MLP are split over comm: the parallel counterpart of
// TransformerBlock(dim, options), drawing its weights in the same order.
std::shared_ptr<TransformerBlock> make_parallel_transformer_block(CommunicatorPtr comm, std::int64_t dim,
                                                                  TransformerBlockOptions options = {});

}  // namespace tandem
