// Layers for spatially split feature maps (spatial_map.h), each the drop-in of a one-process
// layer: the same parameters under the same names, initialised alike, so that a model built
// from them loads the snapshots of its one-process twin, and its forward(Variable) is still the
// one-process layer's.
//
// A tile's loss gives each parameter this tile's share of its gradient; create_spatial_optimizer
// sums the shares over the group before every update.
#pragma once

#include <memory>

#include "comm/multi_node_links/multi_node_batch_normalization.h"
#include "comm/spatial/spatial_convolution.h"
#include "comm/spatial/spatial_map.h"
#include "layers/links/convolution_2d.h"
#include "layers/links/deconvolution_2d.h"
#include "layers/optimizers/optimizer.h"

namespace tandem {

class SpatialConvolution2D : public Convolution2D {
 public:
  using Convolution2D::Convolution2D;
  using Convolution2D::forward;
  using Convolution2D::operator();
  std::string type_name() const override { return "SpatialConvolution2D"; }
  SpatialMap forward(const SpatialMap& x);
  SpatialMap operator()(const SpatialMap& x) { return forward(x); }
};

class SpatialDeconvolution2D : public Deconvolution2D {
 public:
  using Deconvolution2D::Deconvolution2D;
  using Deconvolution2D::forward;
  using Deconvolution2D::operator();
  std::string type_name() const override { return "SpatialDeconvolution2D"; }
  SpatialMap forward(const SpatialMap& x);
  SpatialMap operator()(const SpatialMap& x) { return forward(x); }
};

// Batch normalisation whose statistics are those of every tile of the batch (one allreduce of
// per-channel sums over the map's group in forward and one in backward); outside training it is
// BatchNormalization with the running averages, which stay equal on every rank.
class SpatialBatchNormalization : public BatchNormalization {
 public:
  using BatchNormalization::BatchNormalization;
  using BatchNormalization::forward;
  using BatchNormalization::operator();
  std::string type_name() const override { return "SpatialBatchNormalization"; }
  SpatialMap forward(const SpatialMap& x);
  SpatialMap operator()(const SpatialMap& x) { return forward(x); }
};

// `optimizer` with the parameters' gradients summed over the spatial group before each update
// (create_multi_node_optimizer over one parameter group whose mean is scaled by the group's
// size; a rank whose tile gave a parameter no gradient counts as zeros). With data parallelism
// over several such groups, pass the communicator of all ranks and the spatial group's size:
// the gradients are summed within each group and averaged across the groups.
std::shared_ptr<Optimizer> create_spatial_optimizer(std::shared_ptr<Optimizer> optimizer, CommunicatorPtr comm,
                                                    int spatial_group_size = 0);

}  // namespace tandem
