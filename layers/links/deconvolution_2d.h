// Deconvolution2D (Chainer's L.Deconvolution2D): W [in_channels, out_channels / groups, kh, kw]
// and b [out_channels], applied with functions::deconvolution_2d; in_channels -1 defers W's
// shape to the first forward pass (or to loading a saved W).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "autograd/functions/deconvolution.h"
#include "layers/initializers.h"
#include "layers/link.h"

namespace tandem {

struct Deconvolution2DOptions {
  std::int64_t ksize_y = 3, ksize_x = 3;
  functions::Conv2DOptions conv;  // stride, pad, dilation, groups
  bool nobias = false;
  // (out_h, out_w) of every output, as Chainer's outsize; by default the smallest size that
  // convolves back to the input (functions::deconvolution_2d).
  std::optional<std::pair<std::int64_t, std::int64_t>> outsize;
  // Default: LeCun normal, N(0, 1 / fan_in) with fan_in = out_channels / groups * kh * kw, the
  // product of W's axes but the first, as Chainer computes it for Deconvolution2D's W.
  initializers::Initializer initialW;
  initializers::Initializer initial_bias;  // default: zeros
  DType dtype = DType::f32;

  // Square kernel with the same stride and pad on both axes.
  static Deconvolution2DOptions make(std::int64_t ksize, std::int64_t stride = 1, std::int64_t pad = 0) {
    Deconvolution2DOptions o;
    o.ksize_y = o.ksize_x = ksize;
    o.conv = functions::Conv2DOptions::make(stride, pad);
    return o;
  }
};

class Deconvolution2D : public Link {
 public:
  Deconvolution2D(std::int64_t in_channels, std::int64_t out_channels, Deconvolution2DOptions options = {});
  std::string type_name() const override { return "Deconvolution2D"; }
  Variable forward(const Variable& x) override;

  Variable& W() { return param("W"); }
  Variable& b() { return param("b"); }
  std::int64_t out_channels() const { return out_channels_; }
  const Deconvolution2DOptions& options() const { return options_; }

 protected:
  // Gives W its shape from the input's channels (in_channels -1 defers it to the first forward).
  void initialize_W(std::int64_t in_channels);
  // A saved W must be [in_channels, out_channels / groups, ksize_y, ksize_x], in_channels a
  // multiple of groups.
  void check_loaded_shape(const std::string& name, const Shape& shape) override;

 private:
  std::int64_t out_channels_;
  Deconvolution2DOptions options_;
};

}  // namespace tandem
