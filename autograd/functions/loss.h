// Loss functions.
#pragma once

#include "autograd/variable.h"

namespace tandem {
namespace functions {

enum class Reduce { mean, none };

// Chainer's softmax_cross_entropy. x: [N, C] scores (or [N, C, d1, ...]); t: integer labels
// (i32/i64) of shape [N] (or [N, d1, ...]). Labels equal to ignore_label contribute nothing.
// Reduce::mean averages over the labels that are not ignored (0 when all are);
// Reduce::none returns the per-label losses (0 where ignored). A label outside [0, C) that is
// not ignore_label is an error naming its position and value.
Variable softmax_cross_entropy(const Variable& x, const Variable& t, std::int64_t ignore_label = -1,
                               Reduce reduce = Reduce::mean);

// mean((x0 - x1)^2) over all elements; the shapes must be equal.
Variable mean_squared_error(const Variable& x0, const Variable& x1);

}  // namespace functions
}  // namespace tandem
