// The softmax cross-entropy of logits whose vocabulary is split across the ranks of a
// communicator (Megatron-LM's vocab_parallel_cross_entropy): each rank holds its share of the
// classes, logits [N, V_r] (a ColumnParallelLinear without gather_output), never the full
// [N, V]. Forward exchanges only per-row numbers: the ranks' row maxima (allgather), the sums of
// exponentials and the target logits (allreduce), each [N]; backward needs no communication
// (this rank's share of softmax - onehot). The result is the mean over the rows whose target is
// not ignore_label, the same value on every rank, equal to softmax_cross_entropy of the full
// logits. Rank r's classes start after the lower ranks' (their V_q summed), so any split works.
// Targets (the same on every rank): integers in [0, V) or ignore_label; anything else is an error
// naming the target, its row and V on every rank.
#pragma once

#include <cstdint>

#include "autograd/variable.h"
#include "comm/transport/communicator.h"

namespace tandem::functions {

Variable vocab_parallel_softmax_cross_entropy(Communicator& comm, const Variable& logits, const Variable& targets,
                                              std::int64_t ignore_label = -1);

}  // namespace tandem::functions
