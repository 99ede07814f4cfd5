// Strided copies of the CUDA backend: the one primitive behind permute, slicing, concat, split,
// stack and broadcast_to (core/backend.h). Only the element width matters, so every dtype is
// copied as 1-, 4- or 8-byte words. A view whose axes all merge into one contiguous run on both
// sides is a cudaMemcpyAsync; a single merged axis with other strides a linear kernel; anything
// else computes each element's two offsets with StridedIndexer.
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "core/tensor.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernel_util.cuh"
#include "cuda/strided_index.h"

namespace tandem {
namespace cuda {

namespace {

// dst[i * dst_stride] = src[i * src_stride] (base offsets already applied to the pointers).
template <typename T>
__global__ void copy_linear_kernel(std::int64_t n, const T* src, std::int64_t src_stride, T* dst,
                                   std::int64_t dst_stride) {
  TANDEM_GRID_STRIDE_LOOP(i, n) dst[i * dst_stride] = src[i * src_stride];
}

// Operand 0 of the indexer is dst, operand 1 src; the bases hold the views' offsets.
template <typename Index, typename T>
__global__ void copy_strided_kernel(std::int64_t n, StridedIndexer<2> indexer, const T* src, T* dst) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    std::int64_t offset[2];
    indexer.template offsets<Index>(i, offset);
    dst[offset[0]] = src[offset[1]];
  }
}

template <typename T>
void copy_typed(const DeviceContext& ctx, const T* src, const StridedView& src_view, T* dst,
                const StridedView& dst_view, const Shape& shape) {
  const char* name = "copy_strided";
  const std::int64_t n = shape_numel(shape);
  const StridedIndexer<2> indexer =
      make_indexer<2>(name, shape, {dst_view.strides, src_view.strides}, {dst_view.offset, src_view.offset});
  if (indexer.dims <= 1) {
    // One run (dims == 0: a single element).
    const std::int64_t dst_stride = indexer.dims == 0 ? 1 : indexer.strides[0][0];
    const std::int64_t src_stride = indexer.dims == 0 ? 1 : indexer.strides[1][0];
    T* d = dst + dst_view.offset;
    const T* s = src + src_view.offset;
    if (dst_stride == 1 && src_stride == 1) {
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(d, s, static_cast<std::size_t>(n) * sizeof(T), cudaMemcpyDeviceToDevice,
                                        ctx.stream));
    } else {
      launch_elementwise(name, ctx, n, copy_linear_kernel<T>, n, s, src_stride, d, dst_stride);
    }
  } else if (n <= static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max())) {
    launch_elementwise(name, ctx, n, copy_strided_kernel<std::uint32_t, T>, n, indexer, src, dst);
  } else {
    launch_elementwise(name, ctx, n, copy_strided_kernel<std::int64_t, T>, n, indexer, src, dst);
  }
}

}  // namespace

void CudaBackend::copy_strided(const Tensor& src, const StridedView& src_view, Tensor& dst,
                               const StridedView& dst_view, const Shape& shape) {
  if (shape_numel(shape) == 0) return;
  const DeviceContext& ctx = context_of(dst, "copy_strided");
  switch (dtype_size(src.dtype())) {
    case 1:
      copy_typed(ctx, static_cast<const std::uint8_t*>(src.raw_data()), src_view,
                 static_cast<std::uint8_t*>(dst.raw_data()), dst_view, shape);
      break;
    case 2:
      copy_typed(ctx, static_cast<const std::uint16_t*>(src.raw_data()), src_view,
                 static_cast<std::uint16_t*>(dst.raw_data()), dst_view, shape);
      break;
    case 4:
      copy_typed(ctx, static_cast<const std::uint32_t*>(src.raw_data()), src_view,
                 static_cast<std::uint32_t*>(dst.raw_data()), dst_view, shape);
      break;
    case 8:
      copy_typed(ctx, static_cast<const std::uint64_t*>(src.raw_data()), src_view,
                 static_cast<std::uint64_t*>(dst.raw_data()), dst_view, shape);
      break;
    default:
      TANDEM_FAIL("copy_strided: unsupported element size ", dtype_size(src.dtype()));
  }
}

}  // namespace cuda
}  // namespace tandem
