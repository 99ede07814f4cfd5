// The functions that an activation may follow inside them (functions::linear, convolution_2d):
// what they share to apply it, to take in a later F::relu, and to differentiate through it.
#pragma once

#include <cstddef>
#include <string>

#include "autograd/function_node.h"
#include "autograd/functions/fused_activation.h"
#include "core/tensor.h"

namespace tandem {
namespace functions {

// A function with one output that an activation may follow inside it. The subclass computes its
// output, saves what it needs, then calls finish_forward; its backward starts from
// gradient_before_activation.
class FunctionWithActivation : public FunctionNode {
 public:
  explicit FunctionWithActivation(Activation activation) : activation_(activation) {}

  // The ReLU of F::relu(temporary output), taken in after forward (see FunctionNode).
  bool absorb_relu(const Tensor& y) override;

 protected:
  Activation activation() const { return activation_; }
  // "" or "+relu": what the function's name gains (graph dumps, timelines).
  std::string activation_suffix() const;
  // The activation applied to y in place, unless the kernel already did (applied), and y kept
  // for the gradient (after the subclass's saved tensors).
  void finish_forward(Tensor& y, bool applied = false);
  // The gradient before the activation, from gy after it and the kept output (ReLU: gy where
  // y > 0, else 0; the gradient at 0 is 0, as in Chainer).
  Tensor gradient_before_activation(const Tensor& gy) const;

 private:
  void keep_output(const Tensor& y);

  Activation activation_;
  std::size_t output_index_ = 0;  // in saved(), when there is an activation
};

}  // namespace functions
}  // namespace tandem
