// Linear: y = x W^T + b, W of shape [out_size, in_size]. in_size -1 defers the shape to the
// first forward pass (Chainer's L.Linear(None, n)), or to loading a saved W.
#pragma once

#include "autograd/functions/fused_activation.h"
#include "layers/initializers.h"
#include "layers/link.h"

namespace tandem {

struct LinearOptions {
  bool nobias = false;
  initializers::Initializer initialW;  // default: LeCun normal
  initializers::Initializer initial_bias;  // default: zeros
  DType dtype = DType::f32;
  // Applied to the output by the same function (functions::linear's activation): relu gives
  // F::relu(linear(x)) without a second tensor.
  functions::Activation activation = functions::Activation::none;
};

class Linear : public Link {
 public:
  Linear(std::int64_t in_size, std::int64_t out_size, LinearOptions options = {});
  // Chainer's L.Linear(n): input size inferred.
  explicit Linear(std::int64_t out_size) : Linear(-1, out_size) {}

  std::string type_name() const override { return "Linear"; }
  Variable forward(const Variable& x) override;

  std::int64_t in_size() const { return in_size_; }
  std::int64_t out_size() const { return out_size_; }
  Variable& W() { return param("W"); }
  Variable& b() { return param("b"); }

 protected:
  // A saved W must be [out_size, in_size]; it fixes in_size.
  void check_loaded_shape(const std::string& name, const Shape& shape) override;

 private:
  void initialize_W(std::int64_t in_size);

  std::int64_t in_size_, out_size_;
  LinearOptions options_;
};

// Applies a link that maps rows [N, in] to [N, out] (Linear, or a tensor-parallel linear) to the
// last axis of x [..., in], giving [..., out]: Linear flattens every axis after the first into
// features (Chainer's convention), so a sequence [B, T, in] is first made rows [B * T, in].
Variable forward_last_axis(Link& link, const Variable& x);

}  // namespace tandem
