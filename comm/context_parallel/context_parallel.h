// Context parallelism: a sequence split over the ranks of a group (SequenceLayout), every layer
// but attention working on its own positions, and attention exchanging what it needs:
//   ring (ulysses_ranks 1): keys and values travel around the ring, R - 1 steps, each rank
//     attending its queries to the block it holds while the next block is in flight (Liu et al.,
//     "Ring Attention"; torchtitan, Megatron-LM's p2p); partial results merge by their
//     log-sum-exp; backward sends the keys' and values' gradients around with them;
//   all-to-all (ulysses_ranks R): DeepSpeed Ulysses: an all-to-all trades the split of positions
//     for a split of heads, each rank attends whole sequences of its heads, a second all-to-all
//     trades back; any number of heads over any number of ranks (uneven shares; a rank may get
//     none), grouped-query attention's key/value heads sent to every rank whose query heads read
//     them;
//   hybrid (1 < ulysses_ranks < R): all-to-all inside groups of ulysses_ranks consecutive ranks,
//     a ring across the groups: for more ranks than heads.
// Every mask of core/ops/attention.h works in every mode (positions are global; segment ids are
// given for the whole sequence), as does dropout (drawn by global position and head: the same
// weights as one process drops). The result equals one process's attention to rounding.
#pragma once

#include <memory>
#include <vector>

#include "autograd/functions/attention.h"
#include "comm/context_parallel/sequence_layout.h"
#include "comm/transport/communicator.h"
#include "layers/link.h"

namespace tandem {

class ContextParallel {
 public:
  // Collective over comm (it splits comm into the all-to-all and ring groups): every rank calls it
  // with the same layout (layout.ranks() == comm->size()) and ulysses_ranks, which must divide
  // comm->size().
  ContextParallel(std::shared_ptr<Communicator> comm, SequenceLayout layout, int ulysses_ranks = 1);

  // q [B, Hq, T_r, d], k [B, Hkv, T_r, d], v [B, Hkv, T_r, dv]: this rank's positions of the
  // sequence (layout().runs(rank)). options.mask: causal, window, and segment ids [B, T] of the
  // WHOLE sequence (the same on every rank); query_start and key_start must be left at their
  // defaults (the layout gives the positions). Returns this rank's rows of the output,
  // [B, Hq, T_r, dv]. Collective: every rank of the group calls it, in the same order.
  Variable attention(const Variable& q, const Variable& k, const Variable& v,
                     const functions::AttentionOptions& options = {}) const;

  // This rank's rows of a whole sequence along `axis`, and the whole sequence from this rank's
  // rows (an allgather), both differentiable.
  Variable shard(const Variable& x, std::int64_t axis) const;
  Variable unshard(const Variable& local, std::int64_t axis) const;

  const SequenceLayout& layout() const { return layout_; }
  Communicator& communicator() const { return *comm_; }
  int ulysses_ranks() const { return ulysses_ranks_; }

 private:
  std::shared_ptr<Communicator> comm_, ulysses_comm_, ring_comm_;
  SequenceLayout layout_, ring_layout_;
  int ulysses_ranks_;
};

// Makes the self-attention of every block (a TransformerBlock's child "attention":
// MultiHeadSelfAttention or ParallelSelfAttention) attend through cp. Errors naming the link
// otherwise.
void attend_through(std::shared_ptr<ContextParallel> cp, const std::vector<LinkPtr>& blocks);

}  // namespace tandem
