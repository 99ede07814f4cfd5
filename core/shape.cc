#include "core/shape.h"

#include "core/error.h"

namespace tandem {

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t extent : shape) n *= extent;
  return n;
}

std::ostream& operator<<(std::ostream& out, const std::vector<std::int64_t>& shape) {
  return out << shape_str(shape);
}

std::ostream& operator<<(std::ostream& out, const Shape& shape) { return out << shape_str(shape); }

std::string shape_str(const Shape& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t stride = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t ndim = std::max(a.size(), b.size());
  Shape out(ndim);
  for (std::size_t i = 0; i < ndim; ++i) {
    const std::int64_t ea = i < ndim - a.size() ? 1 : a[i - (ndim - a.size())];
    const std::int64_t eb = i < ndim - b.size() ? 1 : b[i - (ndim - b.size())];
    TANDEM_CHECK(ea == eb || ea == 1 || eb == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
                 " cannot be broadcast together (axis ", i, ": ", ea, " vs ", eb, ")");
    out[i] = ea == 1 ? eb : ea;
  }
  return out;
}

int normalize_axis(std::int64_t axis, std::size_t ndim, const char* op) {
  const std::int64_t n = static_cast<std::int64_t>(ndim);
  TANDEM_CHECK(axis >= -n && axis < n, op, ": axis ", axis, " is out of range for a tensor of ", ndim,
               " dimensions");
  return static_cast<int>(axis < 0 ? axis + n : axis);
}

}  // namespace tandem
