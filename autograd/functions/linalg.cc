#include "autograd/functions/linalg.h"

#include "autograd/function_node.h"
#include "autograd/functions/function_with_activation.h"
#include "autograd/weight_gradient_queue.h"
#include "core/ops.h"

namespace tandem {
namespace functions {

namespace {

class MatMul : public FunctionNode {
 public:
  MatMul(bool ta, bool tb) : ta_(ta), tb_(tb) {}
  std::string name() const override { return "matmul"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    a_shape_ = in[0].shape();
    b_shape_ = in[1].shape();
    // Vectors are promoted to matrices here, so backward only deals with (batched) matrices.
    const Tensor a = in[0].dim() == 1 ? in[0].reshape({1, in[0].numel()}) : in[0];
    const Tensor b = in[1].dim() == 1 ? in[1].reshape({in[1].numel(), 1}) : in[1];
    if (in[0].dim() == 1) ta_ = false;
    if (in[1].dim() == 1) tb_ = false;
    Tensor y = tandem::matmul(a, b, ta_, tb_);
    y_shape_ = y.shape();
    save_for_backward({needs_input_grad(1) ? a : Tensor(), needs_input_grad(0) ? b : Tensor()});
    Shape out_shape(y.shape().begin(), y.shape().end() - 2);
    if (in[0].dim() != 1) out_shape.push_back(y.size(-2));
    if (in[1].dim() != 1) out_shape.push_back(y.size(-1));
    return {y.reshape(out_shape)};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor gy = grads[0].reshape(y_shape_);
    const Tensor& a = saved()[0];
    const Tensor& b = saved()[1];
    // With A = op(a), B = op(b): dA = gy B^T and dB = A^T gy, transposed back where op transposed.
    Tensor ga, gb;
    if (needs_input_grad(0)) {
      ga = ta_ ? tandem::matmul(b, gy, tb_, true) : tandem::matmul(gy, b, false, !tb_);
      ga = reduce_batch(ga, a_shape_);
    }
    if (needs_input_grad(1)) {
      gb = tb_ ? tandem::matmul(gy, a, true, ta_) : tandem::matmul(a, gy, !ta_, false);
      gb = reduce_batch(gb, b_shape_);
    }
    return {ga, gb};
  }

 private:
  // Batch axes that were broadcast in forward are summed away; 1-D inputs get their shape back.
  static Tensor reduce_batch(const Tensor& g, const Shape& shape) {
    if (shape.size() == 1) {
      // A promoted vector: its gradient is [..., 1, K] (a) or [..., K, 1] (b); any batch axes
      // the other operand brought in are summed away before the added axis is dropped.
      const Shape matrix(g.shape().end() - 2, g.shape().end());
      return sum_to(g, matrix).reshape(shape);
    }
    return sum_to(g, shape);
  }

  bool ta_, tb_;
  Shape a_shape_, b_shape_, y_shape_;
};

class Linear : public FunctionWithActivation {
 public:
  explicit Linear(Activation activation) : FunctionWithActivation(activation) {}
  std::string name() const override { return "linear" + activation_suffix(); }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& W = in[1];
    TANDEM_CHECK(W.dim() == 2, "linear: W must be 2-D [out, in], got ", W.description());
    TANDEM_CHECK(in[0].dim() >= 2, "linear: x must be [N, features...], got ", in[0].description());
    x_shape_ = in[0].shape();
    const std::int64_t batch = in[0].size(0);
    const Tensor x = in[0].reshape({batch, batch == 0 ? W.size(1) : in[0].numel() / batch});
    TANDEM_CHECK(x.size(1) == W.size(1), "linear: x ", in[0].description(), " has ", x.size(1),
                 " features per sample but W ", W.description(), " expects ", W.size(1));
    if (in.size() == 3) {
      TANDEM_CHECK(in[2].dim() == 1 && in[2].size(0) == W.size(0), "linear: b ", in[2].description(),
                   " does not match W ", W.description());
      TANDEM_CHECK(in[2].dtype() == W.dtype(), "linear: b ", in[2].description(), " and W ", W.description(),
                   " have different dtypes");
    }
    save_for_backward({needs_input_grad(1) ? x : Tensor(), needs_input_grad(0) ? W : Tensor()});
    Tensor y = tandem::matmul(x, W, false, true);
    if (in.size() == 3) add_(y, in[2]);
    finish_forward(y);
    return {y};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor gy = gradient_before_activation(grads[0]);
    std::vector<Tensor> out(inputs().size());
    if (needs_input_grad(0)) out[0] = tandem::matmul(gy, saved()[1]).reshape(x_shape_);
    if (needs_input_grad(1)) {
      // W's gradient: queued for one product over many microbatches (a pipeline's deferred weight
      // gradients, autograd/weight_gradient_queue.h), or straight into the parameter's gradient
      // when it already holds earlier microbatches' (leaf_gradient_to_accumulate), else a new
      // tensor for the engine.
      WeightGradientQueue* queue = inputs()[1]->creator ? nullptr : WeightGradientQueue::active();
      if (queue != nullptr) queue->push(inputs()[1], gy, saved()[0]);
      else if (Tensor* into = leaf_gradient_to_accumulate(1)) tandem::matmul_accumulate_(*into, gy, saved()[0], true, false);
      else out[1] = tandem::matmul(gy, saved()[0], true, false);
    }
    if (out.size() == 3 && needs_input_grad(2)) out[2] = tandem::sum(gy, {0});
    return out;
  }

 private:
  Shape x_shape_;
};

}  // namespace

Variable matmul(const Variable& a, const Variable& b, bool transpose_a, bool transpose_b) {
  return call<MatMul>({a, b}, transpose_a, transpose_b)[0];
}

Variable linear(const Variable& x, const Variable& W, const Variable& b, Activation activation) {
  if (b.defined()) return call<Linear>({x, W, b}, activation)[0];
  return call<Linear>({x, W}, activation)[0];
}

}  // namespace functions
}  // namespace tandem
