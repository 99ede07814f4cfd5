// Max and average pooling of feature maps split over a spatially parallel group, equal to
// max_pooling_2d and average_pooling_2d (autograd/functions/pooling.h) of the whole batch: each
// rank pools the outputs of its tile of x.layout.after_window(...), reading the rows and columns
// their windows need from whichever ranks hold them. Padding never wins a maximum and counts as
// zeros in a mean, as in one process.
#pragma once

#include <cstdint>
#include <optional>

#include "comm/spatial/spatial_map.h"

namespace tandem::functions {

// As max_pooling_2d: a stride left out equals the kernel; cover_all is Chainer's default.
SpatialMap spatial_max_pooling_2d(const SpatialMap& x, std::int64_t ksize,
                                  std::optional<std::int64_t> stride = std::nullopt, std::int64_t pad = 0,
                                  bool cover_all = true);
SpatialMap spatial_average_pooling_2d(const SpatialMap& x, std::int64_t ksize,
                                      std::optional<std::int64_t> stride = std::nullopt, std::int64_t pad = 0);

}  // namespace tandem::functions
