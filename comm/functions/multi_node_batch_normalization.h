// Batch normalisation over the global batch of a data-parallel job (ChainerMN's
// multi_node_batch_normalization): each rank passes its own part of the batch, and the
// per-channel mean and variance are those of all ranks' examples together (one allreduce of
// the per-channel sums in forward, one in backward). Each rank's parts may differ in size,
// even be empty, as long as the global batch is not.
//
// Gradients: x's gradient is that of the sum of all ranks' losses (the statistics tie every
// rank's output to every rank's input, so the backward allreduces the per-channel gradient sums);
// gamma's and beta's are this rank's own, to be averaged across ranks with the other parameter
// gradients (create_multi_node_optimizer). Averaged, every gradient then equals that of one
// process normalising the concatenated batch and taking the mean of the ranks' mean losses.
// The backward allreduce is skipped when x needs no gradient (e.g. normalising the input
// data), which the replicated model decides alike on every rank.
#pragma once

#include "autograd/variable.h"
#include "comm/transport/communicator.h"

namespace tandem::functions {

// As batch_normalization (autograd/functions/normalization.h), with the statistics over the
// communicator's global batch. running_mean / running_var are updated with the global
// statistics (the unbiased variance uses the global count), so they stay equal on every rank.
Variable multi_node_batch_normalization(Communicator& comm, const Variable& x, const Variable& gamma,
                                        const Variable& beta, double eps = 2e-5, Tensor* running_mean = nullptr,
                                        Tensor* running_var = nullptr, double decay = 0.9);

}  // namespace tandem::functions
