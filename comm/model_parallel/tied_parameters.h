// Parameters that several pipeline stages hold copies of: GPT-2's token embedding, which the
// first stage looks ids up in and the last stage's head multiplies by (Megatron-LM's "embedding
// group"). Each copy starts from the same values; every update, before the hooks (clipping) and
// the update rule, the copies' gradients are summed over every copy on every rank that holds one,
// so each copy gets the gradient of the one shared weight and the same update, and they stay
// equal (bit for bit: the same sum, in the same order, on every holder).
//
//   // before optimizer->setup(pipe), after create_multi_node_optimizer (if any):
//   tie_parameters(*optimizer, tie_group, {"1/wte/W"});   // this rank's copies, by path in the target
//
// The sum comes first, then the inner sync (data parallelism) averages over the replicas: the
// copies' gradients must still be this rank's own, so a data-parallel sync under it must not
// average while backward runs: give it DataParallelOptions::overlap = false.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/transport/communicator.h"
#include "layers/optimizers/optimizer.h"

namespace tandem {

// Wraps the optimizer's gradient sync (or none) with the sum of the tied copies. `group`: the
// ranks holding copies (null or 1 rank: this rank's copies only); `paths`: this rank's copies,
// parameter paths in the optimizer's target (at least one). Every rank of the group must tie the
// same parameter (same shape and dtype, checked at the first update, an error naming both ranks).
void tie_parameters(Optimizer& optimizer, CommunicatorPtr group, std::vector<std::string> paths);

// Parameters every rank of `group` holds whole but computes only a part of the gradient of
// (sequence parallelism: the layer norms and the row-parallel biases see this rank's positions
// only, comm/tensor_parallel/parallel_transformer.h): before the update, each one's gradient is
// summed over the group (one allreduce for all of them), then the wrapped sync runs, as above.
void sum_gradients_over(Optimizer& optimizer, CommunicatorPtr group, std::vector<std::string> paths);

}  // namespace tandem
