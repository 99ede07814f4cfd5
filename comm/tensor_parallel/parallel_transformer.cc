#include "comm/tensor_parallel/parallel_transformer.h"

#include "autograd/functions/activation.h"
#include "autograd/functions/attention.h"

namespace tandem {

ParallelSelfAttention::ParallelSelfAttention(CommunicatorPtr comm, std::int64_t dim, std::int64_t heads, bool causal,
                                             LinearOptions options)
    : dim_(dim), causal_(causal) {
  TANDEM_CHECK(comm != nullptr, "ParallelSelfAttention: a communicator is required");
  const int ranks = comm->size();
  TANDEM_CHECK(dim > 0 && heads > 0 && dim % heads == 0, "ParallelSelfAttention: dim ", dim,
               " must be a positive multiple of heads ", heads);
  TANDEM_CHECK(heads % ranks == 0, "ParallelSelfAttention: ", heads, " heads do not split evenly over the ", ranks,
               " ranks of the tensor-parallel group (each rank attends with whole heads: use a multiple of ", ranks,
               " heads)");
  local_heads_ = heads / ranks;
  // share_of(3 dim) and share_of(dim) then fall on head boundaries: rank r holds heads
  // [r * local_heads, (r + 1) * local_heads) of both.
  qkv_ = add_link("qkv", std::make_shared<ColumnParallelLinear>(comm, dim, 3 * dim, false, options));
  proj_ = add_link("proj", std::make_shared<RowParallelLinear>(comm, dim, dim, true, options));
}

Variable ParallelSelfAttention::forward(const Variable& x) {
  TANDEM_CHECK(x.defined() && x.dim() == 3 && x.shape()[2] == dim_, "ParallelSelfAttention: input must be [B, T, ",
               dim_, "], got ", x.defined() ? x.description() : std::string("undefined"));
  const Variable heads = functions::multi_head_self_attention(forward_last_axis(*qkv_, x), local_heads_, causal_);
  return forward_last_axis(*proj_, heads);
}

ParallelMLP::ParallelMLP(CommunicatorPtr comm, std::int64_t dim, std::int64_t hidden, LinearOptions options) {
  TANDEM_CHECK(comm != nullptr, "ParallelMLP: a communicator is required");
  fc1_ = add_link("fc1", std::make_shared<ColumnParallelLinear>(comm, dim, hidden, false, options));
  fc2_ = add_link("fc2", std::make_shared<RowParallelLinear>(comm, hidden, dim, true, options));
}

Variable ParallelMLP::forward(const Variable& x) {
  return forward_last_axis(*fc2_, functions::gelu(forward_last_axis(*fc1_, x)));
}

std::shared_ptr<TransformerBlock> make_parallel_transformer_block(CommunicatorPtr comm, std::int64_t dim,
                                                                  TransformerBlockOptions options) {
  TANDEM_CHECK(options.mlp_ratio > 0, "make_parallel_transformer_block: mlp_ratio must be positive, got ",
               options.mlp_ratio);
  // The same order as TransformerBlock(dim, options): qkv, proj, fc1, fc2.
  auto attention = std::make_shared<ParallelSelfAttention>(comm, dim, options.heads, options.causal, options.linear);
  auto mlp = std::make_shared<ParallelMLP>(comm, dim, options.mlp_ratio * dim, options.linear);
  return std::make_shared<TransformerBlock>(dim, attention, mlp, options.eps, options.linear.dtype);
}

}  // namespace tandem
