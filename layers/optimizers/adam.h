// Adam with Chainer's bias correction and options:
//   m += (1 - beta1)(g - m);  v += (1 - beta2)(g^2 - v);  vhat = max(vhat, v) if amsgrad
//   alpha_t = alpha sqrt(1 - beta2^t) / (1 - beta1^t)
//   p -= eta (alpha_t m / (sqrt(v or vhat) + eps) + weight_decay_rate p)
// (weight decay here is decoupled, as in AdamW).
#pragma once

#include "layers/optimizers/optimizer.h"

namespace tandem {

struct AdamOptions {
  double alpha = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, eta = 1.0, weight_decay_rate = 0;
  bool amsgrad = false;
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
