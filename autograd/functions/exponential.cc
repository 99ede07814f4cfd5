#include "autograd/functions/exponential.h"

#include "autograd/function_node.h"
#include "core/ops.h"

namespace tandem {
namespace functions {

namespace {

class Exp : public FunctionNode {
 public:
  std::string name() const override { return "exp"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    Tensor y = tandem::exp(in[0]);
    save_for_backward({y});
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override { return {tandem::mul(gy[0], saved()[0])}; }
};

class Log : public FunctionNode {
 public:
  std::string name() const override { return "log"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    save_for_backward({in[0]});
    return {tandem::log(in[0])};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override { return {tandem::div(gy[0], saved()[0])}; }
};

class Sqrt : public FunctionNode {
 public:
  std::string name() const override { return "sqrt"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    Tensor y = tandem::sqrt(in[0]);
    save_for_backward({y});
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    return {tandem::div(tandem::mul(gy[0], 0.5), saved()[0])};  // 1 / (2 sqrt(x))
  }
};

class Square : public FunctionNode {
 public:
  std::string name() const override { return "square"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    save_for_backward({in[0]});
    return {tandem::square(in[0])};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    return {tandem::mul(tandem::mul(gy[0], saved()[0]), 2.0)};
  }
};

}  // namespace

Variable exp(const Variable& x) { return call<Exp>({x})[0]; }
Variable log(const Variable& x) { return call<Log>({x})[0]; }
Variable sqrt(const Variable& x) { return call<Sqrt>({x})[0]; }
Variable square(const Variable& x) { return call<Square>({x})[0]; }

}  // namespace functions
}  // namespace tandem
