#include "autograd/functions/activation.h"

#include "autograd/functions/arithmetic.h"

#include "autograd/function_node.h"
#include "autograd/grad_mode.h"
#include "core/ops.h"
#include "core/timeline.h"

namespace tandem {
namespace functions {

namespace {

class Relu : public FunctionNode {
 public:
  std::string name() const override { return "relu"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    Tensor y = tandem::relu(in[0]);
    save_for_backward({y});
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    // The gradient at exactly 0 is taken as 0, as in Chainer.
    return {tandem::relu_grad(gy[0], saved()[0])};
  }
};

class LeakyRelu : public FunctionNode {
 public:
  explicit LeakyRelu(double slope) : slope_(slope) {}
  std::string name() const override { return "leaky_relu"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    save_for_backward({in[0]});
    return {tandem::leaky_relu(in[0], slope_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    return {where(greater(saved()[0], 0.0), gy[0], tandem::mul(gy[0], slope_))};
  }

 private:
  double slope_;
};

class Sigmoid : public FunctionNode {
 public:
  std::string name() const override { return "sigmoid"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    Tensor y = tandem::sigmoid(in[0]);
    save_for_backward({y});
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    const Tensor& y = saved()[0];
    return {tandem::mul(gy[0], tandem::mul(y, tandem::rsub(1.0, y)))};  // y (1 - y)
  }
};

class Tanh : public FunctionNode {
 public:
  std::string name() const override { return "tanh"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    Tensor y = tandem::tanh(in[0]);
    save_for_backward({y});
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    const Tensor& y = saved()[0];
    return {tandem::mul(gy[0], tandem::rsub(1.0, tandem::square(y)))};  // 1 - y^2
  }
};

}  // namespace

Variable relu(Variable&& x) {
  if (x.defined() && x.exclusively_owned()) {
    const std::shared_ptr<FunctionNode>& creator = x.creator();
    // Plain data (no graph behind it, none to record), or a creator that takes the ReLU in.
    const bool in_place = creator ? grad_enabled() && creator->absorb_relu(x.data()) : !x.requires_grad();
    if (in_place) {
      const timeline::SpanScope span("forward", timeline::enabled() ? "relu (in place)" : std::string());
      Tensor data = x.data();
      relu_(data);
      return std::move(x);
    }
  }
  return relu(static_cast<const Variable&>(x));
}

namespace {

// One pass forward and one backward (from the saved input), where the composed form took eight
// elementwise functions and their gradients: a transformer's MLP spends its elementwise time here.
class Gelu : public FunctionNode {
 public:
  std::string name() const override { return "gelu"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    save_for_backward({in[0]});
    return {tandem::gelu(in[0])};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    return {tandem::gelu_grad(gy[0], saved()[0])};
  }
};

}  // namespace

Variable relu(const Variable& x) { return call<Relu>({x})[0]; }
Variable leaky_relu(const Variable& x, double slope) { return call<LeakyRelu>({x}, slope)[0]; }
Variable sigmoid(const Variable& x) { return call<Sigmoid>({x})[0]; }
Variable tanh(const Variable& x) { return call<Tanh>({x})[0]; }

Variable gelu(const Variable& x) { return call<Gelu>({x})[0]; }

}  // namespace functions
}  // namespace tandem
