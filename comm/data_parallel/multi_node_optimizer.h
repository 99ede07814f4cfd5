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

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "comm/data_parallel/data_parallel_optimizer.h"
#include "comm/transport/communicator.h"
#include "layers/optimizers/optimizer.h"

namespace tandem {

// allreduce_grad_dtype (ChainerMN's argument): the gradients are cast to it, averaged, and cast
// back (DType::bf16 or f16 halve an f32 model's bytes on the wire).
std::shared_ptr<Optimizer> create_multi_node_optimizer(std::shared_ptr<Optimizer> optimizer, CommunicatorPtr comm,
                                                       bool zero_fill = false,
                                                       std::optional<DType> allreduce_grad_dtype = std::nullopt);

// Data parallelism as people run it today (comm/data_parallel/data_parallel_optimizer.h):
// gradients averaged in buckets while backward runs (options.overlap), accumulation with
// NoGradientSync, the optimizer state and gradients sharded over the ranks (options.zero),
// ChainerMN's double_buffering. A parameter used on some ranks only is averaged with zeros from
// the others.
std::shared_ptr<Optimizer> create_multi_node_optimizer(std::shared_ptr<Optimizer> optimizer, CommunicatorPtr comm,
                                                       const DataParallelOptions& options);

// Parameters that live on different sets of ranks: each group's parameters are replicated over
// the ranks of its communicator only (a mixture of experts: the shared parameters over every
// rank, each expert over the ranks that hold the same experts; see moe_parameter_groups).
struct ParameterGroup {
  std::string name;                                     // for errors: "experts"
  CommunicatorPtr comm;                                 // the ranks that hold replicas of them
  std::function<bool(const std::string& path)> contains;  // which parameters, by path
  double grad_scale = 1.0;                              // the mean over comm is multiplied by it
  bool zero_fill = false;                               // as create_multi_node_optimizer's
};

// create_multi_node_optimizer over parameter groups: each group is checked, broadcast (from
// its communicator's rank 0) and averaged over its own communicator, in the order given (every
// rank must pass groups of the same names in the same order). Every parameter must belong to
// exactly one group; one in none or in two is an error naming it and the groups.
std::shared_ptr<Optimizer> create_multi_node_optimizer(std::shared_ptr<Optimizer> optimizer,
                                                       std::vector<ParameterGroup> groups);

}  // namespace tandem
