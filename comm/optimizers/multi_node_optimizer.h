// Data parallelism for any optimizer (chainermn.create_multi_node_optimizer).
//
// The returned optimizer is the one passed in, with a gradient sync installed. Its first
// update, and any later update whose parameter set changed (a lazily sized layer appeared),
// first checks whether the replicas are equal on every rank (a digest of the values, one small
// allgather). If not, it broadcasts rank 0's parameters to every rank instead of updating (the
// gradients came from other weights), as ChainerMN always does; if they are (the same seed, or
// resumed from the same snapshot), it updates, so resuming loses no step. Every update that
// goes ahead first averages the gradients over the ranks with one packed allreduce
// (Communicator::multi_node_mean_grad), then runs the hooks and the update rule as usual. A parameter
// without a gradient on every rank is skipped (not updated); one without a gradient on some ranks
// only counts as zeros there with zero_fill, and is an error on every rank otherwise.
#pragma once

#include "comm/transport/communicator.h"
#include "layers/optimizers/optimizer.h"

namespace tandem {

std::shared_ptr<Optimizer> create_multi_node_optimizer(std::shared_ptr<Optimizer> optimizer, CommunicatorPtr comm,
                                                       bool zero_fill = false);

}  // namespace tandem
