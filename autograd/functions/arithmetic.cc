#include "autograd/functions/arithmetic.h"

#include "autograd/function_node.h"
#include "core/ops.h"

namespace tandem {
namespace functions {

namespace {

// Shared by the binary functions: remembers the input shapes so gradients can be reduced
// back from the broadcast shape.
class BroadcastBinary : public FunctionNode {
 protected:
  void remember_shapes(const std::vector<Tensor>& in) {
    a_shape_ = in[0].shape();
    b_shape_ = in[1].shape();
  }
  Tensor to_a(const Tensor& g) const { return sum_to(g, a_shape_); }
  Tensor to_b(const Tensor& g) const { return sum_to(g, b_shape_); }
  Shape a_shape_, b_shape_;
};

class Add : public BroadcastBinary {
 public:
  std::string name() const override { return "add"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    remember_shapes(in);
    return {tandem::add(in[0], in[1])};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    return {needs_input_grad(0) ? to_a(gy[0]) : Tensor(), needs_input_grad(1) ? to_b(gy[0]) : Tensor()};
  }
};

class Sub : public BroadcastBinary {
 public:
  std::string name() const override { return "sub"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    remember_shapes(in);
    return {tandem::sub(in[0], in[1])};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    return {needs_input_grad(0) ? to_a(gy[0]) : Tensor(), needs_input_grad(1) ? to_b(tandem::neg(gy[0])) : Tensor()};
  }
};

class Mul : public BroadcastBinary {
 public:
  std::string name() const override { return "mul"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    remember_shapes(in);
    save_for_backward({needs_input_grad(1) ? in[0] : Tensor(), needs_input_grad(0) ? in[1] : Tensor()});
    return {tandem::mul(in[0], in[1])};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    const Tensor& a = saved()[0];
    const Tensor& b = saved()[1];
    return {needs_input_grad(0) ? to_a(tandem::mul(gy[0], b)) : Tensor(),
            needs_input_grad(1) ? to_b(tandem::mul(gy[0], a)) : Tensor()};
  }
};

class Div : public BroadcastBinary {
 public:
  std::string name() const override { return "div"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    remember_shapes(in);
    Tensor y = tandem::div(in[0], in[1]);
    save_for_backward({in[1], needs_input_grad(1) ? y : Tensor()});
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    const Tensor& b = saved()[0];
    const Tensor ga = tandem::div(gy[0], b);  // d(a/b)/da = 1/b; d(a/b)/db = -(a/b)/b
    return {needs_input_grad(0) ? to_a(ga) : Tensor(),
            needs_input_grad(1) ? to_b(tandem::neg(tandem::mul(ga, saved()[1]))) : Tensor()};
  }
};

// y = scale * x + shift, covering neg, x + c and x * c.
class ScaleShift : public FunctionNode {
 public:
  ScaleShift(const char* name, double scale, double shift) : name_(name), scale_(scale), shift_(shift) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    return {tandem::scale_shift(in[0], scale_, shift_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    return {scale_ == 1 ? gy[0] : tandem::mul(gy[0], scale_)};
  }

 private:
  const char* name_;
  double scale_, shift_;
};

class RDiv : public FunctionNode {
 public:
  explicit RDiv(double c) : c_(c) {}
  std::string name() const override { return "rdiv"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    Tensor y = tandem::rdiv(c_, in[0]);
    save_for_backward({in[0], y});
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    // d(c/x)/dx = -c/x^2 = -y/x
    return {tandem::neg(tandem::mul(gy[0], tandem::div(saved()[1], saved()[0])))};
  }

 private:
  double c_;
};

class PowScalar : public FunctionNode {
 public:
  explicit PowScalar(double p) : p_(p) {}
  std::string name() const override { return "pow"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    save_for_backward({in[0]});
    return {tandem::pow(in[0], p_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    const Tensor& x = saved()[0];
    const Tensor dx = p_ == 2 ? tandem::mul(x, 2.0) : tandem::mul(tandem::pow(x, p_ - 1), p_);
    return {tandem::mul(gy[0], dx)};
  }

 private:
  double p_;
};

}  // namespace

Variable add(const Variable& a, const Variable& b) { return call<Add>({a, b})[0]; }
Variable sub(const Variable& a, const Variable& b) { return call<Sub>({a, b})[0]; }
Variable mul(const Variable& a, const Variable& b) { return call<Mul>({a, b})[0]; }
Variable div(const Variable& a, const Variable& b) { return call<Div>({a, b})[0]; }
Variable neg(const Variable& x) { return call<ScaleShift>({x}, "neg", -1.0, 0.0)[0]; }
Variable add(const Variable& x, double c) { return call<ScaleShift>({x}, "add_constant", 1.0, c)[0]; }
Variable mul(const Variable& x, double c) { return call<ScaleShift>({x}, "mul_constant", c, 0.0)[0]; }
Variable rsub(double c, const Variable& x) { return call<ScaleShift>({x}, "rsub_constant", -1.0, c)[0]; }
Variable rdiv(double c, const Variable& x) { return call<RDiv>({x}, c)[0]; }
Variable pow(const Variable& x, double exponent) { return call<PowScalar>({x}, exponent)[0]; }

}  // namespace functions
}  // namespace tandem
