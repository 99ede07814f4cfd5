// LayerNormalization (Chainer's L.LayerNormalization): normalises each row over its last axis
// (functions::layer_normalization) and scales and shifts it by the learned gamma (ones) and beta
// (zeros), both [size]. A transformer block's normalisation.
#pragma once

#include "layers/link.h"

namespace tandem {

class LayerNormalization : public Link {
 public:
  LayerNormalization(std::int64_t size, double eps = 1e-6, DType dtype = DType::f32);
  std::string type_name() const override { return "LayerNormalization"; }
  Variable forward(const Variable& x) override;
  Variable& gamma() { return param("gamma"); }
  Variable& beta() { return param("beta"); }

 private:
  double eps_;
};

}  // namespace tandem
