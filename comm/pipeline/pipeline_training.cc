#include "comm/pipeline/pipeline_training.h"

namespace tandem {
namespace pipeline {

LossFunction pipeline_loss(std::shared_ptr<Pipeline> pipe) {
  TANDEM_CHECK(pipe != nullptr, "pipeline_loss: a pipeline is required");
  return [pipe](const Example& batch) {
    const StepResult step = pipe->step(batch);
    LossResult result;
    result.loss = Variable(full({}, step.loss, DType::f64));
    result.observation = step.observation;
    result.observation.erase("loss");  // the updater reports the loss itself
    result.backward_done = true;
    return result;
  };
}

std::shared_ptr<StandardUpdater> create_pipeline_updater(std::shared_ptr<Iterator> iterator,
                                                         std::shared_ptr<Optimizer> optimizer,
                                                         std::shared_ptr<Pipeline> pipe) {
  return std::make_shared<StandardUpdater>(std::move(iterator), std::move(optimizer), pipeline_loss(std::move(pipe)));
}

std::shared_ptr<Evaluator> create_pipeline_evaluator(std::shared_ptr<Iterator> iterator,
                                                     std::shared_ptr<Pipeline> pipe) {
  TANDEM_CHECK(pipe != nullptr, "create_pipeline_evaluator: a pipeline is required");
  return std::make_shared<Evaluator>(std::move(iterator), [pipe](const Example& batch) {
    const StepResult step = pipe->evaluate(batch);
    Observation observation = step.observation;
    observation["loss"] = step.loss;
    return observation;
  });
}

}  // namespace pipeline
}  // namespace tandem
