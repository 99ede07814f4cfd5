// distributed_gradcheck: the numerical gradient check for functions that several ranks
// compute together (model-parallel pipelines, the differentiable collectives).
//
// Every rank calls it at once with its own inputs (their number and shapes may differ per
// rank) and the same fn, which may communicate. The objective is the sum over all ranks of
// <w, y> over each rank's floating outputs, with fixed random weights w per rank (delegate
// outputs of size 0 only take part in backward). The analytic gradients come from one
// backward on every rank. The numerical ones perturb one input element at a time, in
// lockstep: every rank re-runs fn (without recording) for every element of every rank's
// inputs, and the objective is summed over ranks with an allreduce. The verdict is the same
// on every rank; each rank's report lists its own failures.
#pragma once

#include "autograd/gradcheck.h"
#include "comm/transport/communicator.h"

namespace tandem {

GradcheckResult distributed_gradcheck(Communicator& comm, const GradcheckFunction& fn, const std::vector<Tensor>& inputs,
                                      const GradcheckOptions& options = {});

}  // namespace tandem
