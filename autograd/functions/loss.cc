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
    const std::int64_t classes = x.size(1);
    // Scores axis first: logp = x - logsumexp(x) along the class axis.
    const Tensor shifted = sub(x, max(x, {1}, true));
    const Tensor logp = sub(shifted, log(sum(exp(shifted), {1}, true)));
    const Tensor valid = not_equal(t, static_cast<double>(ignore_label_));
    count_ = check_labels(t, valid, classes);
    const Tensor picked = sum(where(one_hot(t, classes), logp, zeros({}, x.dtype(), x.device())), {1});
    const Tensor losses = where(valid, neg(picked), zeros({}, x.dtype(), x.device()));
    save_for_backward({logp, t, valid});
    if (reduce_ == Reduce::none) return {losses};
    return {mul(sum(losses), 1.0 / static_cast<double>(std::max<std::int64_t>(count_, 1)))};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    const Tensor& logp = saved()[0];
    const Tensor& t = saved()[1];
    const Tensor& valid = saved()[2];
    // d loss_i / d x_i = softmax(x_i) - onehot(t_i), zero for ignored labels.
    const Tensor zero = zeros({}, logp.dtype(), logp.device());
    Tensor g = sub(exp(logp), where(one_hot(t, logp.size(1)), ones({}, logp.dtype(), logp.device()), zero));
    g = where(expand_dims(valid, 1), g, zero);
    // gy stays on its device (no item(): on a GPU it would wait for the device).
    if (reduce_ == Reduce::mean)
      return {mul(g, mul(gy[0], 1.0 / static_cast<double>(std::max<std::int64_t>(count_, 1)))), Tensor()};
    return {mul(g, expand_dims(gy[0], 1)), Tensor()};
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

  // Returns the number of labels that count (not ignore_label), after checking that they name a
  // class: the extremes and the count come to the host in one transfer (one wait on a GPU).
  std::int64_t check_labels(const Tensor& t, const Tensor& valid, std::int64_t classes) const {
    if (t.numel() == 0) return 0;
    const Tensor zero = zeros({}, t.dtype(), t.device());
    const Tensor kept = where(valid, t, zero);
    const std::vector<std::int64_t> summary =
        stack({min(kept).to(DType::i64), max(kept).to(DType::i64), sum(valid.to(DType::i64))}).to_vector<std::int64_t>();
    if (summary[0] >= 0 && summary[1] < classes) return summary[2];
    const std::vector<std::int64_t> labels = t.to_vector<std::int64_t>();
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (labels[i] != ignore_label_ && (labels[i] < 0 || labels[i] >= classes))
        TANDEM_FAIL("softmax_cross_entropy: label ", labels[i], " at flat position ", i, " is outside [0, ", classes,
                    ") and is not the ignore_label ", ignore_label_);
    }
    return summary[2];
  }

  // bool [N, C, ...]: true where the class index equals the label.
  static Tensor one_hot(const Tensor& t, std::int64_t classes) {
    Shape class_shape(t.dim() + 1, 1);
    class_shape[1] = classes;
    const Tensor class_ids = arange(0, static_cast<double>(classes), 1, t.dtype(), t.device()).reshape(class_shape);
    return equal(expand_dims(t, 1), class_ids);
  }

  std::int64_t ignore_label_;
  Reduce reduce_;
  std::int64_t count_ = 0;
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
