#include "examples/unet/unet.h"

#include <string>

#include "autograd/functions.h"
#include "comm/spatial/spatial_pooling.h"
#include "core/error.h"

namespace tandem::examples {

namespace {

namespace F = functions;

// The operations that differ between a whole batch and a split one.
Variable relu(const Variable& x) { return F::relu(x); }
SpatialMap relu(const SpatialMap& x) { return x.with(F::relu(x.local)); }
Variable pool(const Variable& x) { return F::max_pooling_2d(x, 2, 2, 0, false); }
SpatialMap pool(const SpatialMap& x) { return F::spatial_max_pooling_2d(x, 2, 2, 0, false); }
// The skip connection and the upsampled map, along the channels. A split whose cuts are not
// multiples of 2^depth leaves the upsampled map in another layout than the skip's: it moves.
Variable join(const Variable& skip, const Variable& up) { return F::concat({skip, up}, 1); }
SpatialMap join(const SpatialMap& skip, const SpatialMap& up) {
  return F::spatial_concat({skip, up.layout == skip.layout ? up : F::relayout(up, skip.layout)});
}
std::int64_t height(const Variable& x) { return x.shape()[2]; }
std::int64_t height(const SpatialMap& x) { return x.layout.height(); }
std::int64_t width(const Variable& x) { return x.shape()[3]; }
std::int64_t width(const SpatialMap& x) { return x.layout.width(); }

}  // namespace

UNet::UNet(const UNetOptions& options) : options_(options) {
  TANDEM_CHECK(options.depth >= 0 && options.width > 0 && options.in_channels > 0 && options.classes > 0,
               "UNet: needs depth >= 0 and positive channels, got depth ", options.depth, ", width ", options.width);
  std::int64_t channels = options.in_channels, w = options.width;
  for (int level = 0; level < options.depth; ++level, w *= 2) {
    down_.push_back(add_block("down" + std::to_string(level), channels, w));
    channels = w;
  }
  bottom_ = add_block("bottom", channels, w);
  for (int level = options.depth - 1; level >= 0; --level) {
    const std::int64_t skip = options.width << level;
    auto up = Deconvolution2DOptions::make(2, 2, 0);
    up.dtype = options.dtype;
    upsample_.push_back(
        add_link("upsample" + std::to_string(level), std::make_shared<SpatialDeconvolution2D>(w, skip, up)));
    up_.push_back(add_block("up" + std::to_string(level), 2 * skip, skip));
    w = skip;
  }
  auto head = Convolution2DOptions::make(1);
  head.dtype = options.dtype;
  head_ = add_link("head", std::make_shared<SpatialConvolution2D>(w, options.classes, head));
}

UNet::Block UNet::add_block(const std::string& name, std::int64_t in, std::int64_t out) {
  auto conv = Convolution2DOptions::make(3, 1, 1);
  conv.dtype = options_.dtype;
  conv.nobias = true;  // batch normalisation's beta is the bias
  Block b;
  b.conv1 = add_link(name + "_conv1", std::make_shared<SpatialConvolution2D>(in, out, conv));
  b.norm1 = add_link(name + "_norm1", std::make_shared<SpatialBatchNormalization>(out, 0.9, 2e-5, options_.dtype));
  b.conv2 = add_link(name + "_conv2", std::make_shared<SpatialConvolution2D>(out, out, conv));
  b.norm2 = add_link(name + "_norm2", std::make_shared<SpatialBatchNormalization>(out, 0.9, 2e-5, options_.dtype));
  return b;
}

template <typename Map>
Map UNet::block(const Block& b, const Map& x) {
  return relu((*b.norm2)((*b.conv2)(relu((*b.norm1)((*b.conv1)(x))))));
}

template <typename Map>
Map UNet::run(const Map& x) {
  const std::int64_t multiple = std::int64_t{1} << options_.depth;
  TANDEM_CHECK(height(x) % multiple == 0 && width(x) % multiple == 0, "UNet: a U-Net of depth ", options_.depth,
               " needs a height and width that are multiples of ", multiple, ", got ", height(x), " x ", width(x));
  std::vector<Map> skips;
  Map h = x;
  for (const Block& b : down_) {
    h = block(b, h);
    skips.push_back(h);
    h = pool(h);
  }
  h = block(bottom_, h);
  for (std::size_t i = 0; i < up_.size(); ++i) {
    h = join(skips[skips.size() - 1 - i], (*upsample_[i])(h));
    h = block(up_[i], h);
  }
  return (*head_)(h);
}

Variable UNet::forward(const Variable& x) { return run(x); }
SpatialMap UNet::forward(const SpatialMap& x) { return run(x); }

}  // namespace tandem::examples
