// concat on the GPU in one launch per 64 inputs (and split_flat, its inverse for 1-D pieces): a batch of sequences is joined and split at
// every layer boundary (embedding, LSTM, output), and one copy per sequence made a 64-sequence
// batch cost 64 launches per concat (core/backend.h). The inputs travel in the kernel's
// parameter space (about 1 KB per 64), so no table is copied to the device first.
//
// Every input and the output are contiguous: out is [outer, columns] with input i holding the
// columns [begin[i], begin[i + 1]) of each row (its extent along the axis times the inner size).
// Only the element width matters, so every dtype is copied as 1-, 4- or 8-byte words.
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernel_util.cuh"

namespace tandem {
namespace cuda {

namespace {

constexpr int kInputsPerLaunch = 64;

template <typename T>
struct ConcatChunk {
  const T* src[kInputsPerLaunch];
  std::int64_t begin[kInputsPerLaunch + 1];  // column of out where input i starts
  int count;
};

// Element e of the chunk's columns: its row, its column, and (binary search) the input holding it.
template <typename T>
__global__ void concat_kernel(std::int64_t n, ConcatChunk<T> chunk, std::int64_t out_columns, T* out) {
  const std::int64_t first = chunk.begin[0], width = chunk.begin[chunk.count] - first;
  TANDEM_GRID_STRIDE_LOOP(e, n) {
    const std::int64_t row = e / width, column = first + e % width;
    int lo = 0, hi = chunk.count - 1;  // the last input that starts at or before `column`
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (chunk.begin[mid] <= column) lo = mid;
      else hi = mid - 1;
    }
    const std::int64_t input_columns = chunk.begin[lo + 1] - chunk.begin[lo];
    out[row * out_columns + column] = chunk.src[lo][row * input_columns + (column - chunk.begin[lo])];
  }
}

template <typename T>
void concat_typed(const DeviceContext& ctx, const std::vector<Tensor>& xs, int axis, Tensor& out) {
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= out.shape()[d];
  for (std::size_t d = axis + 1; d < out.dim(); ++d) inner *= out.shape()[d];
  const std::int64_t out_columns = out.shape()[axis] * inner;
  T* dst = static_cast<T*>(out.raw_data());
  ConcatChunk<T> chunk{};
  std::int64_t column = 0;
  auto launch = [&] {
    if (chunk.count == 0) return;
    chunk.begin[chunk.count] = column;
    const std::int64_t n = outer * (column - chunk.begin[0]);
    launch_elementwise("concat", ctx, n, concat_kernel<T>, n, chunk, out_columns, dst);
    chunk.count = 0;
  };
  for (const Tensor& x : xs) {
    const std::int64_t columns = x.shape()[axis] * inner;
    if (columns == 0) continue;  // an empty input holds no column
    chunk.src[chunk.count] = static_cast<const T*>(x.raw_data());
    chunk.begin[chunk.count] = column;
    ++chunk.count;
    column += columns;
    if (chunk.count == kInputsPerLaunch) launch();
  }
  launch();
}

// The inverse: piece i of the chunk receives the columns [begin[i], begin[i + 1]) of src.
template <typename T>
struct SplitChunk {
  T* dst[kInputsPerLaunch];
  std::int64_t begin[kInputsPerLaunch + 1];
  int count;
};

template <typename T>
__global__ void split_kernel(std::int64_t n, SplitChunk<T> chunk, const T* src) {
  const std::int64_t first = chunk.begin[0];
  TANDEM_GRID_STRIDE_LOOP(e, n) {
    const std::int64_t column = first + e;
    int lo = 0, hi = chunk.count - 1;  // the last piece that starts at or before `column`
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (chunk.begin[mid] <= column) lo = mid;
      else hi = mid - 1;
    }
    chunk.dst[lo][column - chunk.begin[lo]] = src[column];
  }
}

template <typename T>
void split_typed(const DeviceContext& ctx, const Tensor& src, std::vector<Tensor>& outs) {
  const T* from = static_cast<const T*>(src.raw_data());
  SplitChunk<T> chunk{};
  std::int64_t column = 0;
  auto launch = [&] {
    if (chunk.count == 0) return;
    chunk.begin[chunk.count] = column;
    const std::int64_t n = column - chunk.begin[0];
    launch_elementwise("split_flat", ctx, n, split_kernel<T>, n, chunk, from);
    chunk.count = 0;
  };
  for (Tensor& out : outs) {
    if (out.numel() == 0) continue;
    chunk.dst[chunk.count] = static_cast<T*>(out.raw_data());
    chunk.begin[chunk.count] = column;
    ++chunk.count;
    column += out.numel();
    if (chunk.count == kInputsPerLaunch) launch();
  }
  launch();
}

}  // namespace

void split_flat(const DeviceContext& ctx, const Tensor& src, std::vector<Tensor>& outs) {
  std::int64_t total = 0;
  for (const Tensor& out : outs) {
    TANDEM_CHECK(out.dtype() == src.dtype() && out.device() == src.device(), "split_flat: piece ",
                 out.description(), " does not match the source ", src.description());
    total += out.numel();
  }
  TANDEM_CHECK(total == src.numel(), "split_flat: the pieces hold ", total, " elements, the source ",
               src.numel());
  switch (dtype_size(src.dtype())) {
    case 1: return split_typed<std::uint8_t>(ctx, src, outs);
    case 2: return split_typed<std::uint16_t>(ctx, src, outs);
    case 4: return split_typed<std::uint32_t>(ctx, src, outs);
    case 8: return split_typed<std::uint64_t>(ctx, src, outs);
    default: TANDEM_FAIL("split_flat: unsupported element size ", dtype_size(src.dtype()));
  }
}

void CudaBackend::concat(const std::vector<Tensor>& xs, int axis, Tensor& out) {
  if (out.numel() == 0) return;
  const DeviceContext& ctx = context_of(out, "concat");
  switch (dtype_size(out.dtype())) {
    case 1: return concat_typed<std::uint8_t>(ctx, xs, axis, out);
    case 2: return concat_typed<std::uint16_t>(ctx, xs, axis, out);
    case 4: return concat_typed<std::uint32_t>(ctx, xs, axis, out);
    case 8: return concat_typed<std::uint64_t>(ctx, xs, axis, out);
    default: TANDEM_FAIL("concat: unsupported element size ", dtype_size(out.dtype()));
  }
}

}  // namespace cuda
}  // namespace tandem
