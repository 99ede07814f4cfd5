// Convolution2D (Chainer's L.Convolution2D): W [out_channels, in_channels / groups, kh, kw]
// and b [out_channels]; in_channels -1 defers W's shape to the first forward pass (or to
// loading a saved W).
#pragma once

#include "autograd/functions/convolution.h"
#include "layers/initializers.h"
#include "layers/link.h"

namespace tandem {

struct Convolution2DOptions {
  std::int64_t ksize_y = 3, ksize_x = 3;
  functions::Conv2DOptions conv;  // stride, pad, dilation, groups
  bool nobias = false;
  initializers::Initializer initialW;      // default: LeCun normal
  initializers::Initializer initial_bias;  // default: zeros
  DType dtype = DType::f32;
  // Applied to the output by the convolution itself (functions::convolution_2d's activation):
  // relu runs inside oneDNN's primitive on the CPU.
  functions::Activation activation = functions::Activation::none;

  // Square kernel with the same stride and pad on both axes.
  static Convolution2DOptions make(std::int64_t ksize, std::int64_t stride = 1, std::int64_t pad = 0) {
    Convolution2DOptions o;
    o.ksize_y = o.ksize_x = ksize;
    o.conv = functions::Conv2DOptions::make(stride, pad);
    return o;
  }
};

class Convolution2D : public Link {
 public:
  Convolution2D(std::int64_t in_channels, std::int64_t out_channels, Convolution2DOptions options = {});
  std::string type_name() const override { return "Convolution2D"; }
  Variable forward(const Variable& x) override;

  Variable& W() { return param("W"); }
  Variable& b() { return param("b"); }
  std::int64_t out_channels() const { return out_channels_; }
  const Convolution2DOptions& options() const { return options_; }

 protected:
  // Gives W its shape from the input's channels (in_channels -1 defers it to the first forward).
  void initialize_W(std::int64_t in_channels);
  // A saved W must be [out_channels, in_channels / groups, ksize_y, ksize_x].
  void check_loaded_shape(const std::string& name, const Shape& shape) override;

 private:
  std::int64_t out_channels_;
  Convolution2DOptions options_;
};

}  // namespace tandem
