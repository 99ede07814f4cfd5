// Softmax cross-entropy over the rows of a score matrix as one fused kernel each way
// (core/backend.h: softmax_cross_entropy_forward / _backward). Composed of front-end operations
// it was twelve passes over the scores forward and six backward, each allocating a scores-sized
// tensor; for an LSTM language model's [1600, 1000] scores that was about a tenth of its
// training step. The loss function (autograd/functions/loss.h) runs on these.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tandem {

struct CrossEntropyRows {
  Tensor losses;  // [rows]: log(sum_j exp(x[r, j])) - x[r, t[r]], exactly 0 where t[r] is ignore_label
  Tensor stats;   // [2, rows]: each row's maximum m, then log(sum_j exp(x[r, j] - m)); for the backward
  std::int64_t counted = 0;  // the labels that are not ignore_label
};

// x: floating scores [rows, classes]; t: i32 or i64 labels [rows] on x's device, each in
// [0, classes) or equal to ignore_label (checked: a label outside names its row). For bf16 and
// f16 scores the losses and statistics are f32 (computed in f32, and kept so).
CrossEntropyRows softmax_cross_entropy_rows(const Tensor& x, const Tensor& t, std::int64_t ignore_label);

// The gradient of x: coef[r] * (softmax(x[r]) - onehot(t[r])), rows of ignored labels exactly 0.
// stats: the forward's; coef: x's dtype, one value for all rows ([] or [1]) or one per row ([rows]).
Tensor softmax_cross_entropy_rows_backward(const Tensor& x, const Tensor& stats, const Tensor& t, const Tensor& coef,
                                           std::int64_t ignore_label);

}  // namespace tandem
