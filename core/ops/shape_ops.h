// Axis manipulation: permutations, broadcasting, joining, splitting and indexing. Operations
// that can be views (reshape, squeeze, expand_dims) share storage; the others copy, except
// that broadcast_to returns x itself when the shape already matches (as sum_to does).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tandem {

Tensor permute(const Tensor& x, const std::vector<std::int64_t>& axes);
Tensor transpose(const Tensor& x);  // reverses all axes (NumPy's .T)
Tensor swapaxes(const Tensor& x, std::int64_t axis1, std::int64_t axis2);
Tensor broadcast_to(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x, std::int64_t axis);  // view; the axis must have extent 1
Tensor expand_dims(const Tensor& x, std::int64_t axis);  // view

Tensor concat(const std::vector<Tensor>& xs, std::int64_t axis = 0);
Tensor stack(const std::vector<Tensor>& xs, std::int64_t axis = 0);
// numpy.split: `sections` equal pieces (must divide the axis), or cut before each index.
std::vector<Tensor> split(const Tensor& x, std::int64_t sections, std::int64_t axis = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& indices, std::int64_t axis = 0);

// One entry of an index expression, like NumPy's basic indexing: an integer (removes the
// axis), a slice with Python semantics (negative and out-of-range bounds clamp; step may be
// negative), or a new axis of extent 1.
struct Index {
  enum class Kind { integer, slice, new_axis };
  Kind kind = Kind::slice;
  std::int64_t value = 0;  // for integer
  std::int64_t start = 0, stop = 0, step = 1;
  bool has_start = false, has_stop = false;

  static Index at(std::int64_t i) { Index r; r.kind = Kind::integer; r.value = i; return r; }
  static Index all() { return Index(); }
  static Index range(std::int64_t start, std::int64_t stop, std::int64_t step = 1) {
    Index r; r.start = start; r.stop = stop; r.step = step; r.has_start = r.has_stop = true; return r;
  }
  static Index from(std::int64_t start, std::int64_t step = 1) {
    Index r; r.start = start; r.step = step; r.has_start = true; return r;
  }
  static Index until(std::int64_t stop, std::int64_t step = 1) {
    Index r; r.stop = stop; r.step = step; r.has_stop = true; return r;
  }
  static Index new_axis() { Index r; r.kind = Kind::new_axis; return r; }
};
using IndexList = std::vector<Index>;

// x[indices] (missing trailing entries mean "all").
Tensor index(const Tensor& x, const IndexList& indices);
// dst[indices] = src, in place; src broadcasts to the indexed shape.
void index_put_(Tensor& dst, const IndexList& indices, const Tensor& src);
// x[begin:end:step] along one axis.
Tensor slice(const Tensor& x, std::int64_t axis, std::int64_t begin, std::int64_t end, std::int64_t step = 1);

}  // namespace tandem
