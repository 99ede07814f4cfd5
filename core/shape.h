// Shapes are plain vectors of extents; tensors are row-major, so strides follow from shapes.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/error.h"

namespace tandem {

using Shape = std::vector<std::int64_t>;

std::int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3]"
Shape contiguous_strides(const Shape& shape);  // in elements

// NumPy broadcasting of two shapes; OP names the operation in the error.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Maps a possibly negative axis into [0, ndim); OP names the operation in the error.
int normalize_axis(std::int64_t axis, std::size_t ndim, const char* op);

}  // namespace tandem

