#include "layers/links/convolution_2d.h"

namespace tandem {

Convolution2D::Convolution2D(std::int64_t in_channels, std::int64_t out_channels, Convolution2DOptions options)
    : out_channels_(out_channels), options_(std::move(options)) {
  const std::int64_t groups = options_.conv.groups;
  TANDEM_CHECK(out_channels > 0 && (in_channels > 0 || in_channels == -1) && options_.ksize_y > 0 &&
                   options_.ksize_x > 0 && groups > 0,
               "Convolution2D: channels, kernel size and groups must be positive (in_channels -1 = inferred), got ",
               in_channels, " -> ", out_channels, ", kernel ", options_.ksize_y, "x", options_.ksize_x, ", groups ", groups);
  TANDEM_CHECK(out_channels % groups == 0, "Convolution2D: groups ", groups, " must divide out_channels ", out_channels);
  if (!options_.initialW) options_.initialW = initializers::lecun_normal();
  if (!options_.initial_bias) options_.initial_bias = initializers::zero();
  add_uninitialized_param("W");
  if (in_channels > 0) initialize_W(in_channels);
  if (!options_.nobias) add_param("b", options_.initial_bias({out_channels}, options_.dtype));
}

void Convolution2D::initialize_W(std::int64_t in_channels) {
  const std::int64_t groups = options_.conv.groups;
  TANDEM_CHECK(in_channels % groups == 0, "Convolution2D: groups ", groups, " must divide in_channels ", in_channels);
  initialize_param("W", options_.initialW({out_channels_, in_channels / groups, options_.ksize_y, options_.ksize_x},
                                          options_.dtype));
}

void Convolution2D::check_loaded_shape(const std::string& name, const Shape& shape) {
  if (name != "W") return;
  TANDEM_CHECK(shape.size() == 4 && shape[0] == out_channels_ && shape[1] > 0 && shape[2] == options_.ksize_y &&
                   shape[3] == options_.ksize_x,
               "Convolution2D: W must be [out_channels, in_channels / groups, ksize_y, ksize_x] = [", out_channels_,
               ", *, ", options_.ksize_y, ", ", options_.ksize_x, "], got ", shape);
}

Variable Convolution2D::forward(const Variable& x) {
  if (!param_initialized("W")) {
    TANDEM_CHECK(x.dim() == 4, "Convolution2D: input must be [N, C, H, W], got ", x.description());
    initialize_W(x.shape()[1]);
  }
  return functions::convolution_2d(x, param("W"), options_.nobias ? Variable() : param("b"), options_.conv,
                                   options_.activation);
}

}  // namespace tandem
