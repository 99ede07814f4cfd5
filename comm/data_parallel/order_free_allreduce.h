// Deterministic mode's data-parallel sum (core/deterministic.h): gradients combined over ranks
// so that the result is one function of the set of all ranks' gradient terms, whatever the
// number of ranks, their order or how the terms were spread over them.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/variable.h"
#include "comm/transport/communicator.h"

namespace tandem {

// Every rank passes the same parameters (checked with `digest`, naming `operation`); a
// parameter without a gradient on this rank takes part as an empty sum. Afterwards each has the
// gradient (the sum over the ranks of its order-free sum) x scale, rounded. Two collectives: an
// allgather of each element's top level (as 4 bytes), then an allreduce of the aligned slices
// (OrderFreeSum::kLevels doubles), which adds exactly in any order.
void order_free_allreduce_grads(Communicator& comm, std::vector<Variable>& params, double scale, std::uint64_t digest,
                                const char* operation);

// The number of gradient groups over the ranks of `comm` (record_gradient_group; a rank that
// counted none, having run its own backward passes, counts as one), divided by `share` (the
// fraction of the batch's groups these ranks see, 1 for the whole data-parallel group): the
// divisor of the average.
std::int64_t gradient_groups_over(Communicator& comm, double share, std::uint64_t digest, const char* operation);

}  // namespace tandem
