// A batch of feature maps split over the ranks of a spatially parallel group: this rank's tile
// of every sample and channel, [N, C, rows, cols], with the layout that says which tile every
// rank holds (spatial_layout.h) and the group's communicator.
//
// Element-wise layers apply to the tile as they are (x.with(F::relu(x.local))); windowed layers
// exchange halos (spatial_convolution.h, spatial_pooling.h); batch normalisation takes its
// statistics over every tile (spatial_links.h). The changes of layout below move the batch
// between a spatial layout, the whole image on one rank, and whole images of some samples per
// rank (to go on data-parallel); all are differentiable and run on every rank of the group.
#pragma once

#include <cstdint>

#include "autograd/variable.h"
#include "comm/spatial/spatial_layout.h"
#include "comm/transport/communicator.h"

namespace tandem {

struct SpatialMap {
  Variable local;
  SpatialLayout layout;
  CommunicatorPtr comm;

  Rect tile() const { return layout.tile(comm->rank()); }
  // The same layout and group with another tile (an element-wise result).
  SpatialMap with(Variable v) const { return {std::move(v), layout, comm}; }
  // Checks that local has this rank's tile's shape ([N, C, rows, cols]); errors begin with `op`.
  void check(const char* op) const;
};

namespace functions {

// The batch in another layout over the same group (the same height and width).
SpatialMap relayout(const SpatialMap& x, const SpatialLayout& layout);

// The whole batch on rank `root` ([N, C, H, W]); the other ranks get [N, C, 0, W].
Variable gather_image(const SpatialMap& x, int root = 0);

// Splits the batch x [N, C, H, W] that `root` holds over the group in `layout`; the root sends
// the shape and dtype first. The other ranks pass nothing (an undefined x), or what
// gather_image gave them ([N, C, 0, W]) to carry the gradient back through a gather.
SpatialMap scatter_image(const CommunicatorPtr& comm, const Variable& x, const SpatialLayout& layout, int root = 0);

// Whole images of some samples on each rank: rank r gets samples [N r / R, N (r + 1) / R) of the
// batch, [n_r, C, H, W] (a sample-parallel, i.e. data-parallel, layout for later layers).
Variable to_samples(const SpatialMap& x);
// The inverse: x holds rank r's samples [N r / R, N (r + 1) / R) of a batch of `samples`.
SpatialMap from_samples(const CommunicatorPtr& comm, const Variable& x, std::int64_t samples,
                        const SpatialLayout& layout);

// Concatenation along the channels of maps in one layout (a U-Net's skip connection); an error
// names the layouts when they differ (relayout one of them first).
SpatialMap spatial_concat(const std::vector<SpatialMap>& xs);

// This rank's share of the mean of a per-element quantity over the whole batch: the sum of the
// tile's elements over the number of elements of the whole batch (x.local may be [N, H, W] or
// [N, C, H, W]: the last two axes are the tile's). The shares of all ranks sum to the mean, so a
// loss built from them gives every rank the gradient of the global mean, and a spatial
// optimizer's sum of the parameters' gradients over the group is that of the whole batch.
Variable spatial_mean(const SpatialMap& x);

// The sum of a scalar over the group (not differentiable): the global loss from the shares.
double group_sum(Communicator& comm, const Variable& x);

}  // namespace functions

}  // namespace tandem
