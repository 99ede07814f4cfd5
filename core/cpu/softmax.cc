// The fused softmax of the CPU backend (semantics: core/backend.h, softmax_forward): one pass
// per row for the maximum, one for exp and the sum (Eigen's vectorised exp, IEEE's underflow),
// one to normalise; masked keys are never read and are written as exact zeros. Rows run in
// parallel, each on one thread, so a row's result does not depend on the thread count.
#include <algorithm>

#include <Eigen/Core>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/ieee_exp.h"
#include "core/cpu/parallel.h"
#include "core/tensor.h"

namespace tandem {

namespace {

template <typename T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// The keys row r sees: all n, or under the causal mask those up to its query's position.
inline std::int64_t visible_keys(std::int64_t r, std::int64_t n, std::int64_t causal_queries) {
  return causal_queries > 0 ? r % causal_queries + n - causal_queries + 1 : n;
}

template <typename T>
void softmax_rows(const T* x, T* y, std::int64_t begin, std::int64_t end, std::int64_t n, T scale,
                  std::int64_t causal_queries) {
  for (std::int64_t r = begin; r < end; ++r) {
    const std::int64_t k = visible_keys(r, n, causal_queries);
    ConstArrayMap<T> in(x + r * n, k);
    ArrayMap<T> out(y + r * n, k);
    // scale > 0: the largest scaled score is scale times the largest score.
    const T top = in.maxCoeff() * scale;
    out = in * scale - top;  // <= 0; exp in place
    cpu::exp_chunk(ConstArrayMap<T>(y + r * n, k), out, y + r * n, k);
    out *= T(1) / out.sum();
    std::fill(y + r * n + k, y + (r + 1) * n, T(0));
  }
}

template <typename T>
void softmax_backward_rows(const T* y, const T* gy, T* gx, std::int64_t begin, std::int64_t end, std::int64_t n,
                           T scale) {
  for (std::int64_t r = begin; r < end; ++r) {
    ConstArrayMap<T> yr(y + r * n, n), gr(gy + r * n, n);
    ArrayMap<T> out(gx + r * n, n);
    const T dot = (yr * gr).sum();
    out = scale * yr * (gr - dot);
  }
}

}  // namespace

void CpuBackend::softmax_forward(const Tensor& x, std::int64_t rows, std::int64_t n, double scale,
                                 std::int64_t causal_queries, Tensor& y) {
  TANDEM_DISPATCH_FLOAT(x.dtype(), "softmax", [&] {
    const scalar_t* px = x.data<scalar_t>();
    scalar_t* py = y.data<scalar_t>();
    cpu::parallel_for(rows, 8 * n, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
      softmax_rows(px, py, b, e, n, static_cast<scalar_t>(scale), causal_queries);
    });
  });
}

void CpuBackend::softmax_backward(const Tensor& y, const Tensor& gy, std::int64_t rows, std::int64_t n, double scale,
                                  Tensor& gx) {
  TANDEM_DISPATCH_FLOAT(y.dtype(), "softmax (backward)", [&] {
    const scalar_t *py = y.data<scalar_t>(), *pg = gy.data<scalar_t>();
    scalar_t* px = gx.data<scalar_t>();
    cpu::parallel_for(rows, 2 * n, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
      softmax_backward_rows(py, pg, px, b, e, n, static_cast<scalar_t>(scale));
    });
  });
}

}  // namespace tandem
