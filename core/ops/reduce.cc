#include "core/ops/reduce.h"

#include <algorithm>

#include "core/backend.h"
#include "core/ops/checks.h"
#include "core/ops/elementwise.h"
#include "core/ops/half_compute.h"
#include "core/ops/shape_ops.h"

namespace tandem {

namespace {

const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::argmax: return "argmax";
    case ReduceOp::argmin: return "argmin";
  }
  return "reduce";
}

// Sorted, unique, non-negative axes; all axes when `axes` is empty.
std::vector<int> normalize_axes(const Axes& axes, std::size_t ndim, const char* op) {
  std::vector<int> out;
  if (axes.empty()) {
    for (std::size_t d = 0; d < ndim; ++d) out.push_back(static_cast<int>(d));
    return out;
  }
  for (std::int64_t axis : axes) out.push_back(normalize_axis(axis, ndim, op));
  std::sort(out.begin(), out.end());
  TANDEM_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": repeated axis in ",
               Shape(axes.begin(), axes.end()));
  return out;
}

Tensor reduce(ReduceOp op, const Tensor& x, const Axes& axes, bool keepdims) {
  const char* name = reduce_name(op);
  if (x.defined() && is_half(x.dtype())) return ops_detail::narrow(reduce(op, x.to(DType::f32), axes, keepdims), x.dtype());
  ops_detail::check_numeric(x, name);
  const std::vector<int> reduced_axes = normalize_axes(axes, x.dim(), name);
  std::vector<bool> is_reduced(x.dim(), false);
  for (int axis : reduced_axes) is_reduced[axis] = true;

  Shape out_shape, kept_shape;
  std::int64_t reduced = 1;
  for (std::size_t d = 0; d < x.dim(); ++d) {
    if (is_reduced[d]) {
      reduced *= x.shape()[d];
      if (keepdims) out_shape.push_back(1);
    } else {
      out_shape.push_back(x.shape()[d]);
      kept_shape.push_back(x.shape()[d]);
    }
  }
  const bool is_index = op == ReduceOp::argmax || op == ReduceOp::argmin;
  TANDEM_CHECK(reduced > 0 || op == ReduceOp::sum, name, ": cannot reduce an empty axis of ", x.description());

  // The kernel reduces the middle of [outer, reduced, inner]. Reduced axes that form one
  // contiguous block are already in that form; others are moved to the end first.
  Tensor input = x;
  std::int64_t outer = 1, inner = 1;
  const bool contiguous_block =
      reduced_axes.empty() || reduced_axes.back() - reduced_axes.front() + 1 == static_cast<int>(reduced_axes.size());
  if (contiguous_block) {
    const int lo = reduced_axes.empty() ? 0 : reduced_axes.front();
    const int hi = reduced_axes.empty() ? -1 : reduced_axes.back();
    for (int d = 0; d < lo; ++d) outer *= x.shape()[d];
    for (int d = hi + 1; d < static_cast<int>(x.dim()); ++d) inner *= x.shape()[d];
  } else if (!is_index) {
    // Sum, max and min are associative: reduce the last run of adjacent reduced axes first, then
    // the others on the smaller result. Passes over contiguous blocks instead of a permuted copy
    // of x (a convolution's bias gradient, a sum over {0, 2, 3}, spent most of its time copying).
    std::size_t start = reduced_axes.size() - 1;
    while (start > 0 && reduced_axes[start - 1] == reduced_axes[start] - 1) --start;
    const Axes last(reduced_axes.begin() + static_cast<std::ptrdiff_t>(start), reduced_axes.end());
    const Axes rest(reduced_axes.begin(), reduced_axes.begin() + static_cast<std::ptrdiff_t>(start));
    const Tensor result = reduce(op, reduce(op, x, last, true), rest, true);
    return keepdims ? result : result.reshape(out_shape);
  } else {
    Axes perm;
    for (std::size_t d = 0; d < x.dim(); ++d)
      if (!is_reduced[d]) perm.push_back(static_cast<std::int64_t>(d));
    for (int axis : reduced_axes) perm.push_back(axis);
    input = permute(x, perm);
    outer = shape_numel(kept_shape);
  }
  Tensor out(out_shape, is_index ? DType::i64 : x.dtype(), x.device());
  backend_for(x.device(), name).reduce(op, input, outer, reduced, inner, out);
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const Axes& axes, bool keepdims) { return reduce(ReduceOp::sum, x, axes, keepdims); }
Tensor max(const Tensor& x, const Axes& axes, bool keepdims) { return reduce(ReduceOp::max, x, axes, keepdims); }
Tensor min(const Tensor& x, const Axes& axes, bool keepdims) { return reduce(ReduceOp::min, x, axes, keepdims); }

Tensor mean(const Tensor& x, const Axes& axes, bool keepdims) {
  if (x.defined() && is_half(x.dtype())) return ops_detail::narrow(mean(x.to(DType::f32), axes, keepdims), x.dtype());
  ops_detail::check_floating(x, "mean");
  Tensor total = sum(x, axes, keepdims);
  if (total.numel() == 0) return total;  // an empty result: nothing to divide, whatever the axes
  const std::int64_t count = x.numel() / std::max<std::int64_t>(total.numel(), 1);
  TANDEM_CHECK(count > 0, "mean: mean over an empty axis of ", x.description());
  return mul(total, 1.0 / static_cast<double>(count));
}

Tensor argmax(const Tensor& x, std::int64_t axis, bool keepdims) {
  return reduce(ReduceOp::argmax, x, {axis}, keepdims);
}

Tensor argmin(const Tensor& x, std::int64_t axis, bool keepdims) {
  return reduce(ReduceOp::argmin, x, {axis}, keepdims);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  ops_detail::check_defined(x, "sum_to");
  if (x.shape() == shape) return x;
  TANDEM_CHECK(shape.size() <= x.dim() && broadcast_shapes(shape, x.shape(), "sum_to") == x.shape(),
               "sum_to: ", x.description(), " is not a broadcast of shape ", shape);
  const std::size_t lead = x.dim() - shape.size();
  Axes axes;
  for (std::size_t d = 0; d < x.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && x.shape()[d] != 1)) axes.push_back(static_cast<std::int64_t>(d));
  if (axes.empty()) return x.reshape(shape);
  return sum(x, axes, true).reshape(shape);
}

}  // namespace tandem
