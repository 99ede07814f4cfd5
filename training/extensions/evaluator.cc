#include "training/extensions/evaluator.h"

#include "autograd/grad_mode.h"

namespace tandem {

Evaluator::Evaluator(std::shared_ptr<Iterator> iterator, EvalFunction eval, std::string prefix)
    : iterator_(std::move(iterator)), eval_(std::move(eval)), prefix_(std::move(prefix)) {
  TANDEM_CHECK(iterator_ && eval_, "Evaluator: iterator and evaluation function are required");
}

Evaluator::Evaluator(std::shared_ptr<Iterator> iterator, std::shared_ptr<Link> model, std::string prefix)
    : Evaluator(std::move(iterator), model == nullptr ? EvalFunction() : [model](const Example& batch) {
        forward_batch(*model, batch);
        return model->observation();
      }, std::move(prefix)) {}

Observation Evaluator::evaluate() {
  NoGradGuard no_grad;
  TrainModeGuard test_mode(false);
  iterator_->reset();
  Observation sums;
  double examples = 0;
  while (iterator_->has_next()) {
    const Example batch = iterator_->next();
    const double n = batch.empty() || batch[0].shape().empty() ? 1.0 : static_cast<double>(batch[0].shape()[0]);
    // A repeating iterator never runs out: it would wrap into a second pass (and on forever).
    TANDEM_CHECK(!iterator_->is_new_epoch() || !iterator_->has_next(), "Evaluator: the validation iterator repeats; "
                 "create it with repeat = false");
    for (const auto& [key, value] : eval_(batch)) sums[key] += value * n;
    examples += n;
  }
  TANDEM_CHECK(examples > 0, "Evaluator: the validation iterator yielded no batch");
  for (auto& entry : sums) entry.second /= examples;
  return sums;
}

void Evaluator::operator()(Trainer& trainer) {
  for (const auto& [key, value] : evaluate()) trainer.observation()[prefix_ + "/main/" + key] = value;
}

}  // namespace tandem
