// Dropout.
#pragma once

#include "autograd/variable.h"
#include "core/random.h"

namespace tandem {
namespace functions {

// In train mode (autograd/grad_mode.h) zeroes each element with probability `ratio` and
// scales the rest by 1 / (1 - ratio); in test mode returns x unchanged. The mask is drawn from
// `generator` (the global generator when null).
Variable dropout(const Variable& x, double ratio = 0.5, Generator* generator = nullptr);

}  // namespace functions
}  // namespace tandem
