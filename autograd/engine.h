// The backward engine: the tape walk.
//
// Every FunctionNode receives a strictly increasing sequence number when it is created.
// backward() collects the nodes reachable from its outputs and runs them in strictly
// decreasing sequence number, iteratively (no recursion over graph depth), accumulating the
// gradients of variables used more than once before their creator runs.
//
// Why the order is part of the communication protocol: communication functions (comm/send,
// recv, collectives) are graph nodes whose backward is the mirror message. If two ranks
// communicated in the order X1, X2, ... during forward, each rank's nodes for those messages
// have increasing sequence numbers, so backward visits them in exactly the reverse order
// ..., X2', X1' on every rank, and the paired sends and receives meet instead of deadlocking.
// Any other traversal (depth-first from the loss, ready-queue by dependency count alone) can
// reorder independent branches differently on two ranks and hang. Do not change this order.
#pragma once

#include <vector>

#include "autograd/variable.h"

namespace tandem {

// Backpropagates from several outputs at once, each with its own seed (an undefined seed:
// ones for a scalar output, none for a size-0 delegate variable).
void backward(const Variables& outputs, const std::vector<Tensor>& seeds, const BackwardOptions& options = {});

}  // namespace tandem
