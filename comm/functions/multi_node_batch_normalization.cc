#include "comm/functions/multi_node_batch_normalization.h"

#include <utility>

#include "comm/functions/backward_scope.h"
#include "comm/functions/communication_node.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/ops/normalization.h"

namespace tandem::functions {

namespace {

constexpr const char* kOp = "multi_node_batch_normalization";

void check_channel(const Tensor& t, const Tensor& x, const char* what, int rank) {
  TANDEM_CHECK(t.dtype() == x.dtype() && t.device() == x.device() && t.dim() == 1 && t.size(0) == x.size(1), kOp,
               ": rank ", rank, ": ", what, " ", t.description(), " must be [C] = [", x.size(1), "] like x ",
               x.description());
}

class MultiNodeBatchNormalization final : public CommunicationNode {
 public:
  // Once recorded, every rank must take part in the backward allreduce.
  MultiNodeBatchNormalization(Communicator& comm, double eps, Tensor* running_mean, Tensor* running_var, double decay)
      : CommunicationNode(comm, std::nullopt, Participation::once_recorded),
        eps_(eps),
        running_mean_(running_mean),
        running_var_(running_var),
        decay_(decay) {}
  std::string name() const override { return kOp; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& x = in[0];
    const int rank = comm_->rank();
    TANDEM_CHECK(is_floating(x.dtype()) && x.dim() >= 2, kOp, ": rank ", rank,
                 ": x must be floating [N, C] or [N, C, ...], got ", x.description());
    check_channel(in[1], x, "gamma", rank);
    check_channel(in[2], x, "beta", rank);
    if (running_mean_) check_channel(*running_mean_, x, "running_mean", rank);
    if (running_var_) check_channel(*running_var_, x, "running_var", rank);

    // One allreduce of [count, sum x (C), sum x^2 (C)] in double. The local sums come from the
    // local two-pass mean and variance, so the subtraction below loses only double rounding.
    const std::int64_t channels = x.size(1);
    const std::int64_t local_count = channels == 0 ? 0 : x.numel() / channels;
    // Built on x's device, so that a GPU batch costs no copies but the allreduce's own.
    const Tensor count = full({1}, static_cast<double>(local_count), DType::f64, x.device());
    Tensor sums;
    if (local_count > 0) {
      auto [local_mean, local_var] = batch_norm_statistics(x);
      const Tensor mean64 = local_mean.to(DType::f64), var64 = local_var.to(DType::f64);
      const Tensor s1 = mul(mean64, static_cast<double>(local_count));
      const Tensor s2 = mul(add(var64, square(mean64)), static_cast<double>(local_count));
      sums = concat({count, s1, s2}, 0);
    } else {
      sums = concat({count, zeros({2 * channels}, DType::f64, x.device())}, 0);
    }
    const Tensor global = comm_->allreduce(sums, AllreduceOp::sum);
    count_ = global.slice_rows(0, 1).item();
    TANDEM_CHECK(count_ > 0, kOp, ": the global batch is empty on all ", comm_->size(), " ranks (x on rank ", rank,
                 ": ", x.description(), ")");
    const Tensor mean64 = div(global.slice_rows(1, 1 + channels), count_);
    const Tensor var64 =
        maximum(sub(div(global.slice_rows(1 + channels, 1 + 2 * channels), count_), square(mean64)), 0.0);
    const Tensor mean = mean64.to(x.dtype()), var = var64.to(x.dtype());

    // From here on as in batch_normalization, with the global statistics and count.
    BatchNormAffine out = batch_norm_affine(x, in[1], in[2], mean, var, eps_);
    batch_norm_update_running(running_mean_, running_var_, mean, var, count_, decay_);
    save_for_backward({x, in[1], mean, out.invstd});
    return {std::move(out.y)};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& gy = grads[0];
    const Tensor& x = saved()[0];
    const Tensor& gamma = saved()[1];
    const Tensor& mean = saved()[2];
    const Tensor& invstd = saved()[3];
    const std::int64_t channels = x.size(1);
    const auto [sum_gy, sum_gy_xmu] = batch_norm_backward_sums(gy, x, mean);
    Tensor gx;
    if (needs_input_grad(0)) {
      // As in batch_normalization, with the sums and the count over the global batch.
      CommBackwardScope scope;
      const Tensor global = comm_->allreduce(concat({sum_gy, sum_gy_xmu}, 0), AllreduceOp::sum);
      gx = batch_norm_grad_x(gy, x, gamma, mean, invstd, global.slice_rows(0, channels),
                             global.slice_rows(channels, 2 * channels), count_);
    }
    Tensor ggamma, gbeta;
    if (needs_input_grad(1)) ggamma = mul(sum_gy_xmu, invstd);
    if (needs_input_grad(2)) gbeta = sum_gy;
    return {gx, ggamma, gbeta};
  }

 private:
  double eps_;
  Tensor* running_mean_;
  Tensor* running_var_;
  double decay_;
  double count_ = 0;
};

}  // namespace

Variable multi_node_batch_normalization(Communicator& comm, const Variable& x, const Variable& gamma,
                                        const Variable& beta, double eps, Tensor* running_mean, Tensor* running_var,
                                        double decay) {
  TANDEM_CHECK(x.defined() && gamma.defined() && beta.defined(), kOp, ": rank ", comm.rank(),
               " passed an undefined variable");
  TANDEM_CHECK(eps > 0 && decay >= 0 && decay <= 1, kOp, ": eps must be positive and decay in [0, 1], got eps ", eps,
               ", decay ", decay);
  return call<MultiNodeBatchNormalization>({x, gamma, beta}, comm, eps, running_mean, running_var, decay)[0];
}

}  // namespace tandem::functions
