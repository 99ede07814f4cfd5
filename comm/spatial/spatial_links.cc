#include "comm/spatial/spatial_links.h"

#include "autograd/grad_mode.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "comm/functions/multi_node_batch_normalization.h"
#include "core/error.h"

namespace tandem {

SpatialMap SpatialConvolution2D::forward(const SpatialMap& x) {
  x.check("SpatialConvolution2D");
  if (!param_initialized("W")) initialize_W(x.local.shape()[1]);
  return functions::spatial_convolution_2d(x, param("W"), options().nobias ? Variable() : param("b"), options().conv);
}

SpatialMap SpatialDeconvolution2D::forward(const SpatialMap& x) {
  x.check("SpatialDeconvolution2D");
  if (!param_initialized("W")) initialize_W(x.local.shape()[1]);
  const auto& size = options().outsize;
  return functions::spatial_deconvolution_2d(x, param("W"), options().nobias ? Variable() : param("b"), options().conv,
                                             size ? std::optional(size->first) : std::nullopt,
                                             size ? std::optional(size->second) : std::nullopt);
}

SpatialMap SpatialBatchNormalization::forward(const SpatialMap& x) {
  x.check("SpatialBatchNormalization");
  if (!(is_train() && train_mode())) return x.with(BatchNormalization::forward(x.local));
  count_batch();
  return x.with(functions::multi_node_batch_normalization(*x.comm, x.local, param("gamma"), param("beta"), eps_,
                                                          &persistent("avg_mean"), &persistent("avg_var"), decay_));
}

std::shared_ptr<Optimizer> create_spatial_optimizer(std::shared_ptr<Optimizer> optimizer, CommunicatorPtr comm,
                                                    int spatial_group_size) {
  TANDEM_CHECK(comm != nullptr, "create_spatial_optimizer: no communicator");
  const int group = spatial_group_size > 0 ? spatial_group_size : comm->size();
  TANDEM_CHECK(comm->size() % group == 0, "create_spatial_optimizer: a spatial group of ", group,
               " ranks does not divide the ", comm->size(), " ranks");
  ParameterGroup all{"spatial", comm, [](const std::string&) { return true; }, static_cast<double>(group), true};
  return create_multi_node_optimizer(std::move(optimizer), {all});
}

}  // namespace tandem
