// Sums and means over axes (an empty axis list means all axes), with keepdims.
#pragma once

#include <vector>

#include "autograd/variable.h"

namespace tandem {
namespace functions {

Variable sum(const Variable& x, const std::vector<std::int64_t>& axes = {}, bool keepdims = false);
Variable mean(const Variable& x, const std::vector<std::int64_t>& axes = {}, bool keepdims = false);

}  // namespace functions
}  // namespace tandem
