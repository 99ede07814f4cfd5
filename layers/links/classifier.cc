#include "layers/links/classifier.h"

#include "autograd/functions/evaluation.h"
#include "autograd/functions/loss.h"
#include "autograd/grad_mode.h"

namespace tandem {

Classifier::Classifier(LinkPtr predictor, LossFunction lossfun, AccuracyFunction accfun)
    : predictor_(std::move(predictor)), lossfun_(std::move(lossfun)), accfun_(std::move(accfun)) {
  if (!lossfun_) lossfun_ = [](const Variable& y, const Variable& t) { return functions::softmax_cross_entropy(y, t); };
  if (!accfun_) accfun_ = [](const Variable& y, const Variable& t) { return functions::accuracy(y, t); };
  add_child("predictor", predictor_);
}

Variables Classifier::forward_many(const Variables& xs) {
  TANDEM_CHECK(xs.size() == 2, "Classifier: takes (x, t), the input and the labels, but was given ", xs.size(),
               " input(s)");
  const Variable& t = xs[1];
  y_ = predictor_->forward(xs[0]);
  loss_ = lossfun_(y_, t);
  if (compute_accuracy) {
    NoGradGuard no_grad;
    accuracy_ = accfun_(y_, t);
  }
  return {loss_};
}

std::map<std::string, double> Classifier::observation() const {
  std::map<std::string, double> out;
  if (loss_.defined()) out["loss"] = loss_.data().item();
  if (compute_accuracy && accuracy_.defined()) out["accuracy"] = accuracy_.data().item();
  return out;
}

}  // namespace tandem
