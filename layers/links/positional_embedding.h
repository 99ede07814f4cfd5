// PositionalEmbedding: a learned position vector added to every position of a sequence (GPT's
// wpe). W [max_length, dim]; forward(x [B, T, dim]) = x + W[0:T] for any T <= max_length, so
// a model trained on sequences of length T also takes the shorter prefixes that sampling feeds it.
#pragma once

#include "layers/initializers.h"
#include "layers/link.h"

namespace tandem {

class PositionalEmbedding : public Link {
 public:
  // initialW defaults to N(0, 0.02^2), GPT-2's; an EmbedID's N(0, 1) would drown small token
  // embeddings.
  PositionalEmbedding(std::int64_t max_length, std::int64_t dim, initializers::Initializer initialW = nullptr,
                      DType dtype = DType::f32);
  std::string type_name() const override { return "PositionalEmbedding"; }
  // x [B, T, dim] (T <= max_length); returns x + W[0:T], broadcast over B.
  Variable forward(const Variable& x) override;
  Variable& W() { return param("W"); }
  std::int64_t max_length() const { return max_length_; }

 private:
  std::int64_t max_length_, dim_;
};

}  // namespace tandem
