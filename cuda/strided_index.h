// The index arithmetic of tandem's strided CUDA kernels (broadcasting element-wise ops,
// strided copies): element `linear` of a row-major shape sits at base[k] + sum_d i_d *
// strides[k][d] in operand k. The struct is passed to kernels by value and the same code runs
// on the host, where tests/cuda/strided_index_test.cc checks it without a GPU.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/host_device.h"
#include "core/shape.h"

namespace tandem {
namespace cuda {

// Shapes with more axes than this (after merging, see make_indexer) are rejected with an error.
constexpr int kMaxIndexDims = 8;

template <int Operands>
struct StridedIndexer {
  int dims = 0;
  std::int64_t sizes[kMaxIndexDims] = {};
  std::int64_t strides[Operands][kMaxIndexDims] = {};
  std::int64_t base[Operands] = {};

  // offsets[k] = the element offset of element `linear` in operand k. Index is the type the
  // divisions are done in: kernels over fewer than 2^32 elements pass std::uint32_t, whose
  // division costs a GPU a fraction of a 64-bit one (linear and every size must then fit).
  template <typename Index = std::int64_t>
  TANDEM_HOST_DEVICE void offsets(std::int64_t linear, std::int64_t* offsets) const {
    for (int k = 0; k < Operands; ++k) offsets[k] = base[k];
    Index rest = static_cast<Index>(linear);
    for (int d = dims - 1; d >= 0; --d) {
      const Index size = static_cast<Index>(sizes[d]);
      const Index quotient = rest / size;
      const std::int64_t i = static_cast<std::int64_t>(rest - quotient * size);
      rest = quotient;
      for (int k = 0; k < Operands; ++k) offsets[k] += i * strides[k][d];
    }
  }
};

// Drops extent-1 axes and merges each pair of adjacent axes that is contiguous in every
// operand (stride[d] == stride[d + 1] * size[d + 1]), so that a contiguous tensor needs one axis
// and a broadcast row two. Returns the merged sizes; `strides` are rewritten to match. Throws
// naming OP when more than kMaxIndexDims axes remain.
Shape merge_axes(const char* op, const Shape& shape, std::vector<Shape>& strides);

// The strides (in elements) of a contiguous tensor of in_shape broadcast to out_shape by NumPy
// rules: 0 on the axes it is broadcast along (missing leading axes or extent 1).
Shape broadcast_strides(const Shape& in_shape, const Shape& out_shape);

template <int Operands>
StridedIndexer<Operands> make_indexer(const char* op, const Shape& shape,
                                      const std::array<Shape, Operands>& operand_strides,
                                      const std::array<std::int64_t, Operands>& bases) {
  std::vector<Shape> strides(operand_strides.begin(), operand_strides.end());
  const Shape sizes = merge_axes(op, shape, strides);
  StridedIndexer<Operands> indexer;
  indexer.dims = static_cast<int>(sizes.size());
  for (int d = 0; d < indexer.dims; ++d) {
    indexer.sizes[d] = sizes[d];
    for (int k = 0; k < Operands; ++k) indexer.strides[k][d] = strides[k][d];
  }
  for (int k = 0; k < Operands; ++k) indexer.base[k] = bases[k];
  return indexer;
}

}  // namespace cuda
}  // namespace tandem
