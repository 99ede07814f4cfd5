// Row gather and scatter-add for the CPU backend (embeddings and the packing of variable-length
// sequences). Rows are copied or accumulated as contiguous runs of D elements.
#include <algorithm>
#include <cstring>

#include <Eigen/Core>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/parallel.h"
#include "core/error.h"
#include "core/id_dispatch.h"
#include "core/tensor.h"

namespace tandem {

void CpuBackend::take_rows(const Tensor& table, const Tensor& ids, Tensor& out, bool has_ignore,
                           std::int64_t ignore_label) {
  const std::int64_t n = ids.numel(), rows = table.size(0), width = table.size(1);
  if (n == 0 || width == 0) return;
  TANDEM_DISPATCH_NUMERIC(table.dtype(), "take_rows", [&] {
    const scalar_t* src = table.data<scalar_t>();
    scalar_t* dst = out.data<scalar_t>();
    with_ids(ids, "take_rows", [&](const auto* id) {
      cpu::parallel_for(n, width, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          const std::int64_t row = static_cast<std::int64_t>(id[i]);
          scalar_t* o = dst + i * width;
          if (has_ignore && row == ignore_label) {
            std::fill(o, o + width, scalar_t(0));
            continue;
          }
          // The front end validated the ids; this guards the memory all the same.
          TANDEM_CHECK(row >= 0 && row < rows, "take_rows: id ", row, " at flat position ", i,
                       " is outside [0, ", rows, ")");
          std::memcpy(o, src + row * width, static_cast<std::size_t>(width) * sizeof(scalar_t));
        }
      });
    });
  });
}

void CpuBackend::index_add_rows(Tensor& table, const Tensor& ids, const Tensor& src, bool has_ignore,
                                std::int64_t ignore_label) {
  const std::int64_t n = ids.numel(), rows = table.size(0), width = table.size(1);
  if (n == 0 || width == 0) return;
  TANDEM_DISPATCH_NUMERIC(table.dtype(), "index_add_rows", [&] {
    scalar_t* dst = table.data<scalar_t>();
    const scalar_t* from = src.data<scalar_t>();
    with_ids(ids, "index_add_rows", [&](const auto* id) {
      // The ids are checked once, before anything is written.
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t row = static_cast<std::int64_t>(id[i]);
        TANDEM_CHECK((has_ignore && row == ignore_label) || (row >= 0 && row < rows), "index_add_rows: id ", row,
                     " at flat position ", i, " is outside [0, ", rows, ")");
      }
      // Threads split the columns, never the ids: repeated ids then accumulate on one thread,
      // in id order, so the result is race-free and does not depend on the thread count.
      // Column chunks of at least 16 elements keep each thread on whole cache lines.
      const std::int64_t chunks = (width + 15) / 16;
      cpu::parallel_for(chunks, n * 16, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
        const std::int64_t c0 = b * 16, c1 = std::min(width, e * 16);
        for (std::int64_t i = 0; i < n; ++i) {
          const std::int64_t row = static_cast<std::int64_t>(id[i]);
          if (has_ignore && row == ignore_label) continue;
          scalar_t* o = dst + row * width;
          const scalar_t* s = from + i * width;
          for (std::int64_t c = c0; c < c1; ++c) o[c] += s[c];
        }
      });
    });
  });
}

}  // namespace tandem
