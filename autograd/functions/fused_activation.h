// An activation that a function applies to its own output (functions::linear and
// convolution_2d, the links' `activation` option): the output is overwritten in place instead of
// a second tensor being written, and on the CPU's oneDNN convolutions the ReLU runs inside the
// primitive (a post-op). functions::relu of a temporary output of those functions joins it in
// place (FunctionNode::absorb_relu), so `F::relu(linear(x))` gains the first part without asking.
#pragma once

namespace tandem {
namespace functions {

enum class Activation { none, relu };

}  // namespace functions
}  // namespace tandem
