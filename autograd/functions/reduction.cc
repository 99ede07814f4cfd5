#include "autograd/functions/reduction.h"

#include "autograd/function_node.h"
#include "core/ops.h"

namespace tandem {
namespace functions {

namespace {

// sum and mean share a backward: the output gradient, with the reduced axes put back as
// extent 1, broadcast over the input (and scaled by 1/count for mean).
class SumMean : public FunctionNode {
 public:
  SumMean(std::vector<std::int64_t> axes, bool keepdims, bool mean) : axes_(std::move(axes)), keepdims_(keepdims), mean_(mean) {}
  std::string name() const override { return mean_ ? "mean" : "sum"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    x_shape_ = in[0].shape();
    Tensor y = mean_ ? tandem::mean(in[0], axes_, keepdims_) : tandem::sum(in[0], axes_, keepdims_);
    // The output's shape with keepdims, whichever way it was requested.
    kept_shape_ = x_shape_;
    if (axes_.empty()) {
      for (auto& extent : kept_shape_) extent = 1;
    } else {
      for (std::int64_t axis : axes_) kept_shape_[normalize_axis(axis, x_shape_.size(), name().c_str())] = 1;
    }
    scale_ = mean_ && y.numel() > 0 ? static_cast<double>(y.numel()) / static_cast<double>(shape_numel(x_shape_)) : 1.0;
    return {y};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    Tensor g = broadcast_to(gy[0].reshape(kept_shape_), x_shape_);
    if (mean_) g = tandem::mul(g, scale_);
    return {g};
  }

 private:
  std::vector<std::int64_t> axes_;
  bool keepdims_, mean_;
  Shape x_shape_, kept_shape_;
  double scale_ = 1.0;
};

}  // namespace

Variable sum(const Variable& x, const std::vector<std::int64_t>& axes, bool keepdims) {
  return call<SumMean>({x}, axes, keepdims, false)[0];
}

Variable mean(const Variable& x, const std::vector<std::int64_t>& axes, bool keepdims) {
  return call<SumMean>({x}, axes, keepdims, true)[0];
}

}  // namespace functions
}  // namespace tandem
