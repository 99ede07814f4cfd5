// Classifier: wraps a predictor and computes the loss (and accuracy) against labels, as
// Chainer's L.Classifier. The last values are kept for reporting.
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
  // Returns the loss of predictor(x) against t; records y, loss and accuracy.
  Variable forward(const Variable& x, const Variable& t);

  const LinkPtr& predictor() const { return predictor_; }
  const Variable& y() const { return y_; }
  const Variable& loss() const { return loss_; }
  const Variable& accuracy() const { return accuracy_; }
  // {"loss": ..., "accuracy": ...} of the last forward, as plain numbers for reports.
  std::map<std::string, double> observation() const;

  bool compute_accuracy = true;

 private:
  LinkPtr predictor_;
  LossFunction lossfun_;
  AccuracyFunction accfun_;
  Variable y_, loss_, accuracy_;
};

}  // namespace tandem
