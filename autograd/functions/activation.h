// Element-wise activations.
#pragma once

#include "autograd/variable.h"

namespace tandem {
namespace functions {

Variable relu(const Variable& x);
// The same for a variable the caller gives up (a temporary, or std::move): where nothing else
// can see it (Variable::exclusively_owned), the ReLU overwrites it in place and returns it. With
// a graph, its creator must take the ReLU in (FunctionNode::absorb_relu: linear and
// convolution_2d do), so F::relu(linear(x, W, b)) records one function, "linear+relu". Otherwise,
// and for an lvalue, a new variable as above. Values and gradients are the same either way.
Variable relu(Variable&& x);
Variable leaky_relu(const Variable& x, double slope = 0.2);  // Chainer's default slope
Variable sigmoid(const Variable& x);
Variable tanh(const Variable& x);
// GELU in its tanh form (GPT-2's; PyTorch's gelu(approximate='tanh')):
//   0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))),
// one fused elementwise kernel forward and one backward on each device.
Variable gelu(const Variable& x);

}  // namespace functions
}  // namespace tandem
