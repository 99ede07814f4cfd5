// Metrics (no gradient).
#pragma once

#include <optional>

#include "autograd/variable.h"

namespace tandem {
namespace functions {

// Fraction of rows of y ([N, C] scores) whose argmax equals the label t ([N], i32/i64).
// Labels equal to ignore_label are left out of both counts; the result is 0 if all are.
// A scalar of y's dtype.
Variable accuracy(const Variable& y, const Variable& t, std::optional<std::int64_t> ignore_label = std::nullopt);

}  // namespace functions
}  // namespace tandem
