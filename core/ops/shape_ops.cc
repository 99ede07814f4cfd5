#include "core/ops/shape_ops.h"

#include <algorithm>

#include "core/backend.h"
#include "core/ops/checks.h"

namespace tandem {

namespace {

void copy_view(const Tensor& src, const StridedView& src_view, Tensor& dst, const StridedView& dst_view,
               const Shape& shape, const char* op) {
  backend_for(src.device(), op).copy_strided(src, src_view, dst, dst_view, shape);
}

StridedView contiguous_view(const Shape& shape) { return StridedView{0, contiguous_strides(shape)}; }

}  // namespace

Tensor permute(const Tensor& x, const std::vector<std::int64_t>& axes) {
  ops_detail::check_defined(x, "permute");
  TANDEM_CHECK(axes.size() == x.dim(), "permute: ", axes.size(), " axes given for ", x.description());
  std::vector<bool> seen(x.dim(), false);
  Shape out_shape(x.dim());
  StridedView src{0, Shape(x.dim())};
  const Shape strides = contiguous_strides(x.shape());
  for (std::size_t d = 0; d < axes.size(); ++d) {
    const int axis = normalize_axis(axes[d], x.dim(), "permute");
    TANDEM_CHECK(!seen[axis], "permute: axis ", axes[d], " repeated in ", Shape(axes.begin(), axes.end()));
    seen[axis] = true;
    out_shape[d] = x.shape()[axis];
    src.strides[d] = strides[axis];
  }
  Tensor out(out_shape, x.dtype(), x.device());
  copy_view(x, src, out, contiguous_view(out_shape), out_shape, "permute");
  return out;
}

Tensor transpose(const Tensor& x) {
  std::vector<std::int64_t> axes(x.dim());
  for (std::size_t d = 0; d < x.dim(); ++d) axes[d] = static_cast<std::int64_t>(x.dim() - 1 - d);
  return permute(x, axes);
}

Tensor swapaxes(const Tensor& x, std::int64_t axis1, std::int64_t axis2) {
  std::vector<std::int64_t> axes(x.dim());
  for (std::size_t d = 0; d < x.dim(); ++d) axes[d] = static_cast<std::int64_t>(d);
  std::swap(axes[normalize_axis(axis1, x.dim(), "swapaxes")], axes[normalize_axis(axis2, x.dim(), "swapaxes")]);
  return permute(x, axes);
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  ops_detail::check_defined(x, "broadcast_to");
  TANDEM_CHECK(x.dim() <= shape.size() && broadcast_shapes(x.shape(), shape, "broadcast_to") == shape,
               "broadcast_to: cannot broadcast ", x.description(), " to ", shape);
  if (x.shape() == shape) return x;
  StridedView src{0, Shape(shape.size(), 0)};
  const Shape strides = contiguous_strides(x.shape());
  const std::size_t lead = shape.size() - x.dim();
  for (std::size_t d = 0; d < x.dim(); ++d) src.strides[lead + d] = x.shape()[d] == 1 ? 0 : strides[d];
  Tensor out(shape, x.dtype(), x.device());
  copy_view(x, src, out, contiguous_view(shape), shape, "broadcast_to");
  return out;
}

Tensor squeeze(const Tensor& x, std::int64_t axis) {
  ops_detail::check_defined(x, "squeeze");
  const int a = normalize_axis(axis, x.dim(), "squeeze");
  TANDEM_CHECK(x.shape()[a] == 1, "squeeze: axis ", axis, " of ", x.description(), " has extent ", x.shape()[a]);
  Shape shape = x.shape();
  shape.erase(shape.begin() + a);
  return x.reshape(shape);
}

Tensor expand_dims(const Tensor& x, std::int64_t axis) {
  ops_detail::check_defined(x, "expand_dims");
  const int a = normalize_axis(axis, x.dim() + 1, "expand_dims");
  Shape shape = x.shape();
  shape.insert(shape.begin() + a, 1);
  return x.reshape(shape);
}

Tensor concat(const std::vector<Tensor>& xs, std::int64_t axis) {
  TANDEM_CHECK(!xs.empty(), "concat: needs at least one tensor");
  const Tensor& first = xs[0];
  ops_detail::check_defined(first, "concat");
  TANDEM_CHECK(first.dim() >= 1, "concat: cannot concatenate 0-dimensional tensors (use stack)");
  const int a = normalize_axis(axis, first.dim(), "concat");
  Shape out_shape = first.shape();
  out_shape[a] = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    ops_detail::check_compatible({&first, &xs[i]}, "concat");
    bool same = xs[i].dim() == first.dim();
    for (std::size_t d = 0; same && d < first.dim(); ++d)
      same = static_cast<int>(d) == a || xs[i].shape()[d] == first.shape()[d];
    TANDEM_CHECK(same, "concat: along axis ", axis, ", tensor ", i, " is ", xs[i].description(),
                 " but tensor 0 is ", first.description());
    out_shape[a] += xs[i].shape()[a];
  }
  Tensor out(out_shape, first.dtype(), first.device());
  if (out.numel() > 0) backend_for(out.device(), "concat").concat(xs, a, out);
  return out;
}

Tensor stack(const std::vector<Tensor>& xs, std::int64_t axis) {
  TANDEM_CHECK(!xs.empty(), "stack: needs at least one tensor");
  const int a = normalize_axis(axis, xs[0].dim() + 1, "stack");
  std::vector<Tensor> expanded;
  expanded.reserve(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    ops_detail::check_compatible({&xs[0], &xs[i]}, "stack");
    TANDEM_CHECK(xs[i].shape() == xs[0].shape(), "stack: tensor ", i, " is ", xs[i].description(),
                 " but tensor 0 is ", xs[0].description());
    expanded.push_back(expand_dims(xs[i], a));
  }
  return concat(expanded, a);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& indices, std::int64_t axis) {
  ops_detail::check_defined(x, "split");
  const int a = normalize_axis(axis, x.dim(), "split");
  const std::int64_t extent = x.shape()[a];
  std::vector<Tensor> pieces;
  std::int64_t begin = 0;
  for (std::size_t i = 0; i <= indices.size(); ++i) {
    // Like numpy.split, indices clamp to the axis and a decreasing index gives an empty piece.
    const std::int64_t end = i < indices.size() ? std::clamp<std::int64_t>(indices[i], 0, extent) : extent;
    TANDEM_CHECK(i == indices.size() || indices[i] >= 0, "split: negative index ", indices[i]);
    pieces.push_back(slice(x, a, begin, std::max(begin, end)));
    begin = end;  // numpy: the next piece starts at this index even when it decreased
  }
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, std::int64_t sections, std::int64_t axis) {
  ops_detail::check_defined(x, "split");
  const int a = normalize_axis(axis, x.dim(), "split");
  TANDEM_CHECK(sections > 0 && x.shape()[a] % sections == 0, "split: ", sections,
               " sections do not divide axis ", axis, " of ", x.description());
  std::vector<std::int64_t> indices;
  const std::int64_t step = x.shape()[a] / sections;
  for (std::int64_t i = 1; i < sections; ++i) indices.push_back(i * step);
  return split(x, indices, a);
}

namespace {

// Resolves an index expression into a strided view of x and the shape it selects.
struct ResolvedIndex {
  StridedView view;
  Shape shape;
};

ResolvedIndex resolve(const Tensor& x, const IndexList& indices, const char* op) {
  ops_detail::check_defined(x, op);
  std::size_t consumed = 0;
  for (const Index& i : indices) consumed += i.kind != Index::Kind::new_axis;
  TANDEM_CHECK(consumed <= x.dim(), op, ": too many indices (", consumed, ") for ", x.description());
  const Shape strides = contiguous_strides(x.shape());
  ResolvedIndex r;
  std::size_t d = 0;
  auto take = [&](const Index& idx) {
    if (idx.kind == Index::Kind::new_axis) {
      r.shape.push_back(1);
      r.view.strides.push_back(0);
      return;
    }
    const std::int64_t n = x.shape()[d];
    if (idx.kind == Index::Kind::integer) {
      TANDEM_CHECK(idx.value >= -n && idx.value < n, op, ": index ", idx.value, " is out of range for axis ", d,
                   " of ", x.description());
      r.view.offset += (idx.value < 0 ? idx.value + n : idx.value) * strides[d];
    } else {
      TANDEM_CHECK(idx.step != 0, op, ": slice step must not be 0");
      std::int64_t start, stop;
      auto wrap = [n](std::int64_t v) { return v < 0 ? v + n : v; };
      if (idx.step > 0) {
        start = idx.has_start ? std::clamp<std::int64_t>(wrap(idx.start), 0, n) : 0;
        stop = idx.has_stop ? std::clamp<std::int64_t>(wrap(idx.stop), 0, n) : n;
      } else {
        start = idx.has_start ? std::clamp<std::int64_t>(wrap(idx.start), -1, n - 1) : n - 1;
        stop = idx.has_stop ? std::clamp<std::int64_t>(wrap(idx.stop), -1, n - 1) : -1;
      }
      const std::int64_t span = idx.step > 0 ? stop - start : start - stop;
      const std::int64_t step = idx.step > 0 ? idx.step : -idx.step;
      const std::int64_t length = span > 0 ? (span + step - 1) / step : 0;
      if (length > 0) r.view.offset += start * strides[d];
      r.shape.push_back(length);
      r.view.strides.push_back(strides[d] * idx.step);
    }
    ++d;
  };
  for (const Index& idx : indices) take(idx);
  while (d < x.dim()) take(Index::all());
  return r;
}

}  // namespace

Tensor index(const Tensor& x, const IndexList& indices) {
  const ResolvedIndex r = resolve(x, indices, "index");
  Tensor out(r.shape, x.dtype(), x.device());
  copy_view(x, r.view, out, contiguous_view(r.shape), r.shape, "index");
  return out;
}

void index_put_(Tensor& dst, const IndexList& indices, const Tensor& src) {
  const ResolvedIndex r = resolve(dst, indices, "index_put_");
  ops_detail::check_compatible({&dst, &src}, "index_put_");
  // A src that overlaps dst (dst[::-1] = dst) is copied first, as numpy does.
  const Tensor value = broadcast_to(src.shares_storage_with(dst) ? src.clone() : src, r.shape);
  copy_view(value, contiguous_view(r.shape), dst, r.view, r.shape, "index_put_");
}

Tensor slice(const Tensor& x, std::int64_t axis, std::int64_t begin, std::int64_t end, std::int64_t step) {
  ops_detail::check_defined(x, "slice");
  const int a = normalize_axis(axis, x.dim(), "slice");
  IndexList indices(a, Index::all());
  indices.push_back(Index::range(begin, end, step));
  return index(x, indices);
}

}  // namespace tandem
