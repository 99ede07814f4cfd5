// Convolution and transposed convolution of feature maps split over a spatially parallel group.
//
// Each rank computes the outputs of its tile of the output layout (SpatialLayout::after_window):
// it needs the input rows and columns their windows read, which it gets from whichever ranks hold
// them (the halo; any kernel, stride, padding and dilation, so a halo may reach past the nearest
// neighbour and a tile may be thinner than its halo). The padding outside the image is zeros, as
// in one process. The halo moves while the rank convolves the outputs whose windows lie within
// its own tile (the interior); then the frame around the interior is convolved. In backward,
// the halo's gradient goes back to its holders while the weight gradient is computed.
//
// Every rank of the group must call these in the same order with the same parameters (as with
// any collective). W's and b's gradients are this rank's tile's contribution: sum them over the
// group (spatial_links.h, create_spatial_optimizer).
#pragma once

#include <cstdint>
#include <optional>

#include "autograd/functions/convolution.h"
#include "comm/spatial/spatial_map.h"

namespace tandem {

// Whether convolutions overlap the halo exchange with the interior's compute (default true;
// TANDEM_SPATIAL_OVERLAP=0 turns it off): off, they wait for the halo first, which a benchmark
// uses to measure how much of the exchange the overlap hides.
bool spatial_overlap();
void set_spatial_overlap(bool on);

namespace functions {

// convolution_2d (autograd/functions/convolution.h) of a spatially split batch: y's layout is
// x.layout.after_window(...). W [out_c, C / groups, kh, kw], b [out_c] or undefined, replicated.
SpatialMap spatial_convolution_2d(const SpatialMap& x, const Variable& W, const Variable& b = Variable(),
                                  const Conv2DOptions& options = {});

// deconvolution_2d (autograd/functions/deconvolution.h) of a spatially split batch, W
// [in_c, out_c, kh, kw]: y's layout is x.layout.after_transposed_window(...).
SpatialMap spatial_deconvolution_2d(const SpatialMap& x, const Variable& W, const Variable& b = Variable(),
                                    const Conv2DOptions& options = {}, std::optional<std::int64_t> out_h = std::nullopt,
                                    std::optional<std::int64_t> out_w = std::nullopt);

}  // namespace functions

}  // namespace tandem
