// Reductions of the CUDA backend over the middle axis of an [outer, reduced, inner] view, with
// the values of the CPU backend (core/cpu/reduce.cc):
//  - sum accumulates f32 and f64 in double (more accurate than the CPU's f32 sums) and integers
//    modulo 2^64, which leaves i32/i64 sums wrapped exactly as the CPU's;
//  - max/min and argmax/argmin fold (value, index) pairs under one total order that reproduces
//    the CPU's sequential `v > best` scan: the first index of the extreme value wins, a NaN at
//    index 0 wins over everything (the scan can never leave it), and a NaN anywhere else loses
//    to every number. max/min return the winning pair's value, so even the sign of a zero
//    matches the scan's.
//
// Launch shapes, chosen by the shape alone so that results are deterministic (every combine
// happens in an order fixed by the shape, never by timing or by the GPU model):
//  - few inputs per output, or many outputs that are not rows: one thread per output folds its
//    inputs in order (adjacent threads read adjacent inner columns);
//  - inner == 1 (each output a contiguous row): a block per row, its threads striding along the
//    row and combining in a shared-memory tree;
//  - inner > 1 with few outputs: 32 x 8 tiles, 32 adjacent columns (coalesced) by 8 rows, the 8
//    row partials combined in order.
// When even that leaves too few blocks (a full sum of 10^7 elements is one output), `reduced` is
// cut into equal chunks: pass 1 writes a partial per (output, chunk), pass 2 reduces them.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "core/tensor.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernel_util.cuh"

namespace tandem {
namespace cuda {

namespace {

// ---- what each reduction folds ----

template <typename T>
struct SumAccumulator {
  using type = double;
};
template <>
struct SumAccumulator<std::int32_t> {
  using type = std::uint64_t;
};
template <>
struct SumAccumulator<std::int64_t> {
  using type = std::uint64_t;
};

template <typename T>
struct SumReducer {
  using In = T;
  using Acc = typename SumAccumulator<T>::type;
  using Out = T;
  static __device__ Acc identity() { return Acc(0); }
  static __device__ Acc load(In x, std::int64_t) { return static_cast<Acc>(x); }
  static __device__ Acc combine(Acc a, Acc b) { return a + b; }
  static __device__ Out finish(Acc a) { return static_cast<Out>(a); }
};

// A candidate extreme: its value and its index along the reduced axis (-1: none yet).
template <typename T>
struct Candidate {
  T value;
  std::int64_t index;
};

// The CPU's scan keeps element 0 unless `v > best` (or `<`) holds, which is false for any NaN:
// rank 0 is a NaN at index 0, rank 1 a number, rank 2 a NaN elsewhere. Within rank 1 the larger
// (smaller) value wins and ties go to the lower index. This is a total order, so picking its
// best is associative and commutative: any fixed combination order gives the scan's answer.
template <typename T, bool kMax>
__device__ Candidate<T> pick(const Candidate<T>& a, const Candidate<T>& b) {
  if (a.index < 0) return b;
  if (b.index < 0) return a;
  const bool a_nan = a.value != a.value, b_nan = b.value != b.value;
  const int a_rank = a_nan ? (a.index == 0 ? 0 : 2) : 1;
  const int b_rank = b_nan ? (b.index == 0 ? 0 : 2) : 1;
  if (a_rank != b_rank) return a_rank < b_rank ? a : b;
  if (a_rank == 1) {
    if (kMax ? a.value > b.value : a.value < b.value) return a;
    if (kMax ? b.value > a.value : b.value < a.value) return b;
  }
  return a.index <= b.index ? a : b;
}

template <typename T, bool kMax, bool kIndex>
struct ExtremeReducer {
  using In = T;
  using Acc = Candidate<T>;
  using Out = typename std::conditional<kIndex, std::int64_t, T>::type;
  static __device__ Acc identity() { return Acc{T(0), -1}; }
  static __device__ Acc load(In x, std::int64_t r) { return Acc{x, r}; }
  static __device__ Acc combine(const Acc& a, const Acc& b) { return pick<T, kMax>(a, b); }
  static __device__ Out finish(const Acc& a) {
    if constexpr (kIndex) {
      return a.index;
    } else {
      return a.value;
    }
  }
};

// Pass 2 of a split reduction: reads R's partials instead of inputs.
template <typename R>
struct PartialReducer {
  using In = typename R::Acc;
  using Acc = typename R::Acc;
  using Out = typename R::Out;
  static __device__ Acc identity() { return R::identity(); }
  static __device__ Acc load(const In& x, std::int64_t) { return x; }
  static __device__ Acc combine(const Acc& a, const Acc& b) { return R::combine(a, b); }
  static __device__ Out finish(const Acc& a) { return R::finish(a); }
};

// Final passes write R::Out, pass 1 of a split reduction R::Acc.
template <typename R, bool kFinal>
using Dst = typename std::conditional<kFinal, typename R::Out, typename R::Acc>::type;

template <typename R, bool kFinal>
__device__ void store(Dst<R, kFinal>* dst, const typename R::Acc& acc) {
  if constexpr (kFinal) {
    *dst = R::finish(acc);
  } else {
    *dst = acc;
  }
}

// ---- kernels ----

constexpr int kMaxRowThreads = 256;
constexpr int kTileColumns = 32;
constexpr int kTileRows = 8;

// One thread per output j = (o, c), folding r = 0, 1, ... in order.
template <typename R>
__global__ void reduce_per_thread_kernel(const typename R::In* in, std::int64_t outer, std::int64_t reduced,
                                         std::int64_t inner, typename R::Out* out) {
  TANDEM_GRID_STRIDE_LOOP(j, outer * inner) {
    const std::int64_t o = j / inner, c = j - o * inner;
    const typename R::In* base = in + o * reduced * inner + c;
    typename R::Acc acc = R::identity();
    for (std::int64_t r = 0; r < reduced; ++r) acc = R::combine(acc, R::load(base[r * inner], r));
    out[j] = R::finish(acc);
  }
}

// inner == 1. Block s = (row, q) reduces r in [q * chunk, min((q + 1) * chunk, reduced)) of its
// row: thread t folds r = begin + t, begin + t + blockDim.x, ..., then a tree halves the
// blockDim.x (a power of two) partials. Writes dst[s], i.e. [rows, chunks].
template <typename R, bool kFinal>
__global__ void reduce_rows_kernel(const typename R::In* in, std::int64_t rows, std::int64_t reduced,
                                   std::int64_t chunk, std::int64_t chunks, Dst<R, kFinal>* dst) {
  __shared__ typename R::Acc partial[kMaxRowThreads];
  const unsigned t = threadIdx.x;
  for (std::int64_t s = blockIdx.x; s < rows * chunks; s += gridDim.x) {
    const std::int64_t row = s / chunks, q = s - row * chunks;
    const std::int64_t begin = q * chunk, end = begin + chunk < reduced ? begin + chunk : reduced;
    const typename R::In* base = in + row * reduced;
    typename R::Acc acc = R::identity();
    for (std::int64_t r = begin + t; r < end; r += blockDim.x) acc = R::combine(acc, R::load(base[r], r));
    partial[t] = acc;
    __syncthreads();
    for (unsigned width = blockDim.x / 2; width > 0; width /= 2) {
      if (t < width) partial[t] = R::combine(partial[t], partial[t + width]);
      __syncthreads();
    }
    if (t == 0) store<R, kFinal>(dst + s, partial[0]);
    __syncthreads();  // partial[0] is read before the next segment overwrites it
  }
}

// inner > 1. Block tile = (o, q, column tile): thread (x, y) folds column c = tile * 32 + x over
// rows r = begin + y, begin + y + 8, ... of chunk q, then row y = 0 folds the 8 partials of its
// column in order. Writes dst[(o * chunks + q) * inner + c], i.e. [outer, chunks, inner].
template <typename R, bool kFinal>
__global__ void reduce_columns_kernel(const typename R::In* in, std::int64_t outer, std::int64_t reduced,
                                      std::int64_t inner, std::int64_t chunk, std::int64_t chunks,
                                      Dst<R, kFinal>* dst) {
  __shared__ typename R::Acc partial[kTileRows][kTileColumns];
  const std::int64_t column_tiles = (inner + kTileColumns - 1) / kTileColumns;
  const std::int64_t tiles = outer * chunks * column_tiles;
  for (std::int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const std::int64_t column_tile = tile % column_tiles, oq = tile / column_tiles;
    const std::int64_t q = oq % chunks, o = oq / chunks;
    const std::int64_t c = column_tile * kTileColumns + threadIdx.x;
    const std::int64_t begin = q * chunk, end = begin + chunk < reduced ? begin + chunk : reduced;
    typename R::Acc acc = R::identity();
    if (c < inner) {
      const typename R::In* base = in + o * reduced * inner + c;
      for (std::int64_t r = begin + threadIdx.y; r < end; r += kTileRows)
        acc = R::combine(acc, R::load(base[r * inner], r));
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < inner) {
      for (int y = 1; y < kTileRows; ++y) acc = R::combine(acc, partial[y][threadIdx.x]);
      store<R, kFinal>(dst + (o * chunks + q) * inner + c, acc);
    }
    __syncthreads();
  }
}

// ---- planning ----

// At least this many outputs (not rows) keep a GPU busy with one thread each.
constexpr std::int64_t kManyOutputs = 1 << 15;
// Up to this many inputs per output are folded by one thread whatever the output count.
constexpr std::int64_t kShortReduction = 32;
// A split reduction aims at this many blocks (several waves on any current GPU) ...
constexpr std::int64_t kTargetBlocks = 1024;
// ... with chunks of at least this many rows (row reductions) or tile rows (column reductions).
// Both exceed kTargetBlocks, so pass 2 (at most kTargetBlocks partials) is never split again.
constexpr std::int64_t kMinRowChunk = 4096;
constexpr std::int64_t kMinColumnChunk = 2048;
// Blocks of a grid-stride launch.
constexpr std::int64_t kMaxBlocks = 65535LL * 8;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

unsigned blocks_for(std::int64_t work_items) {
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min(work_items, kMaxBlocks)));
}

// The threads of a row block: a power of two in [32, kMaxRowThreads], about chunk / 8.
unsigned row_threads(std::int64_t chunk) {
  unsigned threads = 32;
  while (threads < kMaxRowThreads && threads * 8 < chunk) threads *= 2;
  return threads;
}

// Whether one thread per output is the launch: for short reductions, and for many outputs
// unless each is a contiguous row (one thread per row would read rows far apart).
bool per_thread(std::int64_t outer, std::int64_t reduced, std::int64_t inner) {
  if (reduced <= kShortReduction) return true;
  return inner > 1 && outer * inner >= kManyOutputs;
}

// One pass of the block kernels over `chunks` chunks of `chunk` rows (chunks == 1: unsplit).
template <typename R, bool kFinal>
void launch_blocks(const char* name, const DeviceContext& ctx, const typename R::In* in, std::int64_t outer,
                   std::int64_t reduced, std::int64_t inner, std::int64_t chunk, std::int64_t chunks,
                   Dst<R, kFinal>* dst) {
  if (inner == 1) {
    reduce_rows_kernel<R, kFinal><<<blocks_for(outer * chunks), row_threads(chunk), 0, ctx.stream>>>(
        in, outer, reduced, chunk, chunks, dst);
  } else {
    const dim3 threads(kTileColumns, kTileRows);
    reduce_columns_kernel<R, kFinal><<<blocks_for(outer * chunks * ceil_div(inner, kTileColumns)), threads, 0,
                                       ctx.stream>>>(in, outer, reduced, inner, chunk, chunks, dst);
  }
  TANDEM_CUDA_CHECK_LAUNCH(name);
}

// An unsplit reduction straight into out.
template <typename R>
void launch_final(const char* name, const DeviceContext& ctx, const typename R::In* in, std::int64_t outer,
                  std::int64_t reduced, std::int64_t inner, typename R::Out* out) {
  if (per_thread(outer, reduced, inner)) {
    launch_elementwise(name, ctx, outer * inner, reduce_per_thread_kernel<R>, in, outer, reduced, inner, out);
  } else {
    launch_blocks<R, true>(name, ctx, in, outer, reduced, inner, reduced, 1, out);
  }
}

template <typename R>
void run_reduce(const char* name, const DeviceContext& ctx, const typename R::In* in, std::int64_t outer,
                std::int64_t reduced, std::int64_t inner, typename R::Out* out) {
  std::int64_t chunks = 1;
  if (!per_thread(outer, reduced, inner)) {
    const std::int64_t blocks = inner == 1 ? outer : outer * ceil_div(inner, kTileColumns);
    const std::int64_t min_chunk = inner == 1 ? kMinRowChunk : kMinColumnChunk;
    if (blocks < kTargetBlocks) chunks = std::min(ceil_div(kTargetBlocks, blocks), ceil_div(reduced, min_chunk));
  }
  if (chunks <= 1) return launch_final<R>(name, ctx, in, outer, reduced, inner, out);

  const std::int64_t chunk = ceil_div(reduced, chunks);
  chunks = ceil_div(reduced, chunk);  // every chunk non-empty
  using Acc = typename R::Acc;
  DeviceBuffer partials(static_cast<std::size_t>(outer * chunks * inner) * sizeof(Acc), ctx.index);
  launch_blocks<R, false>(name, ctx, in, outer, reduced, inner, chunk, chunks, partials.as<Acc>());
  launch_final<PartialReducer<R>>(name, ctx, partials.as<Acc>(), outer, chunks, inner, out);
}

template <typename T>
void reduce_typed(ReduceOp op, const DeviceContext& ctx, const Tensor& in, std::int64_t outer, std::int64_t reduced,
                  std::int64_t inner, Tensor& out) {
  const char* name = "reduce";
  const T* x = in.data<T>();
  switch (op) {
    case ReduceOp::sum: return run_reduce<SumReducer<T>>(name, ctx, x, outer, reduced, inner, out.data<T>());
    case ReduceOp::max:
      return run_reduce<ExtremeReducer<T, true, false>>(name, ctx, x, outer, reduced, inner, out.data<T>());
    case ReduceOp::min:
      return run_reduce<ExtremeReducer<T, false, false>>(name, ctx, x, outer, reduced, inner, out.data<T>());
    case ReduceOp::argmax:
      return run_reduce<ExtremeReducer<T, true, true>>(name, ctx, x, outer, reduced, inner,
                                                         out.data<std::int64_t>());
    case ReduceOp::argmin:
      return run_reduce<ExtremeReducer<T, false, true>>(name, ctx, x, outer, reduced, inner,
                                                          out.data<std::int64_t>());
  }
  TANDEM_FAIL("reduce: bad op");
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const Tensor& in, std::int64_t outer, std::int64_t reduced, std::int64_t inner,
                         Tensor& out) {
  if (out.numel() == 0) return;
  TANDEM_DISPATCH_NUMERIC(in.dtype(), "reduce", [&] {
    const DeviceContext& ctx = context_of(out, "reduce");
    if (reduced == 0) {
      // Only a sum has a value over nothing (the front end rejects empty max/min and arg*); the
      // CPU writes 0 for max/min too, and so does this.
      TANDEM_CHECK(op != ReduceOp::argmax && op != ReduceOp::argmin, "reduce: no index of an empty axis");
      TANDEM_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), ctx.stream));
      return;
    }
    reduce_typed<scalar_t>(op, ctx, in, outer, reduced, inner, out);
  });
}

}  // namespace cuda
}  // namespace tandem
