// The pipeline in the Trainer (training/): an updater whose step is a pipeline step, and an
// evaluator that runs the pipeline forward only, microbatched.
//
// Every rank of a pipeline iterates the same batches (the same dataset, iterator and seed: the
// first stage takes the inputs, the last stage the labels); ranks without the first or last
// stage may iterate the same data or an empty dataset of the same length (create_empty_dataset).
// The step's loss and the last stage's observation reach every rank of the pipeline, so each
// rank reports "main/loss" (and "main/accuracy" from a Classifier) and the evaluator reports the
// same numbers everywhere: LogReport and PrintReport work on any rank.
//
//   auto updater = create_pipeline_updater(train_iter, optimizer, pipe);
//   Trainer trainer(updater, Trigger::epochs(10), out, pipe);
//   trainer.extend(create_pipeline_evaluator(test_iter, pipe));
//
// With pipeline × data parallelism (layout.h) the optimizer is a multi-node optimizer over the
// ranks that hold the same stages, and the evaluator a multi-node evaluator over them.
#pragma once

#include <memory>

#include "comm/pipeline/pipeline.h"
#include "training/extensions/evaluator.h"
#include "training/updater.h"

namespace tandem {
namespace pipeline {

// The loss function of a pipeline step (StandardUpdater's third argument): runs pipe->step on
// the batch (which runs every backward), and returns the loss with backward_done set.
LossFunction pipeline_loss(std::shared_ptr<Pipeline> pipe);

// StandardUpdater(iterator, optimizer, pipeline_loss(pipe)); the optimizer's target is pipe.
std::shared_ptr<StandardUpdater> create_pipeline_updater(std::shared_ptr<Iterator> iterator,
                                                         std::shared_ptr<Optimizer> optimizer,
                                                         std::shared_ptr<Pipeline> pipe);

// Evaluator(iterator, eval) whose eval runs pipe->evaluate on each batch and returns the last
// stage's observation with "loss" (Pipeline::evaluate: a short last batch goes in fewer
// microbatches, so every rank must iterate the real data here).
std::shared_ptr<Evaluator> create_pipeline_evaluator(std::shared_ptr<Iterator> iterator,
                                                     std::shared_ptr<Pipeline> pipe);

}  // namespace pipeline
}  // namespace tandem
