// Helpers shared by the core tests: seeded inputs, naive index arithmetic for reference
// results, and element-wise comparison that reports the first mismatch.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "core/ops.h"

namespace test_util {

using tandem::DType;
using tandem::Shape;
using tandem::Tensor;

// A seeded uniform tensor in [low, high).
inline Tensor uniform(const Shape& shape, std::uint64_t seed, double low = -1, double high = 1,
                      DType dtype = DType::f32) {
  tandem::Generator gen(seed);
  return tandem::rand_uniform(shape, gen, low, high, dtype);
}

// 0, 1, 2, ... in the given shape and dtype.
inline Tensor iota(const Shape& shape, DType dtype = DType::f32) {
  return tandem::arange(0, static_cast<double>(tandem::shape_numel(shape)), 1, dtype).reshape(shape);
}

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// Multi-index of a row-major flat index.
inline std::vector<std::int64_t> unravel(std::int64_t flat, const Shape& shape) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] == 0 ? 0 : flat % shape[d];
    if (shape[d] != 0) flat /= shape[d];
  }
  return index;
}

// Flat index into `shape` of the element that broadcasting maps to `out_index` (right-aligned,
// extent-1 axes pinned to 0).
inline std::int64_t broadcast_flat(const std::vector<std::int64_t>& out_index, const Shape& shape) {
  const std::size_t lead = out_index.size() - shape.size();
  std::int64_t flat = 0;
  for (std::size_t d = 0; d < shape.size(); ++d)
    flat = flat * shape[d] + (shape[d] == 1 ? 0 : out_index[lead + d]);
  return flat;
}

// Index of the first element where |got - want| > abs_tol + rel_tol * |want|, or -1. NaNs
// compare equal only to NaNs; infinities must match exactly.
inline std::int64_t first_mismatch(const std::vector<double>& got, const std::vector<double>& want,
                                   double rel_tol, double abs_tol) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(w) || std::isnan(g)) {
      if (std::isnan(w) != std::isnan(g)) return static_cast<std::int64_t>(i);
      continue;
    }
    if (std::isinf(w) || std::isinf(g)) {
      if (g != w) return static_cast<std::int64_t>(i);
      continue;
    }
    if (std::abs(g - w) > abs_tol + rel_tol * std::abs(w)) return static_cast<std::int64_t>(i);
  }
  return -1;
}

inline std::string mismatch_message(const std::vector<double>& got, const std::vector<double>& want,
                                    std::int64_t i) {
  std::ostringstream out;
  out.precision(17);
  if (i >= 0) out << "first mismatch at flat index " << i << ": got " << got[i] << ", want " << want[i];
  return out.str();
}

// Requires that `t` holds `want` (compared as doubles) within the tolerances; on failure the
// message names the first differing element and the line of the check.
inline void require_values(const Tensor& t, const std::vector<double>& want, double rel_tol = 0,
                           double abs_tol = 0) {
  const std::vector<double> got = values(t);
  REQUIRE(got.size() == want.size());
  const std::int64_t bad = first_mismatch(got, want, rel_tol, abs_tol);
  INFO(mismatch_message(got, want, bad));
  REQUIRE(bad == -1);
}

}  // namespace test_util

// REQUIRE_VALUES(tensor, {expected...}[, rel_tol[, abs_tol]]); without tolerances it is exact.
#define REQUIRE_VALUES(...)                      \
  do {                                           \
    INFO("values checked at line " << __LINE__); \
    test_util::require_values(__VA_ARGS__);      \
  } while (0)
