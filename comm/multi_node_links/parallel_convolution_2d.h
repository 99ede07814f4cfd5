// ParallelConvolution2D (ChainerMN's channel-parallel convolution): a drop-in for Convolution2D
// whose output channels are split across the ranks of a communicator. Rank r owns channels
// [begin, end) — out_channels / size each, the first out_channels % size ranks one more — and
// only those rows of W and b. Every rank passes the same full input x and gets the same full
// output [N, out_channels, H', W']: each convolves x with its rows, and the shares are
// allgathered and concatenated in rank order. Values and gradients equal those of one
// Convolution2D with the same weights (functions/parallel_region.h says how).
//
// The full W is drawn with the initializer on every rank and each keeps its rows, so with the
// same seed on every rank the model starts exactly as the one-process model does. Everything
// around these layers must be replicated too: the same batches on every rank (a multi-node
// iterator) and the same seed for the replicated layers; then a plain optimizer keeps them equal.
#pragma once

#include "comm/tensor_parallel/tensor_parallel_checkpoint.h"
#include "comm/transport/communicator.h"
#include "layers/links/convolution_2d.h"

namespace tandem {

class ParallelConvolution2D : public Link, public TensorParallelLink {
 public:
  // in_channels -1 defers W's shape to the first forward pass (or to loading a saved W).
  // options.conv.groups must be 1.
  ParallelConvolution2D(CommunicatorPtr comm, std::int64_t in_channels, std::int64_t out_channels,
                        Convolution2DOptions options = {});
  std::string type_name() const override { return "ParallelConvolution2D"; }
  Variable forward(const Variable& x) override;

  Variable& W() { return param("W"); }  // this rank's rows: [end - begin, in_channels, kh, kw]
  Variable& b() { return param("b"); }  // [end - begin]
  std::int64_t out_channels() const { return out_channels_; }
  // This rank's output channels.
  std::int64_t channel_begin() const { return begin_; }
  std::int64_t channel_end() const { return end_; }
  Communicator& group() const override { return *comm_; }
  std::map<std::string, std::int64_t> split_axes() const override { return {{"W", 0}, {"b", 0}}; }

 protected:
  // A saved W must be this rank's rows: [end - begin, in_channels, ksize_y, ksize_x].
  void check_loaded_shape(const std::string& name, const Shape& shape) override;

 private:
  void initialize_W(std::int64_t in_channels);

  CommunicatorPtr comm_;
  std::int64_t out_channels_, begin_, end_;
  Convolution2DOptions options_;
};

}  // namespace tandem
