// Adam with Chainer's bias correction and options:
//   m += (1 - beta1)(g - m);  v += (1 - beta2)(g^2 - v);  vhat = max(vhat, v) if amsgrad
//   alpha_t = alpha sqrt(1 - beta2^t) / (1 - beta1^t)
//   p -= eta (alpha_t m / (sqrt(v or vhat) + eps) + weight_decay_rate p)
// (weight decay here is decoupled, as in AdamW).
// PyTorch's Adam and AdamW add eps to the bias-corrected sqrt(v / (1 - beta2^t)) instead, which
// is the rule above with eps sqrt(1 - beta2^t): eps_on_corrected_v chooses that. PyTorch's
// AdamW(lr, weight_decay wd) at a scheduled lr_t is then alpha = lr, eta = lr_t / lr and
// weight_decay_rate = lr wd (decoupled decay eta weight_decay_rate = lr_t wd).
#pragma once

#include <functional>
#include <string>

#include "layers/optimizers/optimizer.h"

namespace tandem {

struct AdamOptions {
  double alpha = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, eta = 1.0, weight_decay_rate = 0;
  bool amsgrad = false;
  bool eps_on_corrected_v = false;  // PyTorch's eps (see above)
  // The parameters weight_decay_rate applies to, by name (Optimizer::updating()); null: all.
  // GPT-2's training decays the matrices and embeddings, not the biases and LayerNorms.
  std::function<bool(const std::string& name)> decays;
};

class Adam : public Optimizer {
 public:
  explicit Adam(AdamOptions options = {});
  Adam(double alpha, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8, double weight_decay_rate = 0,
       bool amsgrad = false);
  std::string type_name() const override { return "Adam"; }
  // The bias-corrected step size of the current update.
  double alpha_t() const;

  AdamOptions hyperparam;

 protected:
  void init_state(const Variable& param, State& state) override;
  void update_one(Variable& param, State& state) override;
};

}  // namespace tandem
