// The fused LSTM cell (the kernel behind autograd/functions/n_step_lstm.h). Gate order within
// the 4H pre-activations of a row: i (input), f (forget), a (cell input), o (output), which is
// cuDNN's order and the order Chainer's n_step_lstm applies its W0..W3 / W4..W7 in.
#pragma once

#include <optional>
#include <vector>

#include "core/backend.h"
#include "core/tensor.h"

namespace tandem {

// In place, for recurrences that write into preallocated (row views of) buffers:
// gates [B, 4H] holds pre-activations on entry and sigmoid(i), sigmoid(f), tanh(a), sigmoid(o)
// on return; c = f * c_prev + i * a and h = o * tanh(c) are written to c and h ([B, H]).
// Every tensor must be floating, of one dtype and device; c and h must not overlap the inputs.
void lstm_cell_forward_(Tensor& gates, const Tensor& c_prev, Tensor& c, Tensor& h);

// The backward of lstm_cell_forward_: from its activations (the gates on return), c_prev, c and
// the gradients gh, gc of h and c, writes the gradient of the pre-activations into ggates
// [B, 4H] and the gradient of c_prev into gc_prev ([B, H]; may be gc itself).
void lstm_cell_backward_(const Tensor& activations, const Tensor& c_prev, const Tensor& c, const Tensor& gh,
                         const Tensor& gc, Tensor& ggates, Tensor& gc_prev);

// One LSTM layer's recurrence over a packed, time-major batch: the loop n_step_lstm runs
// between a layer's input projection and its weight gradients. Step t holds the rows [offset_t,
// offset_t + batch_sizes[t]) of the N rows (offset_t: the sum of the sizes before it), the
// sizes at least 1, decreasing (sequences sorted longest first) and summing to N.
// forward: gates [N, 4H] holds every row's input projection, bias included. At each step
// gates_t += h_{t-1} wh^T (wh [4H, H]), then lstm_cell_forward_ writes h_t and c_t into the rows
// of hs and cs ([N, H]) and leaves the activations in gates_t; h_{-1} and c_{-1} are the first
// rows of h0 and c0 [B, H]. Where the device has a kernel for the whole loop it runs that (on
// the CPU with two or more threads: one parallel region for all steps, each thread its share of
// the hidden units; core/cpu/lstm_recurrence.cc), else cell by cell.
void lstm_recurrence_forward_(const std::vector<std::int64_t>& batch_sizes, Tensor& gates, const Tensor& wh,
                              const Tensor& h0, const Tensor& c0, Tensor& hs, Tensor& cs);
// Its backward, from the last step to the first. dh and dc [B, H] enter holding the gradients
// of the final states (row r: the r-th sequence's) and leave holding those of h0 and c0: at each
// step dh_t (their first batch_sizes[t] rows) += ghs_t, lstm_cell_backward_ writes ggates_t
// ([N, 4H]) and turns dc_t into the gradient of c_{t-1}, and dh_t becomes ggates_t wh.
void lstm_recurrence_backward_(const std::vector<std::int64_t>& batch_sizes, const Tensor& activations,
                               const Tensor& cs, const Tensor& c0, const Tensor& wh, const Tensor& ghs, Tensor& dh,
                               Tensor& dc, Tensor& ggates);

// Functional form: {c, h, activations} for pre-activations gates [B, 4H] and c_prev [B, H].
struct LstmCellResult {
  Tensor c, h, activations;
};
LstmCellResult lstm_cell(const Tensor& gates, const Tensor& c_prev);

// The whole multi-layer LSTM of n_step_lstm (no dropout between layers) in one call, where the
// device has a fused one (cuDNN's RNN on a GPU; core/backend.h says the layout). std::nullopt
// when it has none: the caller then runs lstm_cell_forward_ step by step.
struct LstmSequence {
  Tensor y, hy, cy;               // [N, H], [L, B, H], [L, B, H]
  Tensor packed_weights, reserve;  // the backend's, for lstm_sequence_backward
};
std::optional<LstmSequence> lstm_sequence_forward(const LstmSequenceShape& shape, const Tensor& x, const Tensor& hx,
                                                  const Tensor& cx, const std::vector<Tensor>& weights,
                                                  bool training);

// The backward of a training lstm_sequence_forward from the gradients of y, hy and cy.
struct LstmSequenceGrads {
  Tensor gx, ghx, gcx;
  std::vector<Tensor> gweights;  // like `weights` (when weight_grads)
};
// keep_forward: another backward will use `forward` again (retain_graph), which this one must
// then leave as it is.
LstmSequenceGrads lstm_sequence_backward(const LstmSequenceShape& shape, const LstmSequence& forward,
                                         bool keep_forward, const Tensor& x, const Tensor& hx, const Tensor& cx,
                                         const Tensor& gy, const Tensor& ghy, const Tensor& gcy, bool weight_grads);

}  // namespace tandem
