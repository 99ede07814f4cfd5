// AllreducePersistent (chainermn.extensions.AllreducePersistent): averages a model's persistent
// buffers over the ranks. In data-parallel training the parameters stay equal on every rank, but
// buffers that the forward pass updates from the local batch (BatchNormalization's running
// avg_mean and avg_var) drift apart; averaging them before evaluating and snapshotting makes
// every rank hold, and report with, the same model.
//
//   trainer.extend(std::make_shared<AllreducePersistent>(model, comm));  // every epoch
#pragma once

#include <memory>

#include "comm/transport/communicator.h"
#include "layers/link.h"
#include "training/trainer.h"

namespace tandem {

// Replaces every floating-point persistent buffer of `link` and its descendants (f32, f64) by its
// mean over the ranks of `comm`, with one packed allreduce per dtype. Integer buffers
// (BatchNormalization's batch count N) are left as they are, as in ChainerMN: the mean of
// counts is no count, and in lockstep data-parallel training every rank's are equal anyway.
// Parameters are not touched (the multi-node optimizer keeps them equal).
// Collective: every rank must call it, with a model whose floating buffers have the same names,
// dtypes and shapes; otherwise it is an error on every rank, before any buffer changes. A model
// without floating buffers still takes part (one empty allreduce), so that a rank whose model
// lacks them fails with the others instead of leaving them waiting.
void allreduce_persistent(Communicator& comm, Link& link);

class AllreducePersistent final : public Extension {
 public:
  AllreducePersistent(std::shared_ptr<Link> model, CommunicatorPtr comm);
  std::string name() const override { return "AllreducePersistent"; }
  // ChainerMN's trigger: (1, 'epoch').
  Trigger default_trigger() const override { return Trigger::epochs(1); }
  // Just before the evaluators (300), as ChainerMN's PRIORITY_WRITER + 1: evaluation and the
  // snapshots of the same iteration see the averaged buffers.
  int priority() const override { return 301; }
  void operator()(Trainer& trainer) override;

 private:
  std::shared_ptr<Link> model_;
  CommunicatorPtr comm_;
};

}  // namespace tandem
