#include "comm/tensor_parallel/tensor_parallel_linear.h"

#include "autograd/functions/array.h"

#include "autograd/functions/arithmetic.h"
#include "autograd/functions/linalg.h"
#include "core/ops.h"

namespace tandem {

namespace F = functions;

ColumnParallelLinear::ColumnParallelLinear(CommunicatorPtr comm, std::int64_t in_size, std::int64_t out_size,
                                           bool gather_output, LinearOptions options)
    : comm_(std::move(comm)), in_size_(in_size), out_size_(out_size), gather_output_(gather_output),
      options_(std::move(options)) {
  TANDEM_CHECK(comm_ != nullptr, "ColumnParallelLinear: a communicator is required");
  TANDEM_CHECK(out_size >= comm_->size() && (in_size > 0 || in_size == -1), "ColumnParallelLinear: out_size ",
               out_size, " must be at least the group's ", comm_->size(), " ranks (every rank needs a feature), and "
               "in_size positive (-1 = inferred), got in_size ", in_size);
  share_ = share_of(out_size, comm_->rank(), comm_->size());
  if (!options_.initialW) options_.initialW = initializers::lecun_normal();
  if (!options_.initial_bias) options_.initial_bias = initializers::zero();
  add_uninitialized_param("W");
  if (in_size > 0) initialize_W(in_size);
  if (!options_.nobias)
    add_param("b", options_.initial_bias({out_size}, options_.dtype).slice_rows(share_.begin, share_.end).clone());
}

void ColumnParallelLinear::initialize_W(std::int64_t in_size) {
  in_size_ = in_size;
  // The whole W, drawn as Linear(in_size, out_size) draws it; this rank keeps its rows.
  const Tensor full = options_.initialW({out_size_, in_size}, options_.dtype);
  initialize_param("W", full.slice_rows(share_.begin, share_.end).clone());
}

void ColumnParallelLinear::check_loaded_shape(const std::string& name, const Shape& shape) {
  if (name != "W") return;
  TANDEM_CHECK(shape.size() == 2 && shape[0] == share_.size() && shape[1] > 0, "ColumnParallelLinear: W on rank ",
               comm_->rank(), " of ", comm_->size(), " must be its ", share_.size(), " of ", out_size_,
               " output features [", share_.size(), ", in_size], got ", shape,
               " (a checkpoint split for another number of ranks?)");
  in_size_ = shape[1];
}

Variable ColumnParallelLinear::forward(const Variable& x) {
  if (!param_initialized("W")) {
    TANDEM_CHECK(x.dim() >= 2, "ColumnParallelLinear: input must be [N, features], got ", x.description());
    initialize_W(x.shape().back());
  }
  check_group_agrees("ColumnParallelLinear", {in_size_, out_size_});
  if (sequence_parallel_) {
    // Every rank's positions [T, ..., in], then the product over the last axis.
    const Variable whole = F::gather_from_sequence_parallel_region(*comm_, x);
    Shape shape = whole.shape();
    const Variable y = F::linear(F::reshape(whole, {-1, shape.back()}), param("W"),
                                 options_.nobias ? Variable() : param("b"));
    shape.back() = share_.size();
    return F::reshape(y, shape);
  }
  const Variable y = F::linear(F::copy_to_parallel_region(*comm_, x), param("W"),
                               options_.nobias ? Variable() : param("b"));
  return gather_output_ ? F::gather_from_parallel_region(*comm_, y, -1) : y;
}

void ColumnParallelLinear::set_sequence_parallel(bool on) {
  TANDEM_CHECK(!on || !gather_output_,
               "ColumnParallelLinear: sequence parallelism gathers the input's rows; "
               "gather_output (every rank all features) does not go with it");
  sequence_parallel_ = on;
}

RowParallelLinear::RowParallelLinear(CommunicatorPtr comm, std::int64_t in_size, std::int64_t out_size,
                                     bool input_is_parallel, LinearOptions options)
    : comm_(std::move(comm)), in_size_(in_size), out_size_(out_size), input_is_parallel_(input_is_parallel),
      options_(std::move(options)) {
  TANDEM_CHECK(comm_ != nullptr, "RowParallelLinear: a communicator is required");
  TANDEM_CHECK(in_size >= comm_->size() && out_size > 0, "RowParallelLinear: in_size ", in_size,
               " must be at least the group's ", comm_->size(), " ranks (every rank needs a feature), and out_size "
               "positive, got out_size ", out_size);
  share_ = share_of(in_size, comm_->rank(), comm_->size());
  if (!options_.initialW) options_.initialW = initializers::lecun_normal();
  if (!options_.initial_bias) options_.initial_bias = initializers::zero();
  // The whole W, drawn as Linear(in_size, out_size) draws it; this rank keeps its columns.
  const Tensor full = options_.initialW({out_size, in_size}, options_.dtype);
  add_param("W", slice(full, 1, share_.begin, share_.end).clone());
  if (!options_.nobias) add_param("b", options_.initial_bias({out_size}, options_.dtype));
}

void RowParallelLinear::check_loaded_shape(const std::string& name, const Shape& shape) {
  if (name != "W") return;
  TANDEM_CHECK(shape.size() == 2 && shape[0] == out_size_ && shape[1] == share_.size(),
               "RowParallelLinear: W on rank ", comm_->rank(), " of ", comm_->size(), " must be its ", share_.size(),
               " of ", in_size_, " input features [", out_size_, ", ", share_.size(), "], got ", shape,
               " (a checkpoint split for another number of ranks?)");
}

Variable RowParallelLinear::forward(const Variable& x) {
  check_group_agrees("RowParallelLinear", {in_size_, out_size_});
  const Variable mine = input_is_parallel_ ? x : F::scatter_to_parallel_region(*comm_, x, -1);
  TANDEM_CHECK(mine.dim() >= 2 && mine.shape().back() == share_.size(), "RowParallelLinear: rank ", comm_->rank(),
               " of ", comm_->size(), " takes its ", share_.size(), " of ", in_size_, " input features",
               input_is_parallel_ ? " (input_is_parallel: this rank's share)" : "", ", got ", mine.description());
  Variable y;
  if (sequence_parallel_) {
    // The product over the last axis of [T, ..., in_r], summed over the ranks, each keeping its
    // positions (the first axis, share_of(T)).
    Shape shape = mine.shape();
    shape.back() = out_size_;
    const Variable partial = F::reshape(F::linear(F::reshape(mine, {-1, share_.size()}), param("W")), shape);
    y = F::reduce_scatter_to_sequence_parallel_region(*comm_, partial);
  } else {
    y = F::reduce_from_parallel_region(*comm_, F::linear(mine, param("W")));
  }
  return options_.nobias ? y : F::add(y, param("b"));
}

}  // namespace tandem
