// Normalisation primitives behind autograd/functions/normalization.h:
// - per-channel batch normalisation over x [N, C, ...]: statistics over every axis but axis 1,
//   and the fused per-channel affine maps that the forward and backward passes of
//   batch_normalization and of comm's multi-node batch normalisation are built from;
// - fused layer normalisation over the last axis of x [..., n], forward and backward.
#pragma once

#include <utility>

#include "core/tensor.h"

namespace tandem {

// {mean, biased variance} of each channel of x ([N, C, ...], floating) over every axis but 1;
// both [C]. Accumulated in double.
std::pair<Tensor, Tensor> batch_norm_statistics(const Tensor& x);

// The forward of batch normalisation once the per-channel statistics mean and var ([C]) are
// known: this process's batch, all ranks' for the multi-node version, or the running averages at
// inference. y = gamma * (x - mean) * invstd + beta with invstd = 1 / sqrt(var + eps), computed as
// one per-channel affine map of x; invstd ([C]) is what the backward passes read.
struct BatchNormAffine {
  Tensor y, invstd;
};
BatchNormAffine batch_norm_affine(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                                  const Tensor& var, double eps);

// Chainer's update of the running averages, in place (each may be null), from the statistics of
// a batch of `count` values per channel:
//   running_mean = decay * running_mean + (1 - decay) * mean
//   running_var  = decay * running_var  + (1 - decay) * var * count / max(count - 1, 1)
// (the unbiased variance).
void batch_norm_update_running(Tensor* running_mean, Tensor* running_var, const Tensor& mean, const Tensor& var,
                               double count, double decay);

// x * scale[c] + shift[c] along axis 1 of x [N, C, ...]; scale and shift are [C].
Tensor channel_affine(const Tensor& x, const Tensor& scale, const Tensor& shift);
// x * scale[c] + z * zscale[c] + shift[c], with z shaped like x.
Tensor channel_affine(const Tensor& x, const Tensor& scale, const Tensor& z, const Tensor& zscale,
                      const Tensor& shift);

// {sum of gy, sum of gy * (x - mean[c])} per channel over every axis but 1; both [C]. gy and x
// are [N, C, ...] of one shape, mean is [C].
std::pair<Tensor, Tensor> batch_norm_backward_sums(const Tensor& gy, const Tensor& x, const Tensor& mean);

// The gradient of x for normalisation with batch statistics, from those sums over `count`
// values per channel (this process's batch, or all ranks' for the multi-node version):
// gx = gamma * invstd * (gy - mean(gy) - xhat * mean(gy * xhat)), as one per-channel affine map
// of gy and x (gy * k1 + x * k2 + k3).
Tensor batch_norm_grad_x(const Tensor& gy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& invstd, const Tensor& sum_gy, const Tensor& sum_gy_xmu, double count);

// Layer normalisation of every row of x ([..., n], floating, at least 1-D; rows = the product
// of the leading extents) over its last axis, fused (Backend::layer_norm_forward):
// y = (x - mean) * rstd * gamma + beta, with each row's mean and rstd = 1 / sqrt(var + eps)
// (biased variance). gamma and beta are [n] of x's dtype and device; eps >= 0. y has x's
// shape; mean and rstd are [rows] (x's leading axes flattened), what the backward reads. Rows
// of no features (n = 0) have mean 0 and rstd 1 / sqrt(eps), like a constant row.
struct LayerNormResult {
  Tensor y, mean, rstd;
};
LayerNormResult layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps);

// Its backward for the output gradient gy (x's shape), from forward's mean and rstd: gx (x's
// shape), ggamma and gbeta ([n]), with xhat = (x - mean) * rstd and g = gy * gamma:
// gx = rstd * (g - mean_n(g) - xhat * mean_n(g * xhat)), ggamma = sum over rows of gy * xhat,
// gbeta = sum over rows of gy.
struct LayerNormGrads {
  Tensor gx, ggamma, gbeta;
};
LayerNormGrads layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                   const Tensor& rstd);

}  // namespace tandem
