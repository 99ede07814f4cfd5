// The fused LSTM cell (the kernel behind autograd/functions/n_step_lstm.h). Gate order within
// the 4H pre-activations of a row: i (input), f (forget), a (cell input), o (output), which is
// cuDNN's order and the order Chainer's n_step_lstm applies its W0..W3 / W4..W7 in.
#pragma once

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

// Functional form: {c, h, activations} for pre-activations gates [B, 4H] and c_prev [B, H].
struct LstmCellResult {
  Tensor c, h, activations;
};
LstmCellResult lstm_cell(const Tensor& gates, const Tensor& c_prev);

}  // namespace tandem
