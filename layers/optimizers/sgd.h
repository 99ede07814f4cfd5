// SGD (p -= lr * g) and MomentumSGD (v = momentum * v - lr * g; p += v), as in Chainer.
#pragma once

#include "layers/optimizers/optimizer.h"

namespace tandem {

class SGD : public Optimizer {
 public:
  explicit SGD(double lr = 0.01) : lr(lr) {}
  std::string type_name() const override { return "SGD"; }
  double lr;

 protected:
  void init_state(const Variable&, State&) override {}
  void update_one(Variable& param, State& state) override;
};

class MomentumSGD : public Optimizer {
 public:
  explicit MomentumSGD(double lr = 0.01, double momentum = 0.9) : lr(lr), momentum(momentum) {}
  std::string type_name() const override { return "MomentumSGD"; }
  double lr, momentum;

 protected:
  void init_state(const Variable& param, State& state) override;
  void update_one(Variable& param, State& state) override;
};

}  // namespace tandem
