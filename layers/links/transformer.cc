#include "layers/links/transformer.h"

#include "autograd/checkpoint.h"
#include "autograd/functions/activation.h"
#include "autograd/functions/arithmetic.h"
#include "layers/links/multi_head_attention.h"

namespace tandem {

TransformerMLP::TransformerMLP(std::int64_t dim, std::int64_t hidden, LinearOptions options) {
  TANDEM_CHECK(dim > 0 && hidden > 0, "TransformerMLP: dim and hidden must be positive, got ", dim, " and ", hidden);
  fc1_ = add_link("fc1", std::make_shared<Linear>(dim, hidden, options));
  fc2_ = add_link("fc2", std::make_shared<Linear>(hidden, dim, options));
}

Variable TransformerMLP::forward(const Variable& x) {
  return forward_last_axis(*fc2_, functions::gelu(forward_last_axis(*fc1_, x)));
}

TransformerBlock::TransformerBlock(std::int64_t dim, TransformerBlockOptions options) : dim_(dim) {
  TANDEM_CHECK(dim > 0 && options.mlp_ratio > 0, "TransformerBlock: dim and mlp_ratio must be positive, got ", dim,
               " and ", options.mlp_ratio);
  // Constructed in this order so the initialiser draws qkv, proj, fc1, fc2, as the parallel form does.
  auto attention = std::make_shared<MultiHeadSelfAttention>(dim, options.heads, options.causal, options.linear);
  auto mlp = std::make_shared<TransformerMLP>(dim, options.mlp_ratio * dim, options.linear);
  build(attention, mlp, options.eps, options.linear.dtype);
}

TransformerBlock::TransformerBlock(std::int64_t dim, LinkPtr attention, LinkPtr mlp, double eps, DType dtype)
    : dim_(dim) {
  TANDEM_CHECK(dim > 0, "TransformerBlock: dim must be positive, got ", dim);
  TANDEM_CHECK(attention && mlp, "TransformerBlock: the attention and MLP branches must be links, not null");
  build(std::move(attention), std::move(mlp), eps, dtype);
}

void TransformerBlock::build(LinkPtr attention, LinkPtr mlp, double eps, DType dtype) {
  ln1_ = add_link("ln1", std::make_shared<LayerNormalization>(dim_, eps, dtype));
  attention_ = add_link("attention", std::move(attention));
  ln2_ = add_link("ln2", std::make_shared<LayerNormalization>(dim_, eps, dtype));
  mlp_ = add_link("mlp", std::move(mlp));
}

Variable TransformerBlock::forward(const Variable& x) {
  TANDEM_CHECK(x.defined() && x.dim() == 3 && x.shape()[2] == dim_, "TransformerBlock: input must be [B, T, ", dim_,
               "], got ", x.defined() ? x.description() : std::string("undefined"));
  // Each branch as a function of its input, so that checkpoint() can run it again.
  const auto attention = [this](const Variable& in) { return attention_->forward((*ln1_)(in)); };
  const auto mlp = [this](const Variable& in) { return mlp_->forward((*ln2_)(in)); };
  const Variable h = functions::add(x, recompute_.attention ? checkpoint(attention, x) : attention(x));
  return functions::add(h, recompute_.mlp ? checkpoint(mlp, h) : mlp(h));
}

}  // namespace tandem
