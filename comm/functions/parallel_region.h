// The two halves of a layer whose output channels are split across ranks (tensor model
// parallelism, as in ParallelConvolution2D). Every rank holds the same full input, computes its
// own share of the output channels, and every rank ends up with the same full output; the loss
// is then computed identically on every rank. Named, as in Megatron-LM, by what the forward and
// the backward do:
//
// | function                    | forward                              | backward                     |
// | copy_to_parallel_region     | identity                             | sum of all ranks' gradients  |
// | gather_from_parallel_region | allgather, concat along `axis`       | this rank's slice of gy      |
//
// Why not allgather + concat as they stand: allgather's backward is a reduce-scatter, which
// assumes each rank's loss is its own; here every rank computes the same loss from the same
// full output, so a reduce-scatter would multiply the gradient by the number of ranks. And x
// feeds every rank's share, so its gradient is the sum over ranks, not any one rank's part.
//
// Both need the graph to be replicated: every rank calls them in the same order with the same
// shapes (the data from a multi-node iterator, the replicated layers seeded alike).
#pragma once

#include "autograd/variable.h"
#include "comm/transport/communicator.h"

namespace tandem::functions {

// Identity; in backward, an allreduce (sum) of x's gradient. Recorded only when x requires a
// gradient (on every rank alike, the graph being replicated), so plain input data costs nothing.
Variable copy_to_parallel_region(Communicator& comm, const Variable& x);

// Allgather of each rank's share y (shapes equal except along `axis`), concatenated in rank
// order along `axis`; in backward, the slice of the full output's gradient that y produced.
Variable gather_from_parallel_region(Communicator& comm, const Variable& y, std::int64_t axis = 1);

}  // namespace tandem::functions
