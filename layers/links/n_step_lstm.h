// NStepLSTM (Chainer's L.NStepLSTM): a stack of n_layers LSTM layers over a batch of
// sequences of different lengths. Parameters per layer l: "l/w0".."l/w7" and "l/b0".."l/b7"
// (w0..w3 act on the layer's input, w4..w7 on the hidden state; gates i, f, a, o).
#pragma once

#include "autograd/functions/n_step_lstm.h"
#include "layers/link.h"

namespace tandem {

class NStepLSTM : public ChainList {
 public:
  NStepLSTM(std::int64_t n_layers, std::int64_t in_size, std::int64_t out_size, double dropout = 0.0,
            DType dtype = DType::f32);
  std::string type_name() const override { return "NStepLSTM"; }

  // hx, cx: [n_layers, B, out_size] or undefined (zeros); xs: B sequences [T_i, in_size].
  // Returns hy, cy [n_layers, B, out_size] (each sequence's final state) and ys, B sequences
  // [T_i, out_size]. Dropout (between layers) applies in train mode only.
  functions::NStepLSTMResult forward(const Variable& hx, const Variable& cx, const Variables& xs);
  using ChainList::forward;

  std::int64_t n_layers() const { return n_layers_; }
  std::int64_t out_size() const { return out_size_; }

 private:
  std::int64_t n_layers_, out_size_;
  double dropout_;
};

}  // namespace tandem
