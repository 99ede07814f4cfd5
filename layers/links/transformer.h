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
  double eps = 1e-5;           // the layer norms' (PyTorch's default)
  LinearOptions linear;        // every projection's (its dtype the layer norms' too); drawn in the
                               // order qkv, proj, fc1, fc2
};

class TransformerBlock : public Chain {
 public:
  // The single-process block: MultiHeadSelfAttention and TransformerMLP.
  TransformerBlock(std::int64_t dim, TransformerBlockOptions options = {});
  // A block around given branches (each [B, T, dim] -> [B, T, dim]); the layer norms in dtype.
  TransformerBlock(std::int64_t dim, LinkPtr attention, LinkPtr mlp, double eps = 1e-5, DType dtype = DType::f32);
  std::string type_name() const override { return "TransformerBlock"; }
  Variable forward(const Variable& x) override;

 private:
  void build(LinkPtr attention, LinkPtr mlp, double eps, DType dtype);
  std::int64_t dim_;
  std::shared_ptr<LayerNormalization> ln1_, ln2_;
  LinkPtr attention_, mlp_;
};

}  // namespace tandem
