// Classifier: wraps a predictor and computes the loss (and accuracy) against labels, as
// Chainer's L.Classifier. It takes (x, t) and returns the loss, so it is the loss function
// the updater and the evaluator call (StandardUpdater(it, optimizer), Evaluator(it, model)):
// classifier->forward(x, t), or forward_many({x, t}) through any Link. The last values are
// kept for reporting (observation()).
#pragma once

#include <functional>
#include <map>

#include "layers/link.h"

namespace tandem {

class Classifier : public Chain {
 public:
  using LossFunction = std::function<Variable(const Variable& y, const Variable& t)>;
  using AccuracyFunction = std::function<Variable(const Variable& y, const Variable& t)>;

  // Defaults: softmax_cross_entropy and accuracy.
  explicit Classifier(LinkPtr predictor, LossFunction lossfun = nullptr, AccuracyFunction accfun = nullptr);

  std::string type_name() const override { return "Classifier"; }
  // {x, t}: returns {the loss of predictor(x) against t}; records y, loss and accuracy.
  // forward(x, t) calls it.
  Variables forward_many(const Variables& xs) override;

  const LinkPtr& predictor() const { return predictor_; }
  const Variable& y() const { return y_; }
  const Variable& loss() const { return loss_; }
  const Variable& accuracy() const { return accuracy_; }
  // {"loss": ..., "accuracy": ...} of the last forward, as plain numbers for reports.
  std::map<std::string, double> observation() const override;

  bool compute_accuracy = true;

 private:
  LinkPtr predictor_;
  LossFunction lossfun_;
  AccuracyFunction accfun_;
  Variable y_, loss_, accuracy_;
};

}  // namespace tandem
