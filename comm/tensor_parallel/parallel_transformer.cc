#include "comm/tensor_parallel/parallel_transformer.h"

#include "autograd/functions/activation.h"
#include "autograd/functions/array.h"
#include "autograd/functions/attention.h"

namespace tandem {

ParallelSelfAttention::ParallelSelfAttention(CommunicatorPtr comm, std::int64_t dim, std::int64_t heads, bool causal,
                                             LinearOptions options, bool sequence_parallel)
    : dim_(dim), causal_(causal), sequence_parallel_(sequence_parallel) {
  TANDEM_CHECK(comm != nullptr, "ParallelSelfAttention: a communicator is required");
  const int ranks = comm->size();
  TANDEM_CHECK(dim > 0 && heads > 0 && dim % heads == 0, "ParallelSelfAttention: dim ", dim,
               " must be a positive multiple of heads ", heads);
  TANDEM_CHECK(heads % ranks == 0, "ParallelSelfAttention: ", heads, " heads do not split evenly over the ", ranks,
               " ranks of the tensor-parallel group (each rank attends with whole heads: use a multiple of ", ranks,
               " heads)");
  local_heads_ = heads / ranks;
  first_head_ = comm->rank() * local_heads_;
  // share_of(3 dim) and share_of(dim) then fall on head boundaries: rank r holds heads
  // [r * local_heads, (r + 1) * local_heads) of both.
  qkv_ = add_link("qkv", std::make_shared<ColumnParallelLinear>(comm, dim, 3 * dim, false, options));
  proj_ = add_link("proj", std::make_shared<RowParallelLinear>(comm, dim, dim, true, options));
  qkv_->set_sequence_parallel(sequence_parallel);
  proj_->set_sequence_parallel(sequence_parallel);
}

Variable ParallelSelfAttention::forward(const Variable& x) {
  TANDEM_CHECK(x.defined() && x.dim() == 3 && x.shape()[2] == dim_, "ParallelSelfAttention: input must be ",
               sequence_parallel_ ? "[T_r, B, " : "[B, T, ", dim_, "], got ",
               x.defined() ? x.description() : std::string("undefined"));
  if (!sequence_parallel_) {
    const Variable heads =
        functions::multi_head_self_attention(forward_last_axis(*qkv_, x), local_heads_, causal_, attend_, first_head_);
    return forward_last_axis(*proj_, heads);
  }
  // qkv gathers every rank's positions, [T, B, 3 dim / ranks], which attention takes batch first;
  // proj reduce-scatters the heads' products back to this rank's positions.
  const Variable qkv = qkv_->forward(x);
  const Variable heads = functions::multi_head_self_attention(functions::transpose(qkv, {1, 0, 2}), local_heads_,
                                                              causal_, attend_, first_head_);
  return proj_->forward(functions::transpose(heads, {1, 0, 2}));
}

ParallelMLP::ParallelMLP(CommunicatorPtr comm, std::int64_t dim, std::int64_t hidden, LinearOptions options,
                         bool sequence_parallel) {
  TANDEM_CHECK(comm != nullptr, "ParallelMLP: a communicator is required");
  fc1_ = add_link("fc1", std::make_shared<ColumnParallelLinear>(comm, dim, hidden, false, options));
  fc2_ = add_link("fc2", std::make_shared<RowParallelLinear>(comm, hidden, dim, true, options));
  fc1_->set_sequence_parallel(sequence_parallel);
  fc2_->set_sequence_parallel(sequence_parallel);
  sequence_parallel_ = sequence_parallel;
}

Variable ParallelMLP::forward(const Variable& x) {
  if (!sequence_parallel_) return forward_last_axis(*fc2_, functions::gelu(forward_last_axis(*fc1_, x)));
  // fc1 gathers every rank's positions, fc2 reduce-scatters them back to this rank's.
  return fc2_->forward(functions::gelu(fc1_->forward(x)));
}

std::shared_ptr<TransformerBlock> make_parallel_transformer_block(CommunicatorPtr comm, std::int64_t dim,
                                                                  TransformerBlockOptions options,
                                                                  bool sequence_parallel) {
  TANDEM_CHECK(options.mlp_ratio > 0, "make_parallel_transformer_block: mlp_ratio must be positive, got ",
               options.mlp_ratio);
  // The same order as TransformerBlock(dim, options): qkv, proj, fc1, fc2.
  auto attention = std::make_shared<ParallelSelfAttention>(comm, dim, options.heads, options.causal, options.linear,
                                                           sequence_parallel);
  auto mlp = std::make_shared<ParallelMLP>(comm, dim, options.mlp_ratio * dim, options.linear, sequence_parallel);
  return std::make_shared<TransformerBlock>(dim, attention, mlp, options.eps, options.linear.dtype);
}

std::vector<std::string> sequence_parallel_parameters(const TransformerBlock& block) {
  (void)block;  // TransformerBlock's structure: the names are fixed
  return {"ln1/gamma", "ln1/beta", "ln2/gamma", "ln2/beta", "attention/proj/b", "mlp/fc2/b"};
}

}  // namespace tandem
