#include "layers/links/deconvolution_2d.h"

namespace tandem {

Deconvolution2D::Deconvolution2D(std::int64_t in_channels, std::int64_t out_channels, Deconvolution2DOptions options)
    : out_channels_(out_channels), options_(std::move(options)) {
  const std::int64_t groups = options_.conv.groups;
  TANDEM_CHECK(out_channels > 0 && (in_channels > 0 || in_channels == -1) && options_.ksize_y > 0 &&
                   options_.ksize_x > 0 && groups > 0,
               "Deconvolution2D: channels, kernel size and groups must be positive (in_channels -1 = inferred), got ",
               in_channels, " -> ", out_channels, ", kernel ", options_.ksize_y, "x", options_.ksize_x, ", groups ",
               groups);
  TANDEM_CHECK(out_channels % groups == 0, "Deconvolution2D: groups ", groups, " must divide out_channels ",
               out_channels);
  if (options_.outsize) {
    TANDEM_CHECK(options_.outsize->first > 0 && options_.outsize->second > 0,
                 "Deconvolution2D: outsize must be positive, got (", options_.outsize->first, ", ",
                 options_.outsize->second, ")");
  }
  if (!options_.initialW) options_.initialW = initializers::lecun_normal();
  if (!options_.initial_bias) options_.initial_bias = initializers::zero();
  add_uninitialized_param("W");
  if (in_channels > 0) initialize_W(in_channels);
  if (!options_.nobias) add_param("b", options_.initial_bias({out_channels}, options_.dtype));
}

void Deconvolution2D::initialize_W(std::int64_t in_channels) {
  const std::int64_t groups = options_.conv.groups;
  TANDEM_CHECK(in_channels % groups == 0, "Deconvolution2D: groups ", groups, " must divide in_channels ", in_channels);
  // lecun_normal's fan-in is the product of W's axes but the first: out_channels / groups * kh * kw,
  // Chainer's fan-in for this layout.
  initialize_param("W", options_.initialW({in_channels, out_channels_ / groups, options_.ksize_y, options_.ksize_x},
                                          options_.dtype));
}

void Deconvolution2D::check_loaded_shape(const std::string& name, const Shape& shape) {
  if (name != "W") return;
  const std::int64_t groups = options_.conv.groups;
  TANDEM_CHECK(shape.size() == 4 && shape[0] > 0 && shape[0] % groups == 0 && shape[1] == out_channels_ / groups &&
                   shape[2] == options_.ksize_y && shape[3] == options_.ksize_x,
               "Deconvolution2D: W must be [in_channels, out_channels / groups, ksize_y, ksize_x] = [*, ",
               out_channels_ / groups, ", ", options_.ksize_y, ", ", options_.ksize_x,
               "] (in_channels a multiple of groups ", groups, "), got ", shape);
}

Variable Deconvolution2D::forward(const Variable& x) {
  if (!param_initialized("W")) {
    TANDEM_CHECK(x.dim() == 4, "Deconvolution2D: input must be [N, C, H, W], got ", x.description());
    initialize_W(x.shape()[1]);
  }
  std::optional<std::int64_t> out_h, out_w;
  if (options_.outsize) {
    out_h = options_.outsize->first;
    out_w = options_.outsize->second;
  }
  return functions::deconvolution_2d(x, param("W"), options_.nobias ? Variable() : param("b"), options_.conv, out_h,
                                     out_w);
}

}  // namespace tandem
