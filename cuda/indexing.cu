// Row gather and scatter-add of the CUDA backend (semantics: core/cpu/indexing.cc), for
// embeddings and the packing of variable-length sequences.
//
// take_rows: one thread per output element. index_add_rows must accumulate repeated ids in a
// fixed order without float atomics, so the host (which reads the ids anyway: the front end's
// range check already brought them over) groups the positions by destination row, in increasing
// position order, and uploads that list; one thread per (distinct row, column) then adds its
// sources in that order onto the table's value, exactly as the CPU's sequential loop does.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/id_dispatch.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernel_util.cuh"

namespace tandem {
namespace cuda {

namespace {

// 32-bit division per element where every element index fits (the common case).
bool fits_32_bits(std::int64_t n) { return n <= std::numeric_limits<std::int32_t>::max(); }

// out[e] for e = i * width + col: table[ids[i], col], or 0 for the ignore_label. Ids outside
// [0, rows) were rejected by the front end; they give zeros here rather than a stray read.
template <typename T, typename Id, typename Index>
__global__ void take_rows_kernel(const T* table, const Id* ids, std::int64_t rows, Index width, bool has_ignore,
                                 std::int64_t ignore_label, std::int64_t n, T* out) {
  TANDEM_GRID_STRIDE_LOOP(e, n) {
    const Index i = static_cast<Index>(e) / width;
    const Index col = static_cast<Index>(e) - i * width;
    const std::int64_t row = static_cast<std::int64_t>(ids[i]);
    const bool zero = (has_ignore && row == ignore_label) || row < 0 || row >= rows;
    out[e] = zero ? T(0) : table[row * static_cast<std::int64_t>(width) + static_cast<std::int64_t>(col)];
  }
}

// The scatter-add plan: for each distinct destination row r (in `rows`), the source positions
// positions[offsets[r] .. offsets[r + 1]) in increasing order. One array of int64 on the device:
// [rows (distinct)][offsets (distinct + 1)][positions (kept)].
struct RowGroups {
  std::int64_t distinct = 0;
  std::vector<std::int64_t> packed;
};

// Checks the ids like the CPU (before anything is written) and groups them by row.
template <typename Id>
RowGroups group_rows(const std::vector<Id>& ids, std::int64_t rows, bool has_ignore, std::int64_t ignore_label) {
  const std::int64_t n = static_cast<std::int64_t>(ids.size());
  std::vector<std::int64_t> kept;
  kept.reserve(ids.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = static_cast<std::int64_t>(ids[i]);
    if (has_ignore && row == ignore_label) continue;
    TANDEM_CHECK(row >= 0 && row < rows, "index_add_rows: id ", row, " at flat position ", i, " is outside [0, ",
                 rows, ")");
    kept.push_back(i);
  }
  // Stable: the positions of one row stay in increasing order.
  std::stable_sort(kept.begin(), kept.end(), [&](std::int64_t p, std::int64_t q) {
    return static_cast<std::int64_t>(ids[p]) < static_cast<std::int64_t>(ids[q]);
  });
  RowGroups groups;
  std::vector<std::int64_t> distinct_rows, offsets;
  for (std::size_t k = 0; k < kept.size(); ++k) {
    const std::int64_t row = static_cast<std::int64_t>(ids[kept[k]]);
    if (distinct_rows.empty() || distinct_rows.back() != row) {
      distinct_rows.push_back(row);
      offsets.push_back(static_cast<std::int64_t>(k));
    }
  }
  offsets.push_back(static_cast<std::int64_t>(kept.size()));
  groups.distinct = static_cast<std::int64_t>(distinct_rows.size());
  groups.packed.reserve(distinct_rows.size() + offsets.size() + kept.size());
  groups.packed.insert(groups.packed.end(), distinct_rows.begin(), distinct_rows.end());
  groups.packed.insert(groups.packed.end(), offsets.begin(), offsets.end());
  groups.packed.insert(groups.packed.end(), kept.begin(), kept.end());
  return groups;
}

// table[rows[r], col] += src[p, col] for the positions p of group r, in their order; e = r * width
// + col over the distinct rows (each written by exactly one thread per column).
template <typename T, typename Index>
__global__ void index_add_rows_kernel(T* table, const T* src, const std::int64_t* rows, const std::int64_t* offsets,
                                      const std::int64_t* positions, Index width, std::int64_t n) {
  TANDEM_GRID_STRIDE_LOOP(e, n) {
    const Index r = static_cast<Index>(e) / width;
    const Index col = static_cast<Index>(e) - r * width;
    const std::int64_t w = width;
    T* out = table + rows[r] * w + col;
    T acc = *out;
    for (std::int64_t k = offsets[r]; k < offsets[r + 1]; ++k) acc += src[positions[k] * w + col];
    *out = acc;
  }
}

}  // namespace

void CudaBackend::take_rows(const Tensor& table, const Tensor& ids, Tensor& out, bool has_ignore,
                            std::int64_t ignore_label) {
  const std::int64_t rows = table.size(0), width = table.size(1);
  const std::int64_t n = ids.numel() * width;
  if (n == 0) return;
  TANDEM_DISPATCH_NUMERIC(table.dtype(), "take_rows", [&] {
    using T = scalar_t;
    DeviceContext& ctx = context_of(table, "take_rows");
    with_ids(ids, "take_rows", [&](const auto* id) {
      using Id = std::remove_const_t<std::remove_pointer_t<decltype(id)>>;
      if (fits_32_bits(n)) {
        launch_elementwise("take_rows", ctx, n, take_rows_kernel<T, Id, std::uint32_t>, table.data<T>(), id, rows,
                           static_cast<std::uint32_t>(width), has_ignore, ignore_label, n, out.data<T>());
      } else {
        launch_elementwise("take_rows", ctx, n, take_rows_kernel<T, Id, std::int64_t>, table.data<T>(), id, rows,
                           width, has_ignore, ignore_label, n, out.data<T>());
      }
    });
  });
}

void CudaBackend::index_add_rows(Tensor& table, const Tensor& ids, const Tensor& src, bool has_ignore,
                                 std::int64_t ignore_label) {
  const std::int64_t n = ids.numel(), rows = table.size(0), width = table.size(1);
  if (n == 0 || width == 0) return;
  TANDEM_DISPATCH_NUMERIC(table.dtype(), "index_add_rows", [&] {
    using T = scalar_t;
    DeviceContext& ctx = context_of(table, "index_add_rows");
    RowGroups groups;
    with_ids(ids, "index_add_rows", [&](const auto* id) {
      using Id = std::remove_const_t<std::remove_pointer_t<decltype(id)>>;
      // Waits for the kernels that wrote the ids (copy_to_host synchronises the stream).
      std::vector<Id> host(static_cast<std::size_t>(n));
      copy_to_host(host.data(), id, host.size() * sizeof(Id), ctx.index);
      groups = group_rows(host, rows, has_ignore, ignore_label);
    });
    if (groups.distinct == 0) return;  // every id was the ignore_label
    const std::int64_t distinct = groups.distinct;
    const std::int64_t elements = distinct * width;
    DeviceBuffer plan(groups.packed.size() * sizeof(std::int64_t), ctx.index);
    std::int64_t* rows_d = plan.as<std::int64_t>();
    // copy_from_host waits for the copy, so the host vector may go when this scope ends.
    copy_from_host(rows_d, groups.packed.data(), groups.packed.size() * sizeof(std::int64_t), ctx.index);
    const std::int64_t* offsets_d = rows_d + distinct;
    const std::int64_t* positions_d = offsets_d + distinct + 1;
    if (fits_32_bits(elements)) {
      launch_elementwise("index_add_rows", ctx, elements, index_add_rows_kernel<T, std::uint32_t>, table.data<T>(),
                         src.data<T>(), static_cast<const std::int64_t*>(rows_d), offsets_d, positions_d,
                         static_cast<std::uint32_t>(width), elements);
    } else {
      launch_elementwise("index_add_rows", ctx, elements, index_add_rows_kernel<T, std::int64_t>, table.data<T>(),
                         src.data<T>(), static_cast<const std::int64_t*>(rows_d), offsets_d, positions_d, width,
                         elements);
    }
  });
}

}  // namespace cuda
}  // namespace tandem
