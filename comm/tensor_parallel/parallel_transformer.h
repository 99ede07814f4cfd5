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
//
// sequence_parallel (Megatron-LM's sequence parallelism, tensor_parallel_linear.h): the block's
// input and output are this rank's positions of the sequence, [T_r, B, dim], sequence first
// (rank r holds positions share_of(T, r)), so the layer norms and residuals of TransformerBlock
// run on 1/ranks of the activations; the branches gather the positions on the way in and
// reduce-scatter them on the way out. The layer norms' and the row-parallel biases' gradients are
// then this rank's parts: sum them over the group (sequence_parallel_parameters).
#pragma once

#include <string>
#include <vector>

#include "autograd/functions/attention.h"
#include "comm/tensor_parallel/tensor_parallel_linear.h"
#include "layers/links/transformer.h"

namespace tandem {

class ParallelSelfAttention : public Chain {
 public:
  ParallelSelfAttention(CommunicatorPtr comm, std::int64_t dim, std::int64_t heads, bool causal = true,
                        LinearOptions options = {}, bool sequence_parallel = false);
  std::string type_name() const override { return "ParallelSelfAttention"; }
  // x, y: [B, T, dim], the same on every rank; sequence parallel: [T_r, B, dim], this rank's positions.
  Variable forward(const Variable& x) override;
  std::int64_t local_heads() const { return local_heads_; }
  // How this rank's heads attend (functions::attention when empty): context parallelism sets its own.
  void set_attention(functions::AttentionFunction attend) { attend_ = std::move(attend); }

 private:
  functions::AttentionFunction attend_;
  std::int64_t dim_, local_heads_, first_head_;
  bool causal_, sequence_parallel_;
  std::shared_ptr<ColumnParallelLinear> qkv_;
  std::shared_ptr<RowParallelLinear> proj_;
};

class ParallelMLP : public Chain {
 public:
  ParallelMLP(CommunicatorPtr comm, std::int64_t dim, std::int64_t hidden, LinearOptions options = {},
              bool sequence_parallel = false);
  std::string type_name() const override { return "ParallelMLP"; }
  Variable forward(const Variable& x) override;

 private:
  std::shared_ptr<ColumnParallelLinear> fc1_;
  std::shared_ptr<RowParallelLinear> fc2_;
  bool sequence_parallel_ = false;
};

// A TransformerBlock whose attention and MLP are split over comm: the parallel counterpart of
// TransformerBlock(dim, options), drawing its weights in the same order.
std::shared_ptr<TransformerBlock> make_parallel_transformer_block(CommunicatorPtr comm, std::int64_t dim,
                                                                  TransformerBlockOptions options = {},
                                                                  bool sequence_parallel = false);

// The parameters of such a block whose gradients each rank computes a part of under sequence
// parallelism (paths in the block): the layer norms' and the row-parallel biases.
std::vector<std::string> sequence_parallel_parameters(const TransformerBlock& block);

}  // namespace tandem
