#include "core/ops/normalization.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/backend.h"
#include "core/ops/checks.h"
#include "core/ops/elementwise.h"
#include "core/ops/half_compute.h"
#include "core/ops/reduce.h"

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
  if (x.defined() && is_half(x.dtype())) return batch_norm_statistics(x.to(DType::f32));  // statistics in f32
  const ChannelView v = channel_view(x, op);
  Tensor mean({v.channels}, x.dtype(), x.device()), var({v.channels}, x.dtype(), x.device());
  backend_for(x.device(), op).batch_norm_stats(x, v.outer, v.channels, v.inner, mean, var);
  return {mean, var};
}

BatchNormAffine batch_norm_affine(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                                  const Tensor& var, double eps) {
  using ops_detail::widen;
  if (x.defined() && is_half(x.dtype())) {  // invstd stays f32, as the statistics
    BatchNormAffine wide = batch_norm_affine(widen(x), widen(gamma), widen(beta), widen(mean), widen(var), eps);
    return {wide.y.to(x.dtype()), std::move(wide.invstd)};
  }
  Tensor invstd = rdiv(1.0, sqrt(add(var, eps)));
  const Tensor scale = mul(gamma, invstd);
  return {channel_affine(x, scale, sub(beta, mul(mean, scale))), std::move(invstd)};
}

void batch_norm_update_running(Tensor* running_mean, Tensor* running_var, const Tensor& mean, const Tensor& var,
                               double count, double decay) {
  using ops_detail::widen;
  if ((running_mean && is_half(running_mean->dtype())) || (running_var && is_half(running_var->dtype()))) {
    Tensor wide_mean = running_mean ? widen(*running_mean) : Tensor(), wide_var = running_var ? widen(*running_var) : Tensor();
    batch_norm_update_running(running_mean ? &wide_mean : nullptr, running_var ? &wide_var : nullptr, widen(mean),
                              widen(var), count, decay);
    if (running_mean) ops_detail::narrow_into(*running_mean, wide_mean);
    if (running_var) ops_detail::narrow_into(*running_var, wide_var);
    return;
  }
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
  using ops_detail::widen;
  if (x.defined() && is_half(x.dtype()))
    return channel_affine(x.to(DType::f32), widen(scale), widen(z), widen(zscale), widen(shift)).to(x.dtype());
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
  if (x.defined() && is_half(x.dtype()))  // sums in f32
    return batch_norm_backward_sums(ops_detail::widen(gy), x.to(DType::f32), ops_detail::widen(mean));
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
  using ops_detail::widen;
  if (x.defined() && is_half(x.dtype()))
    return batch_norm_grad_x(widen(gy), widen(x), widen(gamma), widen(mean), widen(invstd), widen(sum_gy),
                             widen(sum_gy_xmu), count)
        .to(x.dtype());
  const double inv_m = 1.0 / std::max(count, 1.0);
  const Tensor k1 = mul(gamma, invstd);
  const Tensor k2 = mul(mul(k1, square(invstd)), mul(sum_gy_xmu, -inv_m));
  const Tensor k3 = sub(mul(mul(k1, sum_gy), -inv_m), mul(mean, k2));
  return channel_affine(gy, k1, x, k2, k3);
}

namespace {

// x [..., n] as [rows, n]: rows is the product of the leading extents (so that n = 0 still
// gives the right number of rows).
struct RowView {
  std::int64_t rows, n;
};

RowView row_view(const Tensor& x) {
  RowView v{1, x.size(-1)};
  for (std::size_t d = 0; d + 1 < x.dim(); ++d) v.rows *= x.size(static_cast<std::int64_t>(d));
  return v;
}

// A per-feature vector (gamma, beta): [n], x's dtype and device.
void check_feature_vector(const Tensor& t, const Tensor& x, const char* what, const char* op) {
  ops_detail::check_compatible({&x, &t}, op);
  TANDEM_CHECK(t.dim() == 1 && t.size(0) == x.size(-1), op, ": ", what, " ", t.description(), " must be [n] = [",
               x.size(-1), "] for x ", x.description());
}

// A per-row statistic (mean, rstd): [rows], x's dtype and device.
void check_row_vector(const Tensor& t, const Tensor& x, std::int64_t rows, const char* what, const char* op) {
  ops_detail::check_compatible({&x, &t}, op);
  TANDEM_CHECK(t.dim() == 1 && t.size(0) == rows, op, ": ", what, " ", t.description(), " must be [rows] = [",
               rows, "] for x ", x.description());
}

}  // namespace

LayerNormResult layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  const char* op = "layer_norm_forward";
  if (x.defined() && is_half(x.dtype())) {  // mean and rstd stay f32, for backward
    LayerNormResult wide = layer_norm_forward(x.to(DType::f32), ops_detail::widen(gamma), ops_detail::widen(beta), eps);
    wide.y = wide.y.to(x.dtype());
    return wide;
  }
  ops_detail::check_floating(x, op);
  TANDEM_CHECK(x.dim() >= 1, op, ": x must be [..., n], got ", x.description());
  check_feature_vector(gamma, x, "gamma", op);
  check_feature_vector(beta, x, "beta", op);
  TANDEM_CHECK(eps >= 0, op, ": eps must not be negative, got ", eps);
  // Tensors are always contiguous (core/tensor.h): x already is the [rows, n] the kernels read.
  const RowView v = row_view(x);
  LayerNormResult out{Tensor(x.shape(), x.dtype(), x.device()), Tensor({v.rows}, x.dtype(), x.device()),
                      Tensor({v.rows}, x.dtype(), x.device())};
  if (v.rows == 0) return out;
  if (v.n == 0) {
    out.mean.copy_(zeros({v.rows}, x.dtype(), x.device()));
    out.rstd.copy_(full({v.rows}, 1 / std::sqrt(eps), x.dtype(), x.device()));
    return out;
  }
  backend_for(x.device(), op).layer_norm_forward(x, gamma, beta, v.rows, v.n, eps, out.y, out.mean, out.rstd);
  return out;
}

LayerNormGrads layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                   const Tensor& rstd) {
  const char* op = "layer_norm_backward";
  if (x.defined() && is_half(x.dtype())) {
    using ops_detail::widen;
    LayerNormGrads wide = layer_norm_backward(widen(gy), x.to(DType::f32), widen(gamma), widen(mean), widen(rstd));
    return {wide.gx.to(x.dtype()), ops_detail::narrow(wide.ggamma, gamma.dtype()),
            ops_detail::narrow(wide.gbeta, gamma.dtype())};
  }
  ops_detail::check_floating(x, op);
  TANDEM_CHECK(x.dim() >= 1, op, ": x must be [..., n], got ", x.description());
  ops_detail::check_compatible({&x, &gy}, op);
  TANDEM_CHECK(gy.shape() == x.shape(), op, ": gy ", gy.description(), " must have the shape of x ",
               x.description());
  check_feature_vector(gamma, x, "gamma", op);
  const RowView v = row_view(x);
  check_row_vector(mean, x, v.rows, "mean", op);
  check_row_vector(rstd, x, v.rows, "rstd", op);
  LayerNormGrads out{Tensor(x.shape(), x.dtype(), x.device()), Tensor({v.n}, x.dtype(), x.device()),
                     Tensor({v.n}, x.dtype(), x.device())};
  if (v.n == 0) return out;
  if (v.rows == 0) {  // sums over no rows
    out.ggamma.copy_(zeros({v.n}, x.dtype(), x.device()));
    out.gbeta.copy_(zeros({v.n}, x.dtype(), x.device()));
    return out;
  }
  backend_for(x.device(), op).layer_norm_backward(gy, x, gamma, mean, rstd, v.rows, v.n, out.gx, out.ggamma,
                                                  out.gbeta);
  return out;
}

// ---- Backend's default layer-normalisation kernels ----
//
// For a backend without fused kernels: the same mathematics composed from the front-end
// operations (which run on the backend of the operands' device). They live here, beside the
// front end they are made of, rather than in core/backend.cc.

void Backend::layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, std::int64_t rows,
                                 std::int64_t n, double eps, Tensor& y, Tensor& mean, Tensor& rstd) {
  const Tensor rows_x = x.reshape({rows, n});
  const Tensor mu = tandem::mean(rows_x, {1}, true);
  const Tensor centred = sub(rows_x, mu);
  const Tensor rs = rdiv(1.0, sqrt(add(tandem::mean(square(centred), {1}, true), eps)));
  y.copy_(add(mul(mul(centred, rs), gamma), beta).reshape(y.shape()));
  mean.copy_(mu.reshape({rows}));
  rstd.copy_(rs.reshape({rows}));
}

void Backend::layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                  const Tensor& rstd, std::int64_t rows, std::int64_t n, Tensor& gx, Tensor& ggamma,
                                  Tensor& gbeta) {
  const Tensor rows_gy = gy.reshape({rows, n});
  const Tensor rs = rstd.reshape({rows, 1});
  const Tensor xhat = mul(sub(x.reshape({rows, n}), mean.reshape({rows, 1})), rs);
  const Tensor g = mul(rows_gy, gamma);
  const Tensor mean_g = tandem::mean(g, {1}, true), mean_gxhat = tandem::mean(mul(g, xhat), {1}, true);
  gx.copy_(mul(rs, sub(sub(g, mean_g), mul(xhat, mean_gxhat))).reshape(gx.shape()));
  ggamma.copy_(sum(mul(rows_gy, xhat), {0}));
  gbeta.copy_(sum(rows_gy, {0}));
}

}  // namespace tandem
