// Element-wise activations.
#pragma once

#include "autograd/variable.h"

namespace tandem {
namespace functions {

Variable relu(const Variable& x);
Variable leaky_relu(const Variable& x, double slope = 0.2);  // Chainer's default slope
Variable sigmoid(const Variable& x);
Variable tanh(const Variable& x);
// GELU in its tanh form (GPT-2's; PyTorch's gelu(approximate='tanh')):
//   0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))),
// one fused elementwise kernel forward and one backward on each device.
Variable gelu(const Variable& x);

}  // namespace functions
}  // namespace tandem
