// Softmax and log-softmax along an axis (Chainer's default: axis 1), computed stably by
// subtracting the maximum first.
#pragma once

#include "autograd/variable.h"

namespace tandem {
namespace functions {

Variable softmax(const Variable& x, std::int64_t axis = 1);
Variable log_softmax(const Variable& x, std::int64_t axis = 1);
// softmax(scale * x) along the last axis (scale > 0), optionally under attention's causal mask:
// x holds score matrices [..., Tq, Tk] (Tk >= Tq) and query i sees keys j <= i + Tk - Tq only;
// the others get exactly zero weight and gradient. One fused kernel forward and one backward.
Variable scaled_softmax(const Variable& x, double scale = 1.0, bool causal = false);

}  // namespace functions
}  // namespace tandem
