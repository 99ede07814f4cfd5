#include "autograd/functions/normalization.h"

#include <utility>

#include "autograd/function_node.h"
#include "core/ops.h"
#include "core/ops/normalization.h"

namespace tandem {
namespace functions {

namespace {

void check_x(const Tensor& x, const char* op) {
  TANDEM_CHECK(is_floating(x.dtype()), op, ": x must be floating, got ", x.description());
  TANDEM_CHECK(x.dim() >= 2, op, ": x must be [N, C] or [N, C, ...], got ", x.description());
}

// A per-channel parameter or statistic: [C], x's dtype and device.
void check_channel(const Tensor& t, const Tensor& x, const char* what, const char* op) {
  TANDEM_CHECK(t.dtype() == x.dtype(), op, ": ", what, " ", t.description(), " and x ", x.description(),
               " have different dtypes");
  TANDEM_CHECK(t.device() == x.device(), op, ": ", what, " on ", t.device(), " but x on ", x.device());
  TANDEM_CHECK(t.dim() == 1 && t.size(0) == x.size(1), op, ": ", what, " ", t.description(), " must be [C] = [",
               x.size(1), "] for x ", x.description());
}

std::int64_t per_channel_count(const Tensor& x) { return x.size(1) == 0 ? 0 : x.numel() / x.size(1); }

class BatchNormalization : public FunctionNode {
 public:
  BatchNormalization(double eps, Tensor* running_mean, Tensor* running_var, double decay)
      : eps_(eps), running_mean_(running_mean), running_var_(running_var), decay_(decay) {}
  std::string name() const override { return "batch_normalization"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const char* op = "batch_normalization";
    const Tensor& x = in[0];
    const Tensor& gamma = in[1];
    const Tensor& beta = in[2];
    check_x(x, op);
    check_channel(gamma, x, "gamma", op);
    check_channel(beta, x, "beta", op);
    if (running_mean_) check_channel(*running_mean_, x, "running_mean", op);
    if (running_var_) check_channel(*running_var_, x, "running_var", op);

    const auto [mean, var] = batch_norm_statistics(x);
    BatchNormAffine out = batch_norm_affine(x, gamma, beta, mean, var, eps_);
    batch_norm_update_running(running_mean_, running_var_, mean, var, static_cast<double>(per_channel_count(x)),
                              decay_);
    save_for_backward({x, gamma, mean, out.invstd});
    return {std::move(out.y)};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& gy = grads[0];
    const Tensor& x = saved()[0];
    const Tensor& gamma = saved()[1];
    const Tensor& mean = saved()[2];
    const Tensor& invstd = saved()[3];
    const auto [sum_gy, sum_gy_xmu] = batch_norm_backward_sums(gy, x, mean);
    Tensor gx, ggamma, gbeta;
    if (needs_input_grad(0)) {
      gx = batch_norm_grad_x(gy, x, gamma, mean, invstd, sum_gy, sum_gy_xmu,
                             static_cast<double>(per_channel_count(x)));
    }
    // The sums are f32 for 16-bit inputs (core/ops/normalization.h): rounded once to the parameters' dtype.
    if (needs_input_grad(1)) ggamma = mul(sum_gy_xmu, invstd).to(gamma.dtype());
    if (needs_input_grad(2)) gbeta = sum_gy.to(gamma.dtype());
    return {gx, ggamma, gbeta};
  }

 private:
  double eps_;
  Tensor* running_mean_;
  Tensor* running_var_;
  double decay_;
};

class FixedBatchNormalization : public FunctionNode {
 public:
  explicit FixedBatchNormalization(double eps) : eps_(eps) {}
  std::string name() const override { return "fixed_batch_normalization"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const char* op = "fixed_batch_normalization";
    const Tensor& x = in[0];
    check_x(x, op);
    check_channel(in[1], x, "gamma", op);
    check_channel(in[2], x, "beta", op);
    check_channel(in[3], x, "mean", op);
    check_channel(in[4], x, "var", op);
    const Tensor& gamma = in[1];
    const Tensor& mean = in[3];
    BatchNormAffine out = batch_norm_affine(x, gamma, in[2], mean, in[4], eps_);
    save_for_backward({x, gamma, mean, out.invstd});
    return {std::move(out.y)};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& gy = grads[0];
    const Tensor& x = saved()[0];
    const Tensor& gamma = saved()[1];
    const Tensor& mean = saved()[2];
    const Tensor& invstd = saved()[3];
    std::vector<Tensor> out(5);
    const Tensor scale = mul(gamma, invstd);
    if (needs_input_grad(0)) out[0] = channel_affine(gy, scale, zeros_like(scale));
    if (needs_input_grad(1) || needs_input_grad(2) || needs_input_grad(3) || needs_input_grad(4)) {
      const auto [sum_gy, sum_gy_xmu] = batch_norm_backward_sums(gy, x, mean);
      // The sums are f32 for 16-bit inputs: each gradient rounded once to its input's dtype.
      if (needs_input_grad(1)) out[1] = mul(sum_gy_xmu, invstd).to(gamma.dtype());
      if (needs_input_grad(2)) out[2] = sum_gy.to(gamma.dtype());
      // y depends on mean through -(scale * mean) and on var through invstd = (var + eps)^-1/2.
      if (needs_input_grad(3)) out[3] = neg(mul(sum_gy, scale)).to(mean.dtype());
      if (needs_input_grad(4)) out[4] = mul(mul(scale, square(invstd)), mul(sum_gy_xmu, -0.5)).to(mean.dtype());
    }
    return out;
  }

 private:
  double eps_;
};

// One fused kernel each way (core/ops/normalization.h) where the composed form took nine
// broadcasting functions and their gradients, a large share of a transformer's CPU step
// (docs/performance.md, "Costs outside the products").
class LayerNormalization : public FunctionNode {
 public:
  explicit LayerNormalization(double eps) : eps_(eps) {}
  std::string name() const override { return "layer_normalization"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const char* op = "layer_normalization";
    const Tensor& x = in[0];
    TANDEM_CHECK(is_floating(x.dtype()), op, ": x must be floating, got ", x.description());
    for (int i = 1; i <= 2; ++i) {
      const char* what = i == 1 ? "gamma" : "beta";
      TANDEM_CHECK(in[i].dtype() == x.dtype(), op, ": ", what, " ", in[i].description(), " and x ",
                   x.description(), " have different dtypes");
      TANDEM_CHECK(in[i].device() == x.device(), op, ": ", what, " on ", in[i].device(), " but x on ", x.device());
    }
    LayerNormResult out = layer_norm_forward(x, in[1], in[2], eps_);
    save_for_backward({x, in[1], out.mean, out.rstd});
    return {std::move(out.y)};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    LayerNormGrads g = layer_norm_backward(grads[0], saved()[0], saved()[1], saved()[2], saved()[3]);
    return {needs_input_grad(0) ? std::move(g.gx) : Tensor(), needs_input_grad(1) ? std::move(g.ggamma) : Tensor(),
            needs_input_grad(2) ? std::move(g.gbeta) : Tensor()};
  }

 private:
  double eps_;
};

}  // namespace

Variable batch_normalization(const Variable& x, const Variable& gamma, const Variable& beta, double eps,
                             Tensor* running_mean, Tensor* running_var, double decay) {
  TANDEM_CHECK(eps > 0, "batch_normalization: eps must be positive, got ", eps);
  return call<BatchNormalization>({x, gamma, beta}, eps, running_mean, running_var, decay)[0];
}

Variable fixed_batch_normalization(const Variable& x, const Variable& gamma, const Variable& beta,
                                   const Variable& mean, const Variable& var, double eps) {
  TANDEM_CHECK(eps >= 0, "fixed_batch_normalization: eps must not be negative, got ", eps);
  return call<FixedBatchNormalization>({x, gamma, beta, mean, var}, eps)[0];
}

Variable layer_normalization(const Variable& x, const Variable& gamma, const Variable& beta, double eps) {
  TANDEM_CHECK(x.defined() && x.dim() >= 1 && gamma.defined() && beta.defined() && gamma.dim() == 1 &&
                   beta.dim() == 1 && gamma.shape()[0] == x.shape().back() && beta.shape()[0] == x.shape().back(),
               "layer_normalization: x must be [..., features] with gamma and beta [features], got x ",
               x.defined() ? x.description() : std::string("undefined"), ", gamma ",
               gamma.defined() ? gamma.description() : std::string("undefined"), ", beta ",
               beta.defined() ? beta.description() : std::string("undefined"));
  TANDEM_CHECK(eps > 0, "layer_normalization: eps must be positive, got ", eps);
  return call<LayerNormalization>({x, gamma, beta}, eps)[0];
}

}  // namespace functions
}  // namespace tandem
