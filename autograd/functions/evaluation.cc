#include "autograd/functions/evaluation.h"

#include "core/ops.h"

namespace tandem {
namespace functions {

Variable accuracy(const Variable& y, const Variable& t, std::optional<std::int64_t> ignore_label) {
  const Tensor& scores = y.data();
  const Tensor& labels = t.data();
  TANDEM_CHECK(scores.dim() == 2, "accuracy: y must be [N, C], got ", scores.description());
  TANDEM_CHECK(labels.dtype() == DType::i32 || labels.dtype() == DType::i64, "accuracy: labels must be i32 or i64, got ",
               labels.description());
  TANDEM_CHECK(labels.dim() == 1 && labels.size(0) == scores.size(0), "accuracy: labels ", labels.description(),
               " do not match scores ", scores.description());
  const Tensor t64 = labels.to(DType::i64);
  Tensor correct = equal(argmax(scores, 1), t64);
  double count = static_cast<double>(labels.numel());
  if (ignore_label) {
    const Tensor valid = not_equal(t64, static_cast<double>(*ignore_label));
    correct = mul(correct, valid);  // logical and
    count = sum(valid.to(DType::i64)).item();
  }
  const double hits = sum(correct.to(DType::i64)).item();
  return Variable(full({}, count > 0 ? hits / count : 0.0, scores.dtype(), scores.device()));
}

}  // namespace functions
}  // namespace tandem
