// Per-channel batch-normalisation primitives over x [N, C, ...]: statistics over every axis
// but axis 1, and the fused per-channel affine maps that the forward and backward passes of
// autograd/functions/normalization.h are built from.
#pragma once

#include <utility>

#include "core/tensor.h"

namespace tandem {

// {mean, biased variance} of each channel of x ([N, C, ...], floating) over every axis but 1;
// both [C]. Accumulated in double.
std::pair<Tensor, Tensor> batch_norm_statistics(const Tensor& x);

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

}  // namespace tandem
