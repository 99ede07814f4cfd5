// The transformer's block (GPT-2's pre-norm form) and its MLP.
//
// TransformerMLP: fc2(gelu(fc1(x))), fc1 = Linear(dim, hidden), fc2 = Linear(hidden, dim), over
// the last axis of x [..., dim].
//
// TransformerBlock: two residual branches, each behind a LayerNormalization:
//   h = x + attention(ln1(x));   y = h + mlp(ln2(h))                 x, h, y: [B, T, dim]
// The branches are any links of that shape: MultiHeadSelfAttention and TransformerMLP by
// default, or their tensor-parallel forms (comm/tensor_parallel/parallel_transformer.h), so the block is
// written once. Children: "ln1", "attention", "ln2", "mlp".
//
// Activation checkpointing (autograd/checkpoint.h) per branch: set_recompute({.mlp = true}) keeps
// only the MLP branch's input and recomputes ln2, fc1, gelu and fc2 in backward; .attention does
// the same for ln1, qkv, attention and proj; both recompute the whole block. The fused attention
// itself keeps no scores either way (its backward recomputes them: Megatron-LM's "selective"
// recompute is built in). training/recompute_budget.h chooses the branches for a memory budget.
#pragma once

#include "layers/links/layer_normalization.h"
#include "layers/links/linear.h"

namespace tandem {

class TransformerMLP : public Chain {
 public:
  // options apply to both layers (fc1's W is drawn first).
  TransformerMLP(std::int64_t dim, std::int64_t hidden, LinearOptions options = {});
  std::string type_name() const override { return "TransformerMLP"; }
  Variable forward(const Variable& x) override;

 private:
  std::shared_ptr<Linear> fc1_, fc2_;
};

struct TransformerBlockOptions {
  std::int64_t heads = 4;
  std::int64_t mlp_ratio = 4;  // the MLP's hidden size is mlp_ratio * dim
  bool causal = true;
  double eps = 1e-5;     // the layer norms' (PyTorch's default)
  LinearOptions linear;  // every projection's (its dtype the layer norms' too); drawn in the
                         // order qkv, proj, fc1, fc2
};

// Which branches of a block recompute their activations in backward instead of keeping them.
struct Recompute {
  bool attention = false;
  bool mlp = false;
  bool operator==(const Recompute& other) const { return attention == other.attention && mlp == other.mlp; }
};

class TransformerBlock : public Chain {
 public:
  // The single-process block: MultiHeadSelfAttention and TransformerMLP.
  TransformerBlock(std::int64_t dim, TransformerBlockOptions options = {});
  // A block around given branches (each [B, T, dim] -> [B, T, dim]); the layer norms in dtype.
  TransformerBlock(std::int64_t dim, LinkPtr attention, LinkPtr mlp, double eps = 1e-5, DType dtype = DType::f32);
  std::string type_name() const override { return "TransformerBlock"; }
  Variable forward(const Variable& x) override;
  void set_recompute(Recompute recompute) { recompute_ = recompute; }
  Recompute recompute() const { return recompute_; }

 private:
  void build(LinkPtr attention, LinkPtr mlp, double eps, DType dtype);
  Recompute recompute_;
  std::int64_t dim_;
  std::shared_ptr<LayerNormalization> ln1_, ln2_;
  LinkPtr attention_, mlp_;
};

}  // namespace tandem
