#include "autograd/functions/noise.h"

#include "autograd/function_node.h"
#include "autograd/grad_mode.h"
#include "core/ops.h"
#include "core/ops/half_compute.h"

namespace tandem {
namespace functions {

namespace {

class Dropout : public FunctionNode {
 public:
  Dropout(double ratio, Generator& generator) : ratio_(ratio), generator_(generator) {}
  std::string name() const override { return "dropout"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& x = in[0];
    TANDEM_CHECK(is_floating(x.dtype()), "dropout: needs a floating input, got ", x.description());
    // bf16 and f16 draw and scale in f32 (the same mask as f32's), and round the product once.
    const DType compute = is_half(x.dtype()) ? DType::f32 : x.dtype();
    const Tensor keep = greater_equal(philox_uniform(x.shape(), generator_, 0, 1, compute, x.device()), ratio_);
    // The mask already carries the 1 / (1 - ratio) scale, so forward and backward are one multiply.
    const Tensor mask =
        where(keep, full({}, 1.0 / (1.0 - ratio_), compute, x.device()), zeros({}, compute, x.device()));
    save_for_backward({mask});
    return {ops_detail::narrow(mul(ops_detail::widen(x), mask), x.dtype())};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    return {ops_detail::narrow(mul(ops_detail::widen(gy[0]), saved()[0]), gy[0].dtype())};
  }

 private:
  double ratio_;
  Generator& generator_;
};

}  // namespace

Variable dropout(const Variable& x, double ratio, Generator* generator) {
  TANDEM_CHECK(ratio >= 0 && ratio < 1, "dropout: ratio must be in [0, 1), got ", ratio);
  if (!train_mode() || ratio == 0) return x;
  return call<Dropout>({x}, ratio, generator ? *generator : global_generator())[0];
}

}  // namespace functions
}  // namespace tandem
