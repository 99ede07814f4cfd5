#include "cuda/strided_index.h"

#include "core/error.h"

namespace tandem {
namespace cuda {

Shape merge_axes(const char* op, const Shape& shape, std::vector<Shape>& strides) {
  for (const Shape& s : strides)
    TANDEM_CHECK(s.size() == shape.size(), op, ": strides ", shape_str(s), " do not match shape ", shape_str(shape));
  Shape sizes;
  std::vector<Shape> merged(strides.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;  // contributes nothing to any offset
    bool mergeable = !sizes.empty();
    for (std::size_t k = 0; k < strides.size() && mergeable; ++k)
      mergeable = merged[k].back() == strides[k][d] * shape[d];
    if (mergeable) {
      sizes.back() *= shape[d];
      for (std::size_t k = 0; k < strides.size(); ++k) merged[k].back() = strides[k][d];
    } else {
      sizes.push_back(shape[d]);
      for (std::size_t k = 0; k < strides.size(); ++k) merged[k].push_back(strides[k][d]);
    }
  }
  TANDEM_CHECK(sizes.size() <= static_cast<std::size_t>(kMaxIndexDims), op, ": the CUDA kernels index at most ",
               kMaxIndexDims, " non-mergeable axes, got ", sizes.size(), " for shape ", shape_str(shape));
  strides = std::move(merged);
  return sizes;
}

Shape broadcast_strides(const Shape& in_shape, const Shape& out_shape) {
  TANDEM_CHECK(in_shape.size() <= out_shape.size(), "broadcast_strides: cannot broadcast ", shape_str(in_shape),
               " to ", shape_str(out_shape));
  const Shape contiguous = contiguous_strides(in_shape);
  const std::size_t lead = out_shape.size() - in_shape.size();
  Shape strides(out_shape.size(), 0);
  for (std::size_t d = 0; d < in_shape.size(); ++d) {
    TANDEM_CHECK(in_shape[d] == out_shape[lead + d] || in_shape[d] == 1, "broadcast_strides: cannot broadcast ",
                 shape_str(in_shape), " to ", shape_str(out_shape));
    strides[lead + d] = in_shape[d] == 1 ? 0 : contiguous[d];
  }
  return strides;
}

}  // namespace cuda
}  // namespace tandem
