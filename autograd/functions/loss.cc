#include "autograd/functions/loss.h"

#include "autograd/function_node.h"
#include "core/ops.h"

namespace tandem {
namespace functions {

namespace {

class SoftmaxCrossEntropy : public FunctionNode {
 public:
  SoftmaxCrossEntropy(std::int64_t ignore_label, Reduce reduce) : ignore_label_(ignore_label), reduce_(reduce) {}
  std::string name() const override { return "softmax_cross_entropy"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& x = in[0];
    const Tensor& t = in[1];
    check(x, t);
    // One fused kernel over rows of scores (core/ops/cross_entropy.h); [N, C, d...] scores move
    // their class axis last first, so that row r is label r of t in its own order.
    const Tensor x_rows = x.dim() == 2 ? x : permute(x, class_axis_last(x.dim())).reshape({t.numel(), x.size(1)});
    const Tensor t_rows = t.reshape({t.numel()});
    CrossEntropyRows rows = softmax_cross_entropy_rows(x_rows, t_rows, ignore_label_);
    count_ = rows.counted;
    x_shape_ = x.shape();
    save_for_backward({x_rows, rows.stats, t_rows});
    const Tensor losses = rows.losses.reshape(t.shape());
    if (reduce_ == Reduce::none) return {losses};
    return {mul(sum(losses), 1.0 / static_cast<double>(std::max<std::int64_t>(count_, 1)))};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    const Tensor& x_rows = saved()[0];
    const Tensor& stats = saved()[1];
    const Tensor& t_rows = saved()[2];
    // d loss_i / d x_i = softmax(x_i) - onehot(t_i), zero for ignored labels, times the loss's
    // gradient (and 1 / count for the mean). gy stays on its device (no item(): on a GPU it would
    // wait for the device).
    const Tensor coef = reduce_ == Reduce::mean
                            ? mul(gy[0], 1.0 / static_cast<double>(std::max<std::int64_t>(count_, 1)))
                            : gy[0].reshape({t_rows.numel()});
    const Tensor g = softmax_cross_entropy_rows_backward(x_rows, stats, t_rows, coef, ignore_label_);
    if (x_shape_.size() == 2) return {g, Tensor()};
    // Back from [N, d..., C] to [N, C, d...].
    Shape moved(x_shape_);
    moved.erase(moved.begin() + 1);
    moved.push_back(x_shape_[1]);
    std::vector<std::int64_t> axes{0, static_cast<std::int64_t>(x_shape_.size()) - 1};
    for (std::int64_t a = 1; a + 1 < static_cast<std::int64_t>(x_shape_.size()); ++a) axes.push_back(a);
    return {permute(g.reshape(moved), axes), Tensor()};
  }

 private:
  void check(const Tensor& x, const Tensor& t) const {
    TANDEM_CHECK(is_floating(x.dtype()), "softmax_cross_entropy: x must be floating, got ", x.description());
    TANDEM_CHECK(t.dtype() == DType::i32 || t.dtype() == DType::i64,
                 "softmax_cross_entropy: labels must be i32 or i64, got ", t.description());
    TANDEM_CHECK(x.dim() >= 2, "softmax_cross_entropy: x must be [N, C, ...], got ", x.description());
    Shape expected = x.shape();
    expected.erase(expected.begin() + 1);
    TANDEM_CHECK(t.shape() == expected, "softmax_cross_entropy: labels ", t.description(), " do not match scores ",
                 x.description(), " (expected labels of shape ", expected, ")");
    TANDEM_CHECK(x.device() == t.device(), "softmax_cross_entropy: scores on ", x.device(), " but labels on ",
                 t.device());
  }

  // [N, C, d1, ..., dk] -> [N, d1, ..., dk, C].
  static std::vector<std::int64_t> class_axis_last(std::size_t dims) {
    std::vector<std::int64_t> axes{0};
    for (std::int64_t a = 2; a < static_cast<std::int64_t>(dims); ++a) axes.push_back(a);
    axes.push_back(1);
    return axes;
  }

  std::int64_t ignore_label_;
  Reduce reduce_;
  std::int64_t count_ = 0;
  Shape x_shape_;
};

class MeanSquaredError : public FunctionNode {
 public:
  std::string name() const override { return "mean_squared_error"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    TANDEM_CHECK(in[0].shape() == in[1].shape(), "mean_squared_error: shapes differ: ", in[0].description(), " and ",
                 in[1].description());
    TANDEM_CHECK(is_floating(in[0].dtype()), "mean_squared_error: needs floating inputs, got ", in[0].description());
    Tensor diff = sub(in[0], in[1]);
    save_for_backward({diff});
    return {mul(sum(square(diff)), 1.0 / static_cast<double>(std::max<std::int64_t>(diff.numel(), 1)))};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    const Tensor& diff = saved()[0];
    const Tensor g = mul(diff, mul(gy[0], 2.0 / static_cast<double>(std::max<std::int64_t>(diff.numel(), 1))));
    return {needs_input_grad(0) ? g : Tensor(), needs_input_grad(1) ? neg(g) : Tensor()};
  }
};

}  // namespace

Variable softmax_cross_entropy(const Variable& x, const Variable& t, std::int64_t ignore_label, Reduce reduce) {
  return call<SoftmaxCrossEntropy>({x, t}, ignore_label, reduce)[0];
}

Variable mean_squared_error(const Variable& x0, const Variable& x1) { return call<MeanSquaredError>({x0, x1})[0]; }

}  // namespace functions
}  // namespace tandem
