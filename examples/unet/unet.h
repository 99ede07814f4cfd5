// A small U-Net (Ronneberger et al., 2015) for per-pixel classification, written once for both a
// whole batch in one process (forward(Variable)) and a batch split over the ranks of a spatially
// parallel group (forward(SpatialMap)): the same layers, parameters and initial weights, so the
// two can be compared step for step.
//
// depth levels down: two 3x3 convolutions (padding 1), each followed by batch normalisation and
// ReLU, then 2x2 max pooling, with width, 2 width, 4 width, ... channels; a bottom block of the
// same kind; depth levels up: a 2x2 stride-2 deconvolution, concatenation with the skip
// connection of the same level, and two more convolutions; a 1x1 convolution to the classes.
// The height and width must be multiples of 2^depth.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/spatial/spatial_links.h"
#include "layers/link.h"

namespace tandem::examples {

struct UNetOptions {
  std::int64_t in_channels = 1, classes = 11;
  std::int64_t width = 8;  // channels of the first level
  int depth = 2;
  DType dtype = DType::f32;
};

class UNet : public Chain {
 public:
  explicit UNet(const UNetOptions& options);
  std::string type_name() const override { return "UNet"; }
  // x [N, in_channels, H, W] -> scores [N, classes, H, W].
  Variable forward(const Variable& x) override;
  // The same on a spatially split batch; the scores come in x's layout.
  SpatialMap forward(const SpatialMap& x);
  const UNetOptions& options() const { return options_; }

 private:
  struct Block {
    std::shared_ptr<SpatialConvolution2D> conv1, conv2;
    std::shared_ptr<SpatialBatchNormalization> norm1, norm2;
  };
  Block add_block(const std::string& name, std::int64_t in, std::int64_t out);
  template <typename Map>
  Map block(const Block& b, const Map& x);
  template <typename Map>
  Map run(const Map& x);

  UNetOptions options_;
  std::vector<Block> down_, up_;
  Block bottom_;
  std::vector<std::shared_ptr<SpatialDeconvolution2D>> upsample_;
  std::shared_ptr<SpatialConvolution2D> head_;
};

}  // namespace tandem::examples
