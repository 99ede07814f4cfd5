#include "autograd/functions/function_with_activation.h"

#include "core/ops.h"

namespace tandem {
namespace functions {

bool FunctionWithActivation::absorb_relu(const Tensor& y) {
  if (activation_ != Activation::none) return false;  // a second ReLU stays a function of its own
  activation_ = Activation::relu;
  keep_output(y);
  return true;
}

std::string FunctionWithActivation::activation_suffix() const {
  return activation_ == Activation::relu ? "+relu" : "";
}

void FunctionWithActivation::finish_forward(Tensor& y, bool applied) {
  if (activation_ == Activation::none) return;
  if (!applied) relu_(y);
  keep_output(y);
}

Tensor FunctionWithActivation::gradient_before_activation(const Tensor& gy) const {
  if (activation_ == Activation::none) return gy;
  return relu_grad(gy, saved()[output_index_]);
}

void FunctionWithActivation::keep_output(const Tensor& y) {
  output_index_ = saved().size();
  save_also(y);
}

}  // namespace functions
}  // namespace tandem
