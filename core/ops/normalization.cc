#include "core/ops/normalization.h"

#include <algorithm>
#include <utility>

#include "core/backend.h"
#include "core/ops/checks.h"
#include "core/ops/elementwise.h"

namespace tandem {

namespace {

struct ChannelView {
  std::int64_t outer, channels, inner;
};

ChannelView channel_view(const Tensor& x, const char* op) {
  ops_detail::check_floating(x, op);
  TANDEM_CHECK(x.dim() >= 2, op, ": x must be [N, C, ...], got ", x.description());
  ChannelView v{x.size(0), x.size(1), 1};
  for (std::size_t d = 2; d < x.dim(); ++d) v.inner *= x.size(static_cast<std::int64_t>(d));
  return v;
}

void check_channel_vector(const Tensor& t, const Tensor& x, const char* what, const char* op) {
  ops_detail::check_compatible({&x, &t}, op);
  TANDEM_CHECK(t.dim() == 1 && t.size(0) == x.size(1), op, ": ", what, " ", t.description(),
               " must be [C] = [", x.size(1), "] for x ", x.description());
}

}  // namespace

std::pair<Tensor, Tensor> batch_norm_statistics(const Tensor& x) {
  const char* op = "batch_norm_statistics";
  const ChannelView v = channel_view(x, op);
  Tensor mean({v.channels}, x.dtype(), x.device()), var({v.channels}, x.dtype(), x.device());
  backend_for(x.device(), op).batch_norm_stats(x, v.outer, v.channels, v.inner, mean, var);
  return {mean, var};
}

BatchNormAffine batch_norm_affine(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                                  const Tensor& var, double eps) {
  Tensor invstd = rdiv(1.0, sqrt(add(var, eps)));
  const Tensor scale = mul(gamma, invstd);
  return {channel_affine(x, scale, sub(beta, mul(mean, scale))), std::move(invstd)};
}

void batch_norm_update_running(Tensor* running_mean, Tensor* running_var, const Tensor& mean, const Tensor& var,
                               double count, double decay) {
  if (running_mean) running_mean->copy_(add(mul(*running_mean, decay), mul(mean, 1 - decay)));
  if (running_var) {
    const double adjust = count / std::max(count - 1, 1.0);
    running_var->copy_(add(mul(*running_var, decay), mul(var, (1 - decay) * adjust)));
  }
}

Tensor channel_affine(const Tensor& x, const Tensor& scale, const Tensor& shift) {
  return channel_affine(x, scale, Tensor(), Tensor(), shift);
}

Tensor channel_affine(const Tensor& x, const Tensor& scale, const Tensor& z, const Tensor& zscale,
                      const Tensor& shift) {
  const char* op = "channel_affine";
  const ChannelView v = channel_view(x, op);
  check_channel_vector(scale, x, "scale", op);
  check_channel_vector(shift, x, "shift", op);
  if (z.defined()) {
    ops_detail::check_compatible({&x, &z}, op);
    TANDEM_CHECK(z.shape() == x.shape(), op, ": z ", z.description(), " must have the shape of x ", x.description());
    check_channel_vector(zscale, x, "zscale", op);
  }
  Tensor out(x.shape(), x.dtype(), x.device());
  backend_for(x.device(), op).channel_affine(x, scale, z, zscale, shift, v.outer, v.channels, v.inner, out);
  return out;
}

std::pair<Tensor, Tensor> batch_norm_backward_sums(const Tensor& gy, const Tensor& x, const Tensor& mean) {
  const char* op = "batch_norm_backward_sums";
  const ChannelView v = channel_view(x, op);
  ops_detail::check_compatible({&x, &gy}, op);
  TANDEM_CHECK(gy.shape() == x.shape(), op, ": gy ", gy.description(), " must have the shape of x ",
               x.description());
  check_channel_vector(mean, x, "mean", op);
  Tensor s0({v.channels}, x.dtype(), x.device()), s1({v.channels}, x.dtype(), x.device());
  backend_for(x.device(), op).batch_norm_backward_sums(gy, x, mean, v.outer, v.channels, v.inner, s0, s1);
  return {s0, s1};
}

Tensor batch_norm_grad_x(const Tensor& gy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& invstd, const Tensor& sum_gy, const Tensor& sum_gy_xmu, double count) {
  const double inv_m = 1.0 / std::max(count, 1.0);
  const Tensor k1 = mul(gamma, invstd);
  const Tensor k2 = mul(mul(k1, square(invstd)), mul(sum_gy_xmu, -inv_m));
  const Tensor k3 = sub(mul(mul(k1, sum_gy), -inv_m), mul(mean, k2));
  return channel_affine(gy, k1, x, k2, k3);
}

}  // namespace tandem
