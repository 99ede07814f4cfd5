#include "autograd/functions/convolution.h"

#include "autograd/function_node.h"
#include "autograd/functions/function_with_activation.h"
#include "core/ops.h"
#include "core/ops/conv.h"

namespace tandem {
namespace functions {

namespace {

// im2col + GEMM (core/ops/conv.h). Only what backward reads is kept: x when W needs a gradient
// (the columns are recomputed from it rather than stored, 9x smaller for a 3x3 kernel) and W
// when x needs one.
class Convolution2D : public FunctionWithActivation {
 public:
  Convolution2D(const Conv2DParams& params, Activation activation)
      : FunctionWithActivation(activation), params_(params) {}
  std::string name() const override { return "convolution_2d" + activation_suffix(); }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& x = in[0];
    const Tensor& W = in[1];
    const Tensor b = in.size() == 3 ? in[2] : Tensor();
    const bool relu = activation() == Activation::relu;
    Tensor y = tandem::conv2d(x, W, b, params_, relu);  // the ReLU inside the kernel
    x_shape_ = x.shape();
    w_shape_ = W.shape();
    save_for_backward({needs_input_grad(1) ? x : Tensor(), needs_input_grad(0) ? W : Tensor()});
    finish_forward(y, relu);
    return {y};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor gy = gradient_before_activation(grads[0]);
    std::vector<Tensor> out(inputs().size());
    if (needs_input_grad(0)) out[0] = tandem::conv2d_grad_input(gy, saved()[1], x_shape_, params_);
    if (needs_input_grad(1)) out[1] = tandem::conv2d_grad_weight(saved()[0], gy, w_shape_, params_);
    if (out.size() == 3 && needs_input_grad(2)) out[2] = tandem::sum(gy, {0, 2, 3});
    return out;
  }

 private:
  Conv2DParams params_;
  Shape x_shape_, w_shape_;
};

}  // namespace

Variable convolution_2d(const Variable& x, const Variable& W, const Variable& b, const Conv2DOptions& options,
                        Activation activation) {
  if (b.defined()) return call<Convolution2D>({x, W, b}, options, activation)[0];
  return call<Convolution2D>({x, W}, options, activation)[0];
}

}  // namespace functions
}  // namespace tandem
