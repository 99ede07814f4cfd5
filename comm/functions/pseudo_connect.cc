#include "comm/functions/pseudo_connect.h"

#include "autograd/function_node.h"
#include "core/error.h"

namespace tandem::functions {

namespace {

class PseudoConnect final : public FunctionNode {
 public:
  std::string name() const override { return "pseudo_connect"; }
  bool always_run_backward() const override { return true; }

  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override {
    delegate_shape_ = inputs[0].shape();
    delegate_dtype_ = inputs[0].dtype();
    delegate_device_ = inputs[0].device();
    return std::vector<Tensor>(inputs.begin() + 1, inputs.end());
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    std::vector<Tensor> grads{zeros(delegate_shape_, delegate_dtype_, delegate_device_)};
    grads.insert(grads.end(), grad_outputs.begin(), grad_outputs.end());
    return grads;
  }

 private:
  Shape delegate_shape_;
  DType delegate_dtype_ = DType::f32;
  Device delegate_device_;
};

}  // namespace

Variables pseudo_connect(const Variable& delegate, const Variables& actual) {
  TANDEM_CHECK(delegate.defined(), "pseudo_connect: the delegate variable is undefined");
  TANDEM_CHECK(!actual.empty(), "pseudo_connect: no actual variables to connect the delegate to");
  Variables inputs{delegate};
  inputs.insert(inputs.end(), actual.begin(), actual.end());
  return call<PseudoConnect>(inputs);
}

Variable pseudo_connect(const Variable& delegate, const Variable& actual) {
  return pseudo_connect(delegate, Variables{actual})[0];
}

}  // namespace tandem::functions
