// Gradient clipping by the global norm of a model split over ranks: the norm of the whole
// model's gradient, the same on every rank, as one process of the unsplit model would find it.
// A parameter split by tensor parallelism (TensorParallelLink::split_axes) counts on every rank of
// its group (each holds a different share), a replicated one on tensor rank 0 only, a tied copy
// (tied_parameters.h) on the holder of the first copy only; the squares are summed over the
// model-parallel group (every tensor and pipeline rank of one data-parallel replica), and under
// ZeRO over the shards first (GradientSync::total_over_shards).
#pragma once

#include <memory>
#include <set>
#include <string>

#include "comm/transport/communicator.h"
#include "layers/optimizers/optimizer.h"

namespace tandem {

// `optimizer`: the one the hook is added to (its target and sync name the parameters);
// `tensor_group`: this rank's tensor-parallel group (null: none); `model_group`: the ranks that
// hold the other parts of this replica's model (null: none); `not_counted`: parameter paths in
// the target whose squares another rank counts (the tied copies after the first).
std::shared_ptr<GradientClipping> model_parallel_gradient_clipping(double threshold, Optimizer& optimizer,
                                                                   CommunicatorPtr tensor_group,
                                                                   CommunicatorPtr model_group,
                                                                   std::set<std::string> not_counted = {});

}  // namespace tandem
