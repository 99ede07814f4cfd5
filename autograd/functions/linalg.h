// Matrix products.
#pragma once

#include "autograd/functions/fused_activation.h"
#include "autograd/variable.h"

namespace tandem {
namespace functions {

// numpy.matmul semantics (1-D promotion, batch broadcasting); the flags transpose the last
// two axes of an operand without copying it.
Variable matmul(const Variable& a, const Variable& b, bool transpose_a = false, bool transpose_b = false);

// Chainer's linear: y = x W^T + b with W of shape [out, in]. x of shape [N, d1, d2, ...] is
// treated as [N, d1*d2*...]; x must have at least 2 axes. b may be undefined (no bias).
// With an activation, y = activation(x W^T + b) as one function (fused_activation.h): the same
// values and gradients as activation(linear(x, W, b)), without a second output tensor.
Variable linear(const Variable& x, const Variable& W, const Variable& b = Variable(),
                Activation activation = Activation::none);

}  // namespace functions
}  // namespace tandem
