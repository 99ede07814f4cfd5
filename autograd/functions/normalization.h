// Batch and layer normalisation.
#pragma once

#include "autograd/variable.h"
#include "core/tensor.h"

namespace tandem {
namespace functions {

// Chainer's batch_normalization: normalises x ([N, C] or [N, C, H, W]; any [N, C, ...]) with
// the mean and biased variance of each channel over every axis but 1, then scales by gamma
// and shifts by beta ([C] each): y = gamma * (x - mean) / sqrt(var + eps) + beta. It always
// uses the batch statistics (as Chainer's function does; a layer switches to
// fixed_batch_normalization with its running averages outside training). Differentiable
// with respect to x, gamma and beta.
//
// When running_mean / running_var are given (non-null [C] tensors of x's dtype and device,
// typically owned by a layer) they are updated in place, as in Chainer:
//   running_mean = decay * running_mean + (1 - decay) * mean
//   running_var  = decay * running_var  + (1 - decay) * var * m / max(m - 1, 1)
// with m = N * H * W the number of values per channel (the unbiased variance).
Variable batch_normalization(const Variable& x, const Variable& gamma, const Variable& beta, double eps = 2e-5,
                             Tensor* running_mean = nullptr, Tensor* running_var = nullptr, double decay = 0.9);

// Chainer's fixed_batch_normalization, for inference: y = gamma * (x - mean) / sqrt(var + eps)
// + beta with given per-channel mean and var ([C]). Differentiable with respect to all five
// inputs.
Variable fixed_batch_normalization(const Variable& x, const Variable& gamma, const Variable& beta,
                                   const Variable& mean, const Variable& var, double eps = 2e-5);

// Chainer's layer_normalization, over the last axis (the features of each row, any leading
// axes): y = gamma * (x - mean) / sqrt(var + eps) + beta with the mean and biased variance of
// each row, gamma and beta [features] of x's dtype and device (f32 or f64). One fused kernel
// forward and one backward (core/ops/normalization.h: layer_norm_forward/_backward), which keep
// each row's mean and 1 / sqrt(var + eps) for the backward; differentiable with respect to x,
// gamma and beta.
Variable layer_normalization(const Variable& x, const Variable& gamma, const Variable& beta, double eps = 1e-6);

}  // namespace functions
}  // namespace tandem
