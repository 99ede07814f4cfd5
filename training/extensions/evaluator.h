// Evaluator: runs the model over a validation iterator in test mode without recording a
// graph, and reports the example-weighted means as "validation/main/<name>".
#pragma once

#include <functional>

#include "training/trainer.h"

namespace tandem {

class Evaluator : public Extension {
 public:
  // eval returns the observation of one batch (e.g. {"loss": .., "accuracy": ..}). The
  // iterator must not repeat; it is reset before each evaluation.
  using EvalFunction = std::function<Observation(const Example& batch)>;
  Evaluator(std::shared_ptr<Iterator> iterator, EvalFunction eval, std::string prefix = "validation");
  // Chainer's Evaluator(iterator, target): runs the model on each batch (forward_batch) and
  // reports its observation() (Classifier: loss and accuracy); a rank of a model-parallel model
  // without the loss reports nothing but takes part in every batch.
  Evaluator(std::shared_ptr<Iterator> iterator, std::shared_ptr<Link> model, std::string prefix = "validation");

  std::string name() const override { return "Evaluator"; }
  int priority() const override { return 300; }
  void operator()(Trainer& trainer) override;
  // Runs the evaluation alone and returns the means (keys without the prefix).
  Observation evaluate();

 private:
  std::shared_ptr<Iterator> iterator_;
  EvalFunction eval_;
  std::string prefix_;
};

// The evaluation of a Classifier-like model with batches {x, t}: what Evaluator(iterator,
// model) does.
template <typename Model>
Evaluator::EvalFunction classifier_eval(std::shared_ptr<Model> model) {
  return [model](const Example& batch) {
    model->forward(Variable(batch[0].to(model->device())), Variable(batch[1].to(model->device())));
    return model->observation();
  };
}

}  // namespace tandem
