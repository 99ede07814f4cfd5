// Deterministic mode: a run that is bit-identical not only to itself (which every run is, see
// core/kernel_choices.h) but across thread counts, data-parallel degrees at the same global
// batch, gradient accumulation and microbatching (docs/reproducibility.md).
//
//   TANDEM_DETERMINISTIC=1, or set_deterministic(true) before the first backward.
//
// What it changes:
// - A parameter's gradient is the order-free sum (core/order_free_sum.h) of every gradient that
//   backward delivers to it (autograd/engine.cc): whatever order microbatches, time steps or
//   accumulation steps arrive in, and however the terms are split over ranks, the sum is one
//   function of the set of terms. Data-parallel optimizers combine the ranks' sums the same way
//   (comm/data_parallel/order_free_allreduce.h) and average by the number of groups.
// - Losses are not scaled by how a batch was split: each group's backward starts from the
//   gradient of its own mean loss (StandardUpdater splits every batch into groups of
//   deterministic_group_size() examples), and the averaged gradient is the sum over all groups
//   of the global batch divided once by their number (record_gradient_group counts them).
// - The kernels take choices that do not depend on the thread count (core/cpu: GEMM on
//   OpenBLAS, no packed copies, no timing).
#pragma once

#include <cstdint>

namespace tandem {

// TANDEM_DETERMINISTIC (0 or 1) unless set_deterministic was called.
bool deterministic();
void set_deterministic(bool on);

// Examples per group (TANDEM_DETERMINISTIC_GROUP, default 1): a batch whose size is a multiple
// of it is computed group by group. Every layout to be compared must split its batches into the
// same groups: the group size must divide every rank's share of the batch.
std::int64_t deterministic_group_size();
void set_deterministic_group_size(std::int64_t examples);

// The groups whose gradients were added since the count was last taken (one per backward of a
// group's loss; a pipeline counts each microbatch once): the divisor of the averaged gradient.
void record_gradient_group();
std::int64_t take_gradient_groups();

}  // namespace tandem
