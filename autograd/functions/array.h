// Shape manipulation: each one moves values around, and its backward moves the gradients back.
#pragma once

#include <vector>

#include "autograd/variable.h"
#include "core/ops/shape_ops.h"

namespace tandem {
namespace functions {

Variable reshape(const Variable& x, const Shape& shape);  // one extent may be -1
Variable expand_dims(const Variable& x, std::int64_t axis);
Variable squeeze(const Variable& x, std::int64_t axis);
// Permutes the axes; an empty list reverses them (Chainer's F.transpose(x)).
Variable transpose(const Variable& x, const std::vector<std::int64_t>& axes = {});
Variable broadcast_to(const Variable& x, const Shape& shape);
Variable concat(const Variables& xs, std::int64_t axis = 1);  // Chainer's default axis is 1
Variable stack(const Variables& xs, std::int64_t axis = 0);
// Chainer's split_axis: `sections` equal pieces, or cut before each index.
Variables split_axis(const Variable& x, std::int64_t sections, std::int64_t axis);
Variables split_axis(const Variable& x, const std::vector<std::int64_t>& indices, std::int64_t axis);
// x[indices] with basic NumPy indexing (integers, slices, new axes).
Variable get_item(const Variable& x, const IndexList& indices);
// x converted to `dtype` (Chainer's F.cast), rounded once to nearest even; its gradient is the
// output's converted back to x's dtype. Returns x itself when the dtype already matches.
Variable cast(const Variable& x, DType dtype);

}  // namespace functions
}  // namespace tandem
