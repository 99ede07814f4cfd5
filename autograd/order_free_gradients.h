// Deterministic mode's gradients (core/deterministic.h): a leaf's gradient is the order-free sum
// of what backward delivered to it, rounded. The engine and the deferred weight gradients
// deliver here instead of adding into grad; a data-parallel optimizer combines the sums over its
// ranks (comm/data_parallel/order_free_allreduce.h).
#pragma once

#include "autograd/variable.h"
#include "core/order_free_sum.h"

namespace tandem {

// Adds `gradient` to the variable's order-free sum and sets its grad to the sum, rounded.
void deliver_order_free(VariableImpl& variable, const Tensor& gradient);

// The sum behind `param`'s grad (which must be defined): the one deliver_order_free keeps, or,
// where the grad was set otherwise, a sum started from it.
OrderFreeSum& order_free_gradient(Variable& param);

// Sets `param`'s grad to its sum, rounded, times `scale`, and forgets the sum (a rounded grad
// that is scaled is no longer the sum's).
void round_order_free_gradient(Variable& param, double scale);

}  // namespace tandem
