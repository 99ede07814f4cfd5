// Deterministic mode: a run that is bit-identical not only to itself (which every run is, see
// core/kernel_choices.h) but across thread counts, data-parallel degrees at the same global
// batch, gradient accumulation and microbatching (docs/reproducibility.md).
//
//   TANDEM_DETERMINISTIC=1, or set_deterministic(true) before the first backward.
//
// (The CUDA backend reads the same variable: its convolutions keep to deterministic cuDNN
// algorithms unless it is 0, cuda/cuda.h. Deterministic mode is about the CPU's sums.)
//
// What it changes:
// - A parameter's gradient is the order-free sum (core/order_free_sum.h) of every gradient that
//   backward delivers to it (autograd/engine.cc): whatever order microbatches, time steps or
//   accumulation steps arrive in, and however the terms are split over ranks, the sum is one
//   function of the set of terms. Data-parallel optimizers combine the ranks' sums the same way
//   (comm/data_parallel/order_free_allreduce.h) and average by the number of groups.
// - Losses are not scaled by how a batch was split: each group's backward starts from the
//   gradient of its own mean loss (a group: a batch the loss function receives, a pipeline's
//   microbatch, or deterministic_group_size() examples of a batch), and the averaged gradient is
//   the sum over all groups of the global batch divided once by their number
//   (record_gradient_group counts them). The groups of a step must be equal in size.
// - The kernels take choices that do not depend on the thread count (core/cpu: GEMM on
//   OpenBLAS, no packed copies, no timing).
#pragma once

#include <cstdint>

namespace tandem {

// TANDEM_DETERMINISTIC (0 or 1) unless set_deterministic was called.
bool deterministic();
void set_deterministic(bool on);

// Examples per gradient group in StandardUpdater (TANDEM_DETERMINISTIC_GROUP; 0, the default: the
// batches the loss function receives are the groups, or a pipeline's microbatches). Layouts to
// be compared must compute the same groups: e.g. batch 12 on one rank and 4 on each of 3 ranks
// compare with groups of 4 (or 2, or 1); the group size must divide every rank's batch.
std::int64_t deterministic_group_size();
void set_deterministic_group_size(std::int64_t examples);

// The gradient groups whose backward ran since the last update (one per group's loss; a
// pipeline counts each microbatch once): the divisor of the averaged gradient. The optimizer
// resets the count after each update.
void record_gradient_group();
std::int64_t gradient_groups();
void reset_gradient_groups();

}  // namespace tandem
