#include "core/ops/cross_entropy.h"

#include <vector>

#include "core/backend.h"
#include "core/ops/checks.h"
#include "core/ops/elementwise.h"
#include "core/ops/half_compute.h"
#include "core/ops/reduce.h"
#include "core/ops/shape_ops.h"

namespace tandem {

namespace {

constexpr const char* kOp = "softmax_cross_entropy";

void check_operands(const Tensor& x, const Tensor& t, const char* op) {
  ops_detail::check_floating(x, op);
  ops_detail::check_defined(t, op);
  TANDEM_CHECK(x.dim() == 2, op, ": scores must be [rows, classes], got ", x.description());
  TANDEM_CHECK(t.dtype() == DType::i32 || t.dtype() == DType::i64, op, ": labels must be i32 or i64, got ",
               t.description());
  TANDEM_CHECK(t.shape() == Shape{x.size(0)}, op, ": labels ", t.description(), " do not match scores ",
               x.description(), " (expected labels of shape ", Shape{x.size(0)}, ")");
  TANDEM_CHECK(x.device() == t.device(), op, ": scores on ", x.device(), " but labels on ", t.device());
}

// Checks that every label names a class or is ignore_label, and returns how many are not ignored:
// the extremes and the count come to the host in one transfer (one wait on a GPU).
std::int64_t check_labels(const Tensor& t, std::int64_t classes, std::int64_t ignore_label) {
  if (t.numel() == 0) return 0;
  const Tensor valid = not_equal(t, static_cast<double>(ignore_label));
  const Tensor kept = tandem::where(valid, t, zeros({}, t.dtype(), t.device()));
  const std::vector<std::int64_t> summary =
      stack({min(kept).to(DType::i64), max(kept).to(DType::i64), sum(valid.to(DType::i64))}).to_vector<std::int64_t>();
  if (summary[0] >= 0 && summary[1] < classes) return summary[2];
  const std::vector<std::int64_t> labels = t.to_vector<std::int64_t>();
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] != ignore_label && (labels[i] < 0 || labels[i] >= classes))
      TANDEM_FAIL(kOp, ": label ", labels[i], " at flat position ", i, " is outside [0, ", classes,
                  ") and is not the ignore_label ", ignore_label);
  }
  return summary[2];
}

// bool [rows, classes]: true where the class index equals the row's label.
Tensor one_hot(const Tensor& t, std::int64_t classes) {
  const Tensor class_ids = arange(0, static_cast<double>(classes), 1, t.dtype(), t.device()).reshape({1, classes});
  return equal(t.reshape({t.numel(), 1}), class_ids);
}

}  // namespace

CrossEntropyRows softmax_cross_entropy_rows(const Tensor& x, const Tensor& t, std::int64_t ignore_label) {
  // 16-bit scores: the losses and statistics stay f32 (a loss rounded to 16 bits loses the small
  // differences its gradient is made of).
  if (x.defined() && is_half(x.dtype())) return softmax_cross_entropy_rows(x.to(DType::f32), t, ignore_label);
  check_operands(x, t, kOp);
  const std::int64_t rows = x.size(0), classes = x.size(1);
  TANDEM_CHECK(rows == 0 || classes > 0, kOp, ": scores ", x.description(), " have no classes");
  CrossEntropyRows out;
  out.counted = check_labels(t, classes, ignore_label);
  out.losses = Tensor({rows}, x.dtype(), x.device());
  out.stats = Tensor({2, rows}, x.dtype(), x.device());
  if (rows > 0)
    backend_for(x.device(), kOp).softmax_cross_entropy_forward(x, t, rows, classes, ignore_label, out.losses, out.stats);
  return out;
}

Tensor softmax_cross_entropy_rows_backward(const Tensor& x, const Tensor& stats, const Tensor& t, const Tensor& coef,
                                           std::int64_t ignore_label) {
  const char* op = "softmax_cross_entropy (backward)";
  if (x.defined() && is_half(x.dtype()))  // the statistics and coefficients in f32, as forward gave them
    return softmax_cross_entropy_rows_backward(x.to(DType::f32), ops_detail::widen(stats), t, ops_detail::widen(coef),
                                               ignore_label)
        .to(x.dtype());
  check_operands(x, t, op);
  ops_detail::check_compatible({&x, &stats, &coef}, op);
  const std::int64_t rows = x.size(0), classes = x.size(1);
  TANDEM_CHECK(stats.shape() == (Shape{2, rows}), op, ": stats ", stats.description(), " do not match scores ",
               x.description());
  TANDEM_CHECK(coef.numel() == 1 || coef.shape() == Shape{rows}, op, ": coef ", coef.description(),
               " must hold one value or one per row of ", x.description());
  Tensor gx(x.shape(), x.dtype(), x.device());
  if (rows > 0)
    backend_for(x.device(), op).softmax_cross_entropy_backward(x, stats, t, coef, rows, classes, ignore_label, gx);
  return gx;
}

// The composed defaults, for a backend without the fused kernels.
void Backend::softmax_cross_entropy_forward(const Tensor& x, const Tensor& t, std::int64_t rows, std::int64_t n,
                                            std::int64_t ignore_label, Tensor& losses, Tensor& stats) {
  (void)rows;
  (void)n;
  const Tensor m = max(x, {1}, true);
  const Tensor log_sum = log(sum(exp(sub(x, m)), {1}, true));
  const Tensor zero = zeros({}, x.dtype(), x.device());
  // x[r, t[r]] - m[r], picked by a one-hot mask (no gather with device-side indices needed).
  const Tensor picked = sum(tandem::where(one_hot(t, x.size(1)), sub(x, m), zero), {1}, true);
  const Tensor valid = not_equal(t, static_cast<double>(ignore_label)).reshape({x.size(0), 1});
  losses.copy_(tandem::where(valid, sub(log_sum, picked), zero).reshape(losses.shape()));
  Tensor top = stats.slice_rows(0, 1), log_sums = stats.slice_rows(1, 2);  // views into stats
  top.copy_(m.reshape({1, x.size(0)}));
  log_sums.copy_(log_sum.reshape({1, x.size(0)}));
}

void Backend::softmax_cross_entropy_backward(const Tensor& x, const Tensor& stats, const Tensor& t,
                                             const Tensor& coef, std::int64_t rows, std::int64_t n,
                                             std::int64_t ignore_label, Tensor& gx) {
  (void)n;
  const Tensor m = stats.slice_rows(0, 1).reshape({rows, 1}), log_sum = stats.slice_rows(1, 2).reshape({rows, 1});
  const Tensor zero = zeros({}, x.dtype(), x.device());
  const Tensor p = exp(sub(sub(x, m), log_sum));
  const Tensor g = sub(p, tandem::where(one_hot(t, x.size(1)), ones({}, x.dtype(), x.device()), zero));
  const Tensor valid = not_equal(t, static_cast<double>(ignore_label)).reshape({rows, 1});
  const Tensor c = coef.numel() == 1 ? coef.reshape({}) : coef.reshape({rows, 1});
  gx.copy_(mul(tandem::where(valid, g, zero), c));
}

}  // namespace tandem
