// The fused softmax cross-entropy of the CPU backend (semantics: core/backend.h,
// softmax_cross_entropy_forward). Forward reads each row twice (its maximum; exp and the sum
// into a row-sized scratch) and writes two numbers per row, never a scores-sized tensor;
// backward reads the row once and writes its gradient. Exp is Eigen's vectorised one with IEEE's
// underflow (core/cpu/ieee_exp.h), as in the softmax. Rows run in parallel, each on one thread,
// so a row's result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

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

// Calls body(labels) with t's labels as a typed pointer (i32 or i64, checked by the front end).
template <typename Body>
void with_labels(const Tensor& t, const Body& body) {
  if (t.dtype() == DType::i32)
    body(t.data<std::int32_t>());
  else
    body(t.data<std::int64_t>());
}

template <typename T, typename L>
void cross_entropy_rows(const T* x, const L* t, T* losses, T* top, T* log_sum, std::int64_t begin, std::int64_t end,
                        std::int64_t n, std::int64_t ignore_label) {
  // 64-byte aligned: Eigen's vectorised sum starts its packets at the first aligned element, so
  // the order of the additions (and the sum's last bits) would follow wherever malloc put a
  // plain vector, and with it the loss of identical runs.
  const std::size_t bytes = (static_cast<std::size_t>(n) * sizeof(T) + 63) / 64 * 64;
  const std::unique_ptr<T, decltype(&std::free)> scratch(static_cast<T*>(std::aligned_alloc(64, bytes)), &std::free);
  TANDEM_CHECK(scratch != nullptr, "softmax_cross_entropy: could not allocate ", bytes, " bytes of scratch");
  ArrayMap<T> e(scratch.get(), n);
  for (std::int64_t r = begin; r < end; ++r) {
    ConstArrayMap<T> row(x + r * n, n);
    const T m = row.maxCoeff();
    e = row - m;  // <= 0; exp in place
    cpu::exp_chunk(ConstArrayMap<T>(scratch.get(), n), e, scratch.get(), n);
    const T ls = std::log(e.sum());
    top[r] = m;
    log_sum[r] = ls;
    const std::int64_t label = static_cast<std::int64_t>(t[r]);
    losses[r] = label == ignore_label ? T(0) : ls - (x[r * n + label] - m);
  }
}

template <typename T, typename L>
void cross_entropy_backward_rows(const T* x, const T* top, const T* log_sum, const L* t, const T* coef,
                                 std::int64_t coef_stride, T* gx, std::int64_t begin, std::int64_t end, std::int64_t n,
                                 std::int64_t ignore_label) {
  for (std::int64_t r = begin; r < end; ++r) {
    T* out = gx + r * n;
    const std::int64_t label = static_cast<std::int64_t>(t[r]);
    if (label == ignore_label) {
      std::fill(out, out + n, T(0));
      continue;
    }
    ArrayMap<T> g(out, n);
    g = (ConstArrayMap<T>(x + r * n, n) - top[r]) - log_sum[r];
    cpu::exp_chunk(ConstArrayMap<T>(out, n), g, out, n);
    // The label's entry as p - 1 before scaling (exact when p is near 1), not p * c - c.
    out[label] -= T(1);
    g *= coef[r * coef_stride];
  }
}

}  // namespace

void CpuBackend::softmax_cross_entropy_forward(const Tensor& x, const Tensor& t, std::int64_t rows, std::int64_t n,
                                               std::int64_t ignore_label, Tensor& losses, Tensor& stats) {
  TANDEM_DISPATCH_FLOAT(x.dtype(), "softmax_cross_entropy", [&] {
    const scalar_t* px = x.data<scalar_t>();
    scalar_t* pl = losses.data<scalar_t>();
    scalar_t* ps = stats.data<scalar_t>();
    with_labels(t, [&](const auto* labels) {
      cpu::parallel_for(rows, 12 * n, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
        cross_entropy_rows(px, labels, pl, ps, ps + rows, b, e, n, ignore_label);
      });
    });
  });
}

void CpuBackend::softmax_cross_entropy_backward(const Tensor& x, const Tensor& stats, const Tensor& t,
                                                const Tensor& coef, std::int64_t rows, std::int64_t n,
                                                std::int64_t ignore_label, Tensor& gx) {
  TANDEM_DISPATCH_FLOAT(x.dtype(), "softmax_cross_entropy (backward)", [&] {
    const scalar_t *px = x.data<scalar_t>(), *ps = stats.data<scalar_t>(), *pc = coef.data<scalar_t>();
    const std::int64_t coef_stride = coef.numel() == 1 ? 0 : 1;
    scalar_t* pg = gx.data<scalar_t>();
    with_labels(t, [&](const auto* labels) {
      cpu::parallel_for(rows, 10 * n, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
        cross_entropy_backward_rows(px, ps, ps + rows, labels, pc, coef_stride, pg, b, e, n, ignore_label);
      });
    });
  });
}

}  // namespace tandem
