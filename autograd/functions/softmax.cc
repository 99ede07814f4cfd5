#include "autograd/functions/softmax.h"

#include "autograd/function_node.h"
#include "core/ops.h"

namespace tandem {
namespace functions {

namespace {

// x - logsumexp(x) along the axis.
Tensor log_softmax_values(const Tensor& x, std::int64_t axis) {
  const Tensor shifted = sub(x, max(x, {axis}, true));
  return sub(shifted, log(sum(exp(shifted), {axis}, true)));
}

class Softmax : public FunctionNode {
 public:
  explicit Softmax(std::int64_t axis) : axis_(axis) {}
  std::string name() const override { return "softmax"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    ops_check(in[0]);
    // Over the last axis (attention's, a classifier's [N, C]): the fused kernel.
    last_ = normalize_axis(axis_, in[0].dim(), "softmax") == static_cast<std::int64_t>(in[0].dim()) - 1;
    if (last_) {
      Tensor y = softmax_last_axis(in[0]);
      save_for_backward({y});
      return {y};
    }
    const Tensor e = exp(sub(in[0], max(in[0], {axis_}, true)));
    Tensor y = div(e, sum(e, {axis_}, true));
    save_for_backward({y});
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    if (last_) return {softmax_last_axis_backward(saved()[0], gy[0])};
    // gx = y * (gy - sum(gy * y))
    const Tensor& y = saved()[0];
    const Tensor gyy = mul(gy[0], y);
    return {sub(gyy, mul(y, sum(gyy, {axis_}, true)))};
  }
  void ops_check(const Tensor& x) const {
    TANDEM_CHECK(is_floating(x.dtype()), "softmax: needs a floating input, got ", x.description());
    normalize_axis(axis_, x.dim(), "softmax");
  }

 private:
  std::int64_t axis_;
  bool last_ = false;
};

// softmax(scale * x) over the last axis, optionally causal: one fused kernel each way.
class ScaledSoftmax : public FunctionNode {
 public:
  ScaledSoftmax(double scale, bool causal) : scale_(scale), causal_(causal) {}
  std::string name() const override { return "scaled_softmax"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    Tensor y = softmax_last_axis(in[0], scale_, causal_);
    save_for_backward({y});
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    return {softmax_last_axis_backward(saved()[0], gy[0], scale_)};
  }

 private:
  double scale_;
  bool causal_;
};

class LogSoftmax : public FunctionNode {
 public:
  explicit LogSoftmax(std::int64_t axis) : axis_(axis) {}
  std::string name() const override { return "log_softmax"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    TANDEM_CHECK(is_floating(in[0].dtype()), "log_softmax: needs a floating input, got ", in[0].description());
    normalize_axis(axis_, in[0].dim(), "log_softmax");
    Tensor y = log_softmax_values(in[0], axis_);
    save_for_backward({y});
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    // gx = gy - softmax * sum(gy)
    return {sub(gy[0], mul(exp(saved()[0]), sum(gy[0], {axis_}, true)))};
  }

 private:
  std::int64_t axis_;
};

}  // namespace

Variable softmax(const Variable& x, std::int64_t axis) { return call<Softmax>({x}, axis)[0]; }
Variable log_softmax(const Variable& x, std::int64_t axis) { return call<LogSoftmax>({x}, axis)[0]; }
Variable scaled_softmax(const Variable& x, double scale, bool causal) {
  return call<ScaledSoftmax>({x}, scale, causal)[0];
}

}  // namespace functions
}  // namespace tandem
