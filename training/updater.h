// The updater: one training step per call. StandardUpdater draws a batch from its iterator,
// computes the loss, backpropagates and updates the optimizer's target. As in Chainer, the
// target is the loss function unless one is given: the model takes the batch's fields
// (Classifier: x, t) and returns the loss, and reports observation() ("loss", "accuracy").
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "autograd/variable.h"
#include "data/iterator.h"
#include "layers/optimizers/optimizer.h"
#include "training/digests.h"

namespace tandem {

// Values reported by one step or one evaluation, by name ("main/loss").
using Observation = std::map<std::string, double>;

struct LossResult {
  Variable loss;
  Observation observation;  // reported under "main/<name>"; "loss" is added automatically
  // The loss function has already run backward itself (a pipeline step runs each microbatch's
  // backward when its schedule says): the updater only updates. loss is then the value to report.
  bool backward_done = false;
};

// Computes the loss of one batch (the fields of the batch as the iterator stacked them).
using LossFunction = std::function<LossResult(const Example& batch)>;

// Runs `model` on one batch, as Chainer's updater and evaluator call target(*batch): the
// batch's fields, moved to the model's device (Chainer's converter), are its inputs
// (forward_many); its one output is returned.
Variable forward_batch(Link& model, const Example& batch);

class StandardUpdater {
 public:
  // Chainer's StandardUpdater(iterator, optimizer): each step calls the optimizer's target on
  // the batch (forward_batch). Its output is the loss, or on a rank of a model-parallel model
  // without the loss the delegate variable (size 0), on which backward() runs this rank's part.
  // Reports the target's observation() under "main/", and "main/loss" when the output is a
  // scalar; so a rank with a delegate (a MultiNodeChainList, say) reports nothing, as in ChainerMN.
  StandardUpdater(std::shared_ptr<Iterator> iterator, std::shared_ptr<Optimizer> optimizer);
  // With a loss function of the batch, which returns the loss and the values to report.
  StandardUpdater(std::shared_ptr<Iterator> iterator, std::shared_ptr<Optimizer> optimizer, LossFunction loss);

  // One step; returns its observation ("main/loss", ...).
  Observation update();

  // Gradient accumulation: each step draws k batches, runs forward and backward on each with
  // its loss divided by k, and updates once (the step of one batch k times larger when the
  // batches are equal in size). The first k - 1 backward passes run under NoGradientSync, so a
  // data-parallel optimizer averages once per step. Reports the mean of the k observations.
  void set_accumulation(int k);
  int accumulation() const { return accumulation_; }

  std::int64_t iteration() const { return iteration_; }
  std::int64_t epoch() const { return iterator_->epoch(); }
  double epoch_detail() const { return iterator_->epoch_detail(); }
  // Whether the last step crossed into a new epoch: with gradient accumulation, in any of its
  // batches (the iterator's own flag says so of the last batch only).
  bool is_new_epoch() const { return last_step_new_epoch_; }
  // Examples in the last batch (for items/s).
  std::int64_t last_batch_size() const { return last_batch_size_; }
  // The last step's loss (or delegate) variable, with the graph behind it (its saved tensors
  // freed by backward), for DumpGraph; let go when the next step starts.
  const Variable& last_loss() const { return last_loss_; }

  Iterator& iterator() { return *iterator_; }
  Optimizer& optimizer() { return *optimizer_; }
  void set_iteration(std::int64_t iteration) { iteration_ = iteration; }

  // Records a digest of every parameter, activation and gradient of every step from now on, to
  // <dir>/digests.rank<R>.tsv (training/digests.h); TANDEM_DIGESTS=<dir> sets it for every
  // updater. "" stops.
  void record_digests(const std::string& dir);

 private:
  std::shared_ptr<Iterator> iterator_;
  std::shared_ptr<Optimizer> optimizer_;
  LossFunction loss_;
  std::int64_t iteration_ = 0;
  std::int64_t last_batch_size_ = 0;
  Variable last_loss_;
  int accumulation_ = 1;
  bool last_step_new_epoch_ = false;
  std::shared_ptr<DigestRecorder> digests_;
};

// The loss function for a Classifier-like model with batches {x, t}: what
// StandardUpdater(iterator, optimizer) does when the model is the optimizer's target.
template <typename Model>
LossFunction classifier_loss(std::shared_ptr<Model> model) {
  return [model](const Example& batch) {
    TANDEM_CHECK(batch.size() == 2, "classifier_loss: batches must have 2 fields (x, t), got ", batch.size());
    LossResult result;
    // The iterator stacks batches on the host; they go to the model's device (Chainer's converter).
    result.loss = model->forward(Variable(batch[0].to(model->device())), Variable(batch[1].to(model->device())));
    result.observation = model->observation();
    return result;
  };
}

}  // namespace tandem
