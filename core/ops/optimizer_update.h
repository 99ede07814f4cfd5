// In-place optimizer updates, fused per parameter (core/backend.h: optimizer kernels).
// The parameter, gradient and state tensors must share shape, dtype (f32/f64) and device.
#pragma once

#include "core/backend.h"
#include "core/tensor.h"

namespace tandem {

void sgd_update_(Tensor& param, const Tensor& grad, double lr);
void momentum_sgd_update_(Tensor& param, const Tensor& grad, Tensor& velocity, double lr, double momentum);
// vhat may be undefined unless step.amsgrad.
void adam_update_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor& vhat, const AdamStep& step);
double sum_of_squares(const Tensor& x);

}  // namespace tandem
