#include "layers/links/multi_head_attention.h"

#include "autograd/functions/attention.h"

namespace tandem {

MultiHeadSelfAttention::MultiHeadSelfAttention(std::int64_t dim, std::int64_t heads, bool causal, LinearOptions options)
    : dim_(dim), heads_(heads), causal_(causal) {
  TANDEM_CHECK(dim > 0 && heads > 0 && dim % heads == 0, "MultiHeadSelfAttention: dim ", dim,
               " must be a positive multiple of heads ", heads);
  qkv_ = add_link("qkv", std::make_shared<Linear>(dim, 3 * dim, options));
  proj_ = add_link("proj", std::make_shared<Linear>(dim, dim, options));
}

Variable MultiHeadSelfAttention::forward(const Variable& x) {
  TANDEM_CHECK(x.defined() && x.dim() == 3 && x.shape()[2] == dim_, "MultiHeadSelfAttention: input must be [B, T, ",
               dim_, "], got ", x.defined() ? x.description() : std::string("undefined"));
  const Variable heads = functions::multi_head_self_attention(forward_last_axis(*qkv_, x), heads_, causal_, attend_);
  return forward_last_axis(*proj_, heads);
}

}  // namespace tandem
