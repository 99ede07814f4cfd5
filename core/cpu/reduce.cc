// Reductions over the middle axis of an [outer, reduced, inner] view.
#include <limits>
#include <type_traits>

#include <Eigen/Core>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/parallel.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tandem {

namespace {

template <typename Row>
bool leading_nan(const Row& row) {
  using T = typename Row::Scalar;
  if constexpr (std::is_floating_point<T>::value) return row[0] != row[0];
  return false;
}

template <typename T>
void reduce_values(ReduceOp op, const T* in, std::int64_t outer, std::int64_t reduced, std::int64_t inner, T* out) {
  if (inner == 1) {
    // Each output is a contiguous run: Eigen's packet reductions.
    cpu::parallel_for(outer, reduced, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t o = b; o < e; ++o) {
        Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> row(in + o * reduced, reduced);
        switch (op) {
          case ReduceOp::sum: out[o] = row.sum(); break;
          // The NaN rule of the strided path and of argmax (a scan keeping the first extreme: a
          // NaN wins only as the first element), at packet speed: Eigen's default maxCoeff lets
          // a NaN win or lose by its lane. PropagateNumbers skips NaNs; a leading one is the scan's.
          case ReduceOp::max: out[o] = leading_nan(row) ? row[0] : row.template maxCoeff<Eigen::PropagateNumbers>(); break;
          case ReduceOp::min: out[o] = leading_nan(row) ? row[0] : row.template minCoeff<Eigen::PropagateNumbers>(); break;
          default: TANDEM_FAIL("reduce: bad op");
        }
      }
    });
    return;
  }
  // Otherwise accumulate whole rows of `inner` elements, which vectorises over the inner axis.
  // Parallel over outer blocks, or over inner columns when there is only one block.
  auto run = [&](std::int64_t o, std::int64_t c0, std::int64_t c1) {
    const T* base = in + o * reduced * inner;
    T* dst = out + o * inner;
    for (std::int64_t c = c0; c < c1; ++c) dst[c] = base[c];
    for (std::int64_t r = 1; r < reduced; ++r) {
      const T* row = base + r * inner;
      switch (op) {
        case ReduceOp::sum: for (std::int64_t c = c0; c < c1; ++c) dst[c] += row[c]; break;
        case ReduceOp::max: for (std::int64_t c = c0; c < c1; ++c) dst[c] = row[c] > dst[c] ? row[c] : dst[c]; break;
        case ReduceOp::min: for (std::int64_t c = c0; c < c1; ++c) dst[c] = row[c] < dst[c] ? row[c] : dst[c]; break;
        default: TANDEM_FAIL("reduce: bad op");
      }
    }
  };
  if (outer == 1) {
    cpu::parallel_for(inner, reduced, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) { run(0, b, e); });
  } else {
    cpu::parallel_for(outer, reduced * inner, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t o = b; o < e; ++o) run(o, 0, inner);
    });
  }
}

// argmax/argmin return the first index of the extreme value, as NumPy does.
template <typename T>
void reduce_index(ReduceOp op, const T* in, std::int64_t outer, std::int64_t reduced, std::int64_t inner,
                  std::int64_t* out) {
  const bool want_max = op == ReduceOp::argmax;
  cpu::parallel_for(outer * inner, reduced, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t j = b; j < e; ++j) {
      const std::int64_t o = j / inner, c = j % inner;
      const T* base = in + o * reduced * inner + c;
      std::int64_t best = 0;
      T best_value = base[0];
      for (std::int64_t r = 1; r < reduced; ++r) {
        const T v = base[r * inner];
        if (want_max ? v > best_value : v < best_value) {
          best_value = v;
          best = r;
        }
      }
      out[j] = best;
    }
  });
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const Tensor& in, std::int64_t outer, std::int64_t reduced,
                        std::int64_t inner, Tensor& out) {
  if (out.numel() == 0) return;
  TANDEM_DISPATCH_NUMERIC(in.dtype(), "reduce", [&] {
    if (op == ReduceOp::argmax || op == ReduceOp::argmin) {
      reduce_index(op, in.data<scalar_t>(), outer, reduced, inner, out.data<std::int64_t>());
    } else if (reduced == 0) {
      // Only a sum has a value over nothing; the front end rejects empty max/min.
      std::fill(out.data<scalar_t>(), out.data<scalar_t>() + out.numel(), scalar_t(0));
    } else {
      reduce_values(op, in.data<scalar_t>(), outer, reduced, inner, out.data<scalar_t>());
    }
  });
}

}  // namespace tandem
