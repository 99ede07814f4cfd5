// Stacked uni-directional LSTM over a batch of variable-length sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/variable.h"

namespace tandem {
namespace functions {

struct NStepLSTMResult {
  Variable hy, cy;  // [n_layers, B, H]: each sequence's state after its own last step
  Variables ys;     // ys[b]: [T_b, H], the last layer's hidden states of sequence b
};

// Chainer's n_step_lstm. For each layer l and time step t of each sequence:
//   i = sigmoid(W0 x + W4 h + b0 + b4)      f = sigmoid(W1 x + W5 h + b1 + b5)
//   a = tanh   (W2 x + W6 h + b2 + b6)      o = sigmoid(W3 x + W7 h + b3 + b7)
//   c' = f * c + i * a                      h' = o * tanh(c')
// with ws[l][j] = Wj and bs[l][j] = bj. This is the order Chainer's implementation (and cuDNN)
// applies the eight matrices in: input, forget, cell-input, output gate. (Chainer's docstring
// lists W2 as the output gate and W3 as the cell input; its code, which this follows, does
// the opposite.) W0..W3 are [H, in] for layer 0 and [H, H] above it, W4..W7 are [H, H], every
// bias is [H]. The input of layer l > 0 is the hidden-state sequence of layer l - 1.
//
// xs holds B sequences xs[b] of shape [T_b, in] (T_b >= 0), in ANY order of lengths: they are
// sorted by decreasing length internally (stably) and every result comes back in the order of
// xs. (Chainer's function takes the time-major transposed batch, which must be sorted by
// decreasing length; its link L.NStepLSTM takes sequences, as here, and sorts them.) hx and cx
// [n_layers, B, H] are the initial states in the order of xs; undefined Variables mean zeros.
// hy[l, b] and cy[l, b] are the states after step T_b of sequence b (hx, cx when T_b = 0).
//
// In train mode (autograd/grad_mode.h) with dropout_ratio > 0, dropout is applied to the input
// of every layer except the first, as in Chainer, drawing from the global generator; with
// dropout_ratio 0 or outside training the function is deterministic.
//
// Differentiable with respect to hx, cx, every W and b and every xs[b]. The whole stack is one
// graph node: per layer one GEMM projects the inputs of all time steps, then each step runs
// one GEMM on the hidden states of the sequences still running and the fused LSTM cell.
NStepLSTMResult n_step_lstm(std::int64_t n_layers, double dropout_ratio, const Variable& hx, const Variable& cx,
                            const std::vector<Variables>& ws, const std::vector<Variables>& bs, const Variables& xs);

}  // namespace functions
}  // namespace tandem
