// BatchNormalization (Chainer's L.BatchNormalization): normalises over every axis but the
// channel axis 1 with learned scale gamma and shift beta. In training it uses the batch's
// statistics and updates the running averages avg_mean/avg_var (persistent buffers, saved
// with the model); in test mode (TrainModeGuard(false) or set_train(false)) it uses them.
#pragma once

#include "layers/link.h"

namespace tandem {

class BatchNormalization : public Link {
 public:
  explicit BatchNormalization(std::int64_t size, double decay = 0.9, double eps = 2e-5, DType dtype = DType::f32);
  std::string type_name() const override { return "BatchNormalization"; }
  Variable forward(const Variable& x) override;

  Variable& gamma() { return param("gamma"); }
  Variable& beta() { return param("beta"); }
  double decay() const { return decay_; }
  double eps() const { return eps_; }

  // Makes forward() run `replacement` instead: a link that holds this one's very parameters and
  // buffers (create_mnbn_model's MultiNodeBatchNormalization), put in this link's place in the
  // model. A chain that calls its BatchNormalization through a member pointer, not through
  // children(), then reaches the replacement too. Null restores this link's own forward.
  void forward_to(LinkPtr replacement) { replacement_ = std::move(replacement); }
  const LinkPtr& replacement() const { return replacement_; }

 protected:
  // N += 1, in place on the link's device: no host round trip (reading N with item() made every
  // training step wait for the GPU), and N stays where to() put it.
  void count_batch();

  double decay_, eps_;

 private:
  LinkPtr replacement_;
};

}  // namespace tandem
