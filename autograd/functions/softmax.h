// Softmax and log-softmax along an axis (Chainer's default: axis 1), computed stably by
// subtracting the maximum first.
#pragma once

#include "autograd/variable.h"

namespace tandem {
namespace functions {

Variable softmax(const Variable& x, std::int64_t axis = 1);
Variable log_softmax(const Variable& x, std::int64_t axis = 1);

}  // namespace functions
}  // namespace tandem
