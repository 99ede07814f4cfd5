#include "layers/optimizers/sgd.h"

#include "core/ops.h"

namespace tandem {

// The parameter's tensor handle shares its storage, so the fused kernels update it in place.
void SGD::update_one(Variable& param, State&) {
  Tensor data = param.data();
  sgd_update_(data, param.grad(), lr);
}

void MomentumSGD::init_state(const Variable& param, State& state) { state["v"] = zeros_like(param.data()); }

void MomentumSGD::update_one(Variable& param, State& state) {
  Tensor data = param.data();
  momentum_sgd_update_(data, param.grad(), state.at("v"), lr, momentum);
}

}  // namespace tandem
