// Megatron-LM's tensor-parallel linear layers, drop-ins for Linear whose weight is split across
// the ranks of a communicator (comm/tensor_parallel/parallel_region.h has the regions they use).
//
// ColumnParallelLinear splits the output features: rank r holds rows share_of(out_size, r) of W
// (and of b). Every rank passes the same full input; the output is this rank's share of the
// features, [N, share], or with gather_output the full [N, out_size] on every rank.
//   y_r = copy_to(x) W_r^T + b_r                     (gather_output: y = gather_from(y_r))
// RowParallelLinear splits the input features: rank r holds columns share_of(in_size, r) of W.
// Its input is this rank's share of the features (input_is_parallel, the default: the output of
// a ColumnParallelLinear without gather_output), or the full input, which it scatters. The
// partial products are summed over the ranks, then the bias is added once: every rank gets the
// same full output.
//   y = reduce_from(x_r W_r^T) + b                   (input_is_parallel = false: x_r = scatter_to(x))
// Megatron's MLP is the pair: column (no gather) -> activation -> row: one allreduce forward, one
// backward, per pair.
//
// Sequence parallelism (Megatron-LM's, set_sequence_parallel): outside the pair each rank holds
// its own positions of the sequence (parallel_region.h's sequence functions), not all of them:
// activations [T_r, ..., features], sequence first, rank r the positions share_of(T, r).
// ColumnParallelLinear then takes this rank's positions and gathers every rank's (backward:
// reduce-scatter, in place of copy_to's allreduce), giving [T, ..., its features];
// RowParallelLinear takes [T, ..., its input features] and reduce-scatters the summed products to
// this rank's positions (in place of the allreduce), adding the bias to them, so the bias's
// gradient is this rank's part of it: the caller sums it over the group (as the layer norms'
// between the pairs; comm/model_parallel/tied_parameters.h, sum_gradients_over). Any T splits,
// evenly or not, and any number of axes may follow the sequence's.
//
// Initialisation: the whole W is drawn with the initializer (the same stream as Linear(in, out),
// so with the same seed on every rank the split model starts as the unsplit one does) and each
// rank keeps its share; parameters are named "W" and "b" as Linear's. A split checkpoint holds
// each rank's share; the layer checks a loaded W's shape against its share. Sizes split
// unevenly as share_of says. Everything around these layers must be replicated (the same
// batches and seeds on every rank of the group).
#pragma once

#include "comm/tensor_parallel/parallel_region.h"
#include "comm/tensor_parallel/tensor_parallel_checkpoint.h"
#include "comm/transport/communicator.h"
#include "layers/links/linear.h"

namespace tandem {

class ColumnParallelLinear : public Link, public TensorParallelLink {
 public:
  // in_size -1 defers W's shape to the first forward pass (or to loading a saved W).
  ColumnParallelLinear(CommunicatorPtr comm, std::int64_t in_size, std::int64_t out_size, bool gather_output = false,
                       LinearOptions options = {});
  std::string type_name() const override { return "ColumnParallelLinear"; }
  Variable forward(const Variable& x) override;

  Variable& W() { return param("W"); }  // [share.size(), in_size]
  Variable& b() { return param("b"); }  // [share.size()]
  Share share() const { return share_; }  // this rank's output features
  std::int64_t out_size() const { return out_size_; }
  Communicator& group() const override { return *comm_; }
  std::map<std::string, std::int64_t> split_axes() const override { return {{"W", 0}, {"b", 0}}; }
  // The input is this rank's positions [T_r, ..., in]; the output every position's features of
  // this rank's share, [T, ..., share].
  void set_sequence_parallel(bool on);

 protected:
  void check_loaded_shape(const std::string& name, const Shape& shape) override;

 private:
  void initialize_W(std::int64_t in_size);
  CommunicatorPtr comm_;
  std::int64_t in_size_, out_size_;
  bool gather_output_;
  bool sequence_parallel_ = false;
  LinearOptions options_;
  Share share_;
};

class RowParallelLinear : public Link, public TensorParallelLink {
 public:
  RowParallelLinear(CommunicatorPtr comm, std::int64_t in_size, std::int64_t out_size, bool input_is_parallel = true,
                    LinearOptions options = {});
  std::string type_name() const override { return "RowParallelLinear"; }
  Variable forward(const Variable& x) override;

  Variable& W() { return param("W"); }  // [out_size, share.size()]
  Variable& b() { return param("b"); }  // [out_size], the same on every rank
  Share share() const { return share_; }  // this rank's input features
  std::int64_t in_size() const { return in_size_; }
  Communicator& group() const override { return *comm_; }
  std::map<std::string, std::int64_t> split_axes() const override { return {{"W", 1}}; }  // b: replicated
  // The input is every position's share of the features [T, ..., share]; the output this rank's
  // positions of the summed products, [T_r, ..., out].
  void set_sequence_parallel(bool on) { sequence_parallel_ = on; }

 protected:
  void check_loaded_shape(const std::string& name, const Shape& shape) override;

 private:
  CommunicatorPtr comm_;
  std::int64_t in_size_, out_size_;
  bool input_is_parallel_;
  bool sequence_parallel_ = false;
  LinearOptions options_;
  Share share_;
};

}  // namespace tandem
