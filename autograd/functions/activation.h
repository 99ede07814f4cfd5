// Element-wise activations.
#pragma once

#include "autograd/variable.h"

namespace tandem {
namespace functions {

Variable relu(const Variable& x);
Variable leaky_relu(const Variable& x, double slope = 0.2);  // Chainer's default slope
Variable sigmoid(const Variable& x);
Variable tanh(const Variable& x);

}  // namespace functions
}  // namespace tandem
