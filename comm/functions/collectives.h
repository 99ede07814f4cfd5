// Differentiable collectives: each forward is a collective of the communicator, each backward
// the collective that carries the gradients back (every rank of the communicator calls them
// in the same order, as the forward did).
//
// | function   | forward                              | backward                              |
// | bcast      | root's x to all                      | sum of all ranks' gradients at root   |
// | gather     | root gets one variable per rank;     | scatter of the root's gradients       |
// |            | others get a delegate                |                                       |
// | scatter    | each rank gets its piece             | gather of the gradients to the root   |
// | allgather  | every rank gets every x              | reduce-scatter                        |
// | alltoall   | piece j of rank i goes to rank j     | alltoall of the gradients             |
// | alltoallv  | rows of x to each rank, any lengths  | alltoallv back along the same routes  |
// | allreduce  | sum (or mean) over ranks             | allreduce of the gradients            |
//
// Ranks that pass no data (bcast and scatter away from the root) may pass a delegate
// variable instead (e.g. from gather): it becomes an input, so chains like gather -> bcast
// stay connected and backward from the result runs the gather's backward too. Gradients are
// exchanged only for floating dtypes.
//
// Devices: results land on `device` when it is given (the last argument of bcast, gather and
// scatter, as of recv in point_to_point.h; for gather, the root's variables: the delegate
// elsewhere lives on x's device); otherwise on the device of this rank's (first) input, its data
// or its delegate, and without either (bcast and scatter away from the root) where the
// communicator puts them (communicator.h). Every gradient lands on the device of the input it
// belongs to. Dtypes and shapes travel with the messages: no rank passes them.
#pragma once

#include <optional>

#include "autograd/variable.h"
#include "comm/transport/communicator.h"

namespace tandem::functions {

// x: the data at the root; elsewhere undefined or a delegate.
Variable bcast(Communicator& comm, const Variable& x, int root = 0, std::optional<Device> device = std::nullopt, CallSite site = CallSite::current());
// At the root, one variable per rank; elsewhere a single delegate variable.
Variables gather(Communicator& comm, const Variable& x, int root = 0, std::optional<Device> device = std::nullopt, CallSite site = CallSite::current());
// xs: one variable per rank at the root; elsewhere {} or {delegate}.
Variable scatter(Communicator& comm, const Variables& xs, int root = 0, std::optional<Device> device = std::nullopt, CallSite site = CallSite::current());
Variables allgather(Communicator& comm, const Variable& x, CallSite site = CallSite::current());
Variables alltoall(Communicator& comm, const Variables& xs, CallSite site = CallSite::current());
// Communicator::alltoallv, differentiable: x's rows go out in pieces of send_counts rows (one
// count per rank, zero allowed); returns the rows received, in rank order, and (when asked)
// how many came from each rank. Backward sends each piece's gradient back to where it came from.
Variable alltoallv(Communicator& comm, const Variable& x, const std::vector<std::int64_t>& send_counts,
                   std::vector<std::int64_t>* recv_counts = nullptr, CallSite site = CallSite::current());
Variable allreduce(Communicator& comm, const Variable& x, AllreduceOp op = AllreduceOp::sum, CallSite site = CallSite::current());

}  // namespace tandem::functions
