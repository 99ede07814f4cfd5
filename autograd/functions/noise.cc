#include "autograd/functions/noise.h"

#include "autograd/function_node.h"
#include "autograd/grad_mode.h"
#include "core/ops.h"

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
    const Tensor keep = greater_equal(philox_uniform(x.shape(), generator_, 0, 1, x.dtype(), x.device()), ratio_);
    // The mask already carries the 1 / (1 - ratio) scale, so forward and backward are one multiply.
    const Tensor mask = where(keep, full({}, 1.0 / (1.0 - ratio_), x.dtype(), x.device()), zeros({}, x.dtype(), x.device()));
    save_for_backward({mask});
    return {mul(x, mask)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override { return {mul(gy[0], saved()[0])}; }

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
