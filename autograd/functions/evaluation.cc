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
  // On the scores' device throughout: no item(), which on a GPU would wait for the device.
  Tensor correct = equal(argmax(scores, 1), t64);
  if (ignore_label) correct = mul(correct, not_equal(t64, static_cast<double>(*ignore_label)));  // logical and
  const Tensor hits = sum(correct.to(scores.dtype()));
  if (!ignore_label) {
    const double count = static_cast<double>(labels.numel());
    return Variable(count > 0 ? mul(hits, 1.0 / count) : zeros({}, scores.dtype(), scores.device()));
  }
  // hits / count, and 0 when every label is ignored (hits is 0 then too).
  const Tensor count = sum(not_equal(t64, static_cast<double>(*ignore_label)).to(scores.dtype()));
  return Variable(div(hits, maximum(count, ones({}, scores.dtype(), scores.device()))));
}

}  // namespace functions
}  // namespace tandem
