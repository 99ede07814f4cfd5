// Reductions over axes, with keepdims as in NumPy. An empty axis list means every axis.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tandem {

using Axes = std::vector<std::int64_t>;

Tensor sum(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
Tensor mean(const Tensor& x, const Axes& axes = {}, bool keepdims = false);  // floating only
Tensor max(const Tensor& x, const Axes& axes = {}, bool keepdims = false);   // errors on empty input
Tensor min(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
// Index (i64) of the first maximum/minimum along one axis.
Tensor argmax(const Tensor& x, std::int64_t axis, bool keepdims = false);
Tensor argmin(const Tensor& x, std::int64_t axis, bool keepdims = false);

// Sums x down to `shape`, the inverse of broadcasting `shape` up to x.shape(): leading axes
// are summed away and axes where `shape` has extent 1 are summed with keepdims. The one place
// where broadcast gradients are reduced back to their input's shape.
Tensor sum_to(const Tensor& x, const Shape& shape);

}  // namespace tandem
