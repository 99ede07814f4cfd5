// Iteration over N operands that share one shape but have their own strides (0 where an
// operand is broadcast). Dimensions that are contiguous for every operand are merged first,
// so the common cases (same shapes, bias rows, scalars) reduce to one long inner loop that the
// compiler vectorises.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/cpu/parallel.h"
#include "core/shape.h"

namespace tandem {
namespace cpu {

template <std::size_t N>
struct StridedLoop {
  Shape shape;                    // after merging; at least one dimension
  std::array<Shape, N> strides;   // per operand, in elements

  StridedLoop(const Shape& full_shape, const std::array<Shape, N>& full_strides) {
    // Drop extent-1 dimensions (their stride never matters), then merge neighbours whose
    // strides line up for all operands.
    for (std::size_t d = 0; d < full_shape.size(); ++d) {
      if (full_shape[d] == 1) continue;
      if (!shape.empty()) {
        bool mergeable = true;
        for (std::size_t k = 0; k < N; ++k)
          mergeable = mergeable && strides[k].back() == full_strides[k][d] * full_shape[d];
        if (mergeable) {
          shape.back() *= full_shape[d];
          for (std::size_t k = 0; k < N; ++k) strides[k].back() = full_strides[k][d];
          continue;
        }
      }
      shape.push_back(full_shape[d]);
      for (std::size_t k = 0; k < N; ++k) strides[k].push_back(full_strides[k][d]);
    }
    if (shape.empty()) {
      shape.push_back(1);
      for (std::size_t k = 0; k < N; ++k) strides[k].push_back(0);
    }
  }

  // Calls inner(offsets, n, inner_strides) once per row of the innermost dimension, where
  // offsets are each operand's element offset at the row's start. Rows run in parallel when
  // the total work is large.
  template <typename Inner>
  void run(const Inner& inner, std::int64_t cost_per_element = 1) const {
    const std::size_t nd = shape.size();
    const std::int64_t inner_n = shape[nd - 1];
    std::array<std::int64_t, N> inner_strides;
    for (std::size_t k = 0; k < N; ++k) inner_strides[k] = strides[k][nd - 1];
    std::int64_t rows = 1;
    for (std::size_t d = 0; d + 1 < nd; ++d) rows *= shape[d];
    parallel_for(rows, inner_n * cost_per_element, kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
      if (rows == 1) {
        // One long row: split it instead, so a big same-shape operation still uses all cores.
        std::array<std::int64_t, N> zero{};
        parallel_for(inner_n, cost_per_element, kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
          std::array<std::int64_t, N> offsets;
          for (std::size_t k = 0; k < N; ++k) offsets[k] = zero[k] + b * inner_strides[k];
          inner(offsets, e - b, inner_strides);
        });
        return;
      }
      // The outer index of the chunk's first row by division, then counted up like an odometer
      // (a division per axis and row had cost more than copying a short row: the heads'
      // transposes of attention, rows of 32 floats).
      std::array<std::int64_t, N> offsets{};
      Shape index(nd - 1, 0);
      std::int64_t rest = begin;
      for (std::size_t d = nd - 1; d-- > 0;) {
        index[d] = rest % shape[d];
        rest /= shape[d];
        for (std::size_t k = 0; k < N; ++k) offsets[k] += index[d] * strides[k][d];
      }
      for (std::int64_t row = begin; row < end; ++row) {
        inner(offsets, inner_n, inner_strides);
        for (std::size_t d = nd - 1; d-- > 0;) {
          for (std::size_t k = 0; k < N; ++k) offsets[k] += strides[k][d];
          if (++index[d] < shape[d]) break;
          for (std::size_t k = 0; k < N; ++k) offsets[k] -= strides[k][d] * shape[d];
          index[d] = 0;
        }
      }
    });
  }
};

// Strides of `shape` broadcast to `out_shape` (right-aligned; 0 on broadcast axes).
inline Shape broadcast_strides(const Shape& shape, const Shape& out_shape) {
  const Shape own = contiguous_strides(shape);
  Shape strides(out_shape.size(), 0);
  const std::size_t lead = out_shape.size() - shape.size();
  for (std::size_t d = 0; d < shape.size(); ++d) strides[lead + d] = shape[d] == 1 ? 0 : own[d];
  return strides;
}

}  // namespace cpu
}  // namespace tandem
