#include "layers/links/n_step_lstm.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "layers/initializers.h"

namespace tandem {

namespace {

// One layer's sixteen parameters.
class LSTMLayer : public Link {
 public:
  LSTMLayer(std::int64_t in_size, std::int64_t out_size, DType dtype) {
    // Chainer: W ~ N(0, 1 / fan_in) with fan_in = in_size for w0..w3 and out_size for w4..w7.
    for (int j = 0; j < 8; ++j) {
      const std::int64_t w_in = j < 4 ? in_size : out_size;
      add_param("w" + std::to_string(j),
                initializers::normal(std::sqrt(1.0 / static_cast<double>(w_in)))({out_size, w_in}, dtype));
    }
    for (int j = 0; j < 8; ++j) add_param("b" + std::to_string(j), zeros({out_size}, dtype));
  }
  std::string type_name() const override { return "NStepLSTM layer"; }
};

}  // namespace

NStepLSTM::NStepLSTM(std::int64_t n_layers, std::int64_t in_size, std::int64_t out_size, double dropout, DType dtype)
    : n_layers_(n_layers), out_size_(out_size), dropout_(dropout) {
  TANDEM_CHECK(n_layers > 0 && in_size > 0 && out_size > 0, "NStepLSTM: n_layers, in_size and out_size must be "
               "positive, got ", n_layers, ", ", in_size, ", ", out_size);
  TANDEM_CHECK(dropout >= 0 && dropout < 1, "NStepLSTM: dropout must be in [0, 1), got ", dropout);
  for (std::int64_t l = 0; l < n_layers; ++l) append(std::make_shared<LSTMLayer>(l == 0 ? in_size : out_size, out_size, dtype));
}

functions::NStepLSTMResult NStepLSTM::forward(const Variable& hx, const Variable& cx, const Variables& xs) {
  std::vector<Variables> ws, bs;
  for (std::size_t l = 0; l < size(); ++l) {
    Variables w, b;
    for (int j = 0; j < 8; ++j) {
      w.push_back((*this)[l]->param("w" + std::to_string(j)));
      b.push_back((*this)[l]->param("b" + std::to_string(j)));
    }
    ws.push_back(std::move(w));
    bs.push_back(std::move(b));
  }
  const double ratio = is_train() && train_mode() ? dropout_ : 0.0;
  return functions::n_step_lstm(n_layers_, ratio, hx, cx, ws, bs, xs);
}

}  // namespace tandem
