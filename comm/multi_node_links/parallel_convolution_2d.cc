#include "comm/multi_node_links/parallel_convolution_2d.h"

#include <algorithm>

#include "comm/tensor_parallel/parallel_region.h"
#include "core/ops.h"

namespace tandem {

ParallelConvolution2D::ParallelConvolution2D(CommunicatorPtr comm, std::int64_t in_channels,
                                             std::int64_t out_channels, Convolution2DOptions options)
    : comm_(std::move(comm)), out_channels_(out_channels), options_(std::move(options)) {
  TANDEM_CHECK(comm_ != nullptr, "ParallelConvolution2D: no communicator");
  const int rank = comm_->rank(), size = comm_->size();
  TANDEM_CHECK(options_.conv.groups == 1, "ParallelConvolution2D: groups must be 1 (the output channels are split "
               "across ranks), got ", options_.conv.groups);
  TANDEM_CHECK(out_channels >= size, "ParallelConvolution2D: out_channels ", out_channels,
               " is fewer than the communicator's ", size, " ranks; every rank needs at least one channel");
  TANDEM_CHECK((in_channels > 0 || in_channels == -1) && options_.ksize_y > 0 && options_.ksize_x > 0,
               "ParallelConvolution2D: in_channels (-1 = inferred) and kernel size must be positive, got ",
               in_channels, " -> ", out_channels, ", kernel ", options_.ksize_y, "x", options_.ksize_x);
  const Share share = share_of(out_channels, rank, size);
  begin_ = share.begin;
  end_ = share.end;
  if (!options_.initialW) options_.initialW = initializers::lecun_normal();
  if (!options_.initial_bias) options_.initial_bias = initializers::zero();
  add_uninitialized_param("W");
  if (in_channels > 0) initialize_W(in_channels);
  if (!options_.nobias)
    add_param("b", options_.initial_bias({out_channels}, options_.dtype).slice_rows(begin_, end_).clone());
}

void ParallelConvolution2D::initialize_W(std::int64_t in_channels) {
  // Draw the whole W (fan-in and the random stream as in Convolution2D), keep this rank's rows.
  const Tensor full =
      options_.initialW({out_channels_, in_channels, options_.ksize_y, options_.ksize_x}, options_.dtype);
  initialize_param("W", full.slice_rows(begin_, end_).clone());
}

void ParallelConvolution2D::check_loaded_shape(const std::string& name, const Shape& shape) {
  if (name != "W") return;
  TANDEM_CHECK(shape.size() == 4 && shape[0] == end_ - begin_ && shape[1] > 0 && shape[2] == options_.ksize_y &&
                   shape[3] == options_.ksize_x,
               "ParallelConvolution2D: W on rank ", comm_->rank(), " must be its ", end_ - begin_, " output channels [",
               end_ - begin_, ", in_channels, ", options_.ksize_y, ", ", options_.ksize_x, "], got ", shape);
}

Variable ParallelConvolution2D::forward(const Variable& x) {
  if (!param_initialized("W")) {
    TANDEM_CHECK(x.dim() == 4, "ParallelConvolution2D: input must be [N, C, H, W], got ", x.description());
    initialize_W(x.shape()[1]);
  }
  const Variable shared_x = functions::copy_to_parallel_region(*comm_, x);
  const Variable y = functions::convolution_2d(shared_x, param("W"), options_.nobias ? Variable() : param("b"),
                                               options_.conv);
  return functions::gather_from_parallel_region(*comm_, y, 1);
}

}  // namespace tandem
