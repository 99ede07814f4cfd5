// Data parallelism over global batches, for the language model's trainer: every rank iterates
// the same global batches, data replica d computes rows share_of(B, d, dp) of each on its
// pipeline, and the loss and observations are averaged over the replicas (weighted by their
// rows). With the multi-node optimizer averaging the gradients over the same replicas, a step
// is then the one-process step on the whole batch, and the log shows the whole batch's loss:
// the run on any number of replicas can be compared with one process line by line.
#pragma once

#include <memory>

#include "comm/context_parallel/context_parallel.h"
#include "comm/pipeline/layout.h"
#include "comm/pipeline/pipeline.h"
#include "training/extensions/evaluator.h"
#include "training/updater.h"

namespace tandem::examples {

// With context parallelism (cp: a group of context-parallel ranks inside layout.data, data
// ranks d cp_size .. (d + 1) cp_size - 1 forming replica d's group), the data group holds
// data_parallel / cp_size replicas, and each rank takes its replica's rows and, of every field,
// its positions of the sequence (axis 1, cp->layout()). The positions split evenly, so the
// average over the data group of each rank's mean loss is the batch's mean.

// This replica's rows of every field of `batch` (and this rank's positions under cp).
Example replica_rows(const Example& batch, const pipeline::ParallelLayout& layout, const ContextParallel* cp = nullptr);

// A pipeline step on this replica's rows; the loss and observation averaged over the replicas.
LossFunction replica_loss(std::shared_ptr<pipeline::Pipeline> pipe, pipeline::ParallelLayout layout,
                          std::shared_ptr<ContextParallel> cp = nullptr);

// An Evaluator whose batches are split over the replicas the same way (every rank must iterate
// the same validation batches).
std::shared_ptr<Evaluator> replica_evaluator(std::shared_ptr<Iterator> iterator,
                                             std::shared_ptr<pipeline::Pipeline> pipe, pipeline::ParallelLayout layout,
                                             std::shared_ptr<ContextParallel> cp = nullptr);

}  // namespace tandem::examples
