#include "comm/tensor_parallel/parallel_region.h"

#include <algorithm>

#include "comm/functions/backward_scope.h"
#include "comm/functions/communication_node.h"
#include "core/error.h"
#include "core/ops.h"

namespace tandem {

Share share_of(std::int64_t n, int rank, int ranks) {
  TANDEM_CHECK(ranks >= 1 && rank >= 0 && rank < ranks && n >= 0, "share_of: rank ", rank, " of ", ranks,
               " ranks, ", n, " items");
  const std::int64_t each = n / ranks, extra = n % ranks;
  Share share;
  share.begin = rank * each + std::min<std::int64_t>(rank, extra);
  share.end = share.begin + each + (rank < extra ? 1 : 0);
  return share;
}

}  // namespace tandem

namespace tandem::functions {

namespace {

class CopyToParallelRegion final : public CommunicationNode {
 public:
  // Once recorded, every rank must take part in the allreduce, gradient or not.
  explicit CopyToParallelRegion(Communicator& comm)
      : CommunicationNode(comm, std::nullopt, Participation::once_recorded) {}
  std::string name() const override { return "copy_to_parallel_region"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    return {in[0]};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    CommBackwardScope scope;
    return {comm_->allreduce(gy[0], AllreduceOp::sum)};
  }
};

// Normalises `axis` for x and checks that it exists.
std::int64_t checked_axis(const char* name, const Communicator& comm, const Tensor& x, std::int64_t axis) {
  const auto dims = static_cast<std::int64_t>(x.dim());
  const std::int64_t a = axis < 0 ? axis + dims : axis;
  TANDEM_CHECK(dims > 0 && a >= 0 && a < dims, name, ": rank ", comm.rank(), ": axis ", axis, " out of range for ",
               x.description());
  return a;
}

// Every rank's share, concatenated in rank order along `axis` (extents along it may differ,
// all others must agree); `extents` receives each rank's extent along the axis.
Tensor gather_shares(const char* name, Communicator& comm, const Tensor& y, std::int64_t axis,
                     std::vector<std::int64_t>& extents) {
  const std::vector<Tensor> shares = comm.allgather(y);
  extents.clear();
  for (int r = 0; r < static_cast<int>(shares.size()); ++r) {
    const Tensor& s = shares[r];
    bool same = s.dim() == y.dim() && s.dtype() == y.dtype();
    for (std::int64_t d = 0; same && d < static_cast<std::int64_t>(y.dim()); ++d) same = d == axis || s.size(d) == y.size(d);
    TANDEM_CHECK(same, name, ": rank ", r, "'s share ", s.description(), " does not match rank ", comm.rank(), "'s ",
                 y.description(), " except along axis ", axis);
    extents.push_back(s.size(axis));
  }
  return concat(shares, axis);
}

// The ranks must agree on what they split: the full extent and the axis (else each would cut a
// different share and the result would be silently wrong).
void check_same_split(const char* name, Communicator& comm, std::int64_t extent, std::int64_t axis,
                      const Tensor& x) {
  const Tensor mine = from_vector(std::vector<std::int64_t>{extent, axis}, {2});
  const std::vector<Tensor> all = comm.allgather(mine);
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    const std::int64_t* v = all[r].data<std::int64_t>();
    TANDEM_CHECK(v[0] == extent && v[1] == axis, name, ": the ranks disagree on what they split: rank ",
                 comm.rank(), " splits ", x.description(), " along axis ", axis, " (extent ", extent, "), rank ", r,
                 " an extent of ", v[0], " along axis ", v[1]);
  }
}

class ReduceFromParallelRegion final : public CommunicationNode {
 public:
  explicit ReduceFromParallelRegion(Communicator& comm)
      : CommunicationNode(comm, std::nullopt, Participation::as_usual) {}
  std::string name() const override { return "reduce_from_parallel_region"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    return {comm_->allreduce(in[0], AllreduceOp::sum)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override { return {gy[0]}; }
};

// Keeps this rank's share along an axis; backward gathers the ranks' gradients.
class ScatterToRegion final : public CommunicationNode {
 public:
  ScatterToRegion(Communicator& comm, std::int64_t axis, const char* name)
      : CommunicationNode(comm, std::nullopt, Participation::once_recorded), axis_(axis), name_(name) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& x = in[0];
    axis_ = checked_axis(name_, *comm_, x, axis_);
    check_same_split(name_, *comm_, x.size(axis_), axis_, x);
    full_ = x.shape();
    const Share share = share_of(x.size(axis_), comm_->rank(), comm_->size());
    return {slice(x, axis_, share.begin, share.end)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    CommBackwardScope scope;
    std::vector<std::int64_t> extents;
    Tensor gx = gather_shares(name_, *comm_, gy[0], axis_, extents);
    TANDEM_CHECK(gx.shape() == full_, name_, " (backward): the ranks' gradients make ", gx.description(),
                 ", not the input's shape ", shape_str(full_));
    return {gx};
  }

 private:
  std::int64_t axis_;
  const char* name_;
  Shape full_;
};

class GatherFromParallelRegion final : public CommunicationNode {
 public:
  GatherFromParallelRegion(Communicator& comm, std::int64_t axis)
      : CommunicationNode(comm, std::nullopt, Participation::as_usual), axis_(axis) {}
  std::string name() const override { return "gather_from_parallel_region"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& y = in[0];
    axis_ = checked_axis("gather_from_parallel_region", *comm_, y, axis_);
    std::vector<std::int64_t> extents;
    Tensor full = gather_shares("gather_from_parallel_region", *comm_, y, axis_, extents);
    begin_ = 0;
    for (int r = 0; r < comm_->rank(); ++r) begin_ += extents[static_cast<std::size_t>(r)];
    end_ = begin_ + y.size(axis_);
    return {full};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    return {slice(gy[0], axis_, begin_, end_)};
  }

 private:
  std::int64_t axis_, begin_ = 0, end_ = 0;
};

// The rows of every rank; backward: the sum over ranks of the gradient, each keeping its rows.
class GatherFromSequenceParallelRegion final : public CommunicationNode {
 public:
  explicit GatherFromSequenceParallelRegion(Communicator& comm)
      : CommunicationNode(comm, std::nullopt, Participation::once_recorded) {}
  std::string name() const override { return "gather_from_sequence_parallel_region"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    checked_axis(name().c_str(), *comm_, in[0], 0);
    return {gather_shares("gather_from_sequence_parallel_region", *comm_, in[0], 0, extents_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    CommBackwardScope scope;
    std::vector<Tensor> pieces;
    std::int64_t begin = 0;
    for (std::int64_t extent : extents_) {
      pieces.push_back(gy[0].slice_rows(begin, begin + extent));
      begin += extent;
    }
    return {comm_->reduce_scatter(pieces)};
  }

 private:
  std::vector<std::int64_t> extents_;
};

// The sum over ranks, each rank keeping its share of the rows; backward: allgather of the rows.
class ReduceScatterToSequenceParallelRegion final : public CommunicationNode {
 public:
  explicit ReduceScatterToSequenceParallelRegion(Communicator& comm)
      : CommunicationNode(comm, std::nullopt, Participation::once_recorded) {}
  std::string name() const override { return "reduce_scatter_to_sequence_parallel_region"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& x = in[0];
    checked_axis("reduce_scatter_to_sequence_parallel_region", *comm_, x, 0);
    full_ = x.shape();
    std::vector<Tensor> pieces;
    for (int r = 0; r < comm_->size(); ++r) {
      const Share share = share_of(x.size(0), r, comm_->size());
      pieces.push_back(x.slice_rows(share.begin, share.end));
    }
    // reduce_scatter checks that every rank passes pieces of the same shapes.
    return {comm_->reduce_scatter(pieces)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    CommBackwardScope scope;
    std::vector<std::int64_t> extents;
    Tensor gx = gather_shares("reduce_scatter_to_sequence_parallel_region (backward)", *comm_, gy[0], 0, extents);
    TANDEM_CHECK(gx.shape() == full_, "reduce_scatter_to_sequence_parallel_region (backward): the ranks' gradients "
                 "make ", gx.description(), ", not the input's shape ", shape_str(full_));
    return {gx};
  }

 private:
  Shape full_;
};

}  // namespace

Variable copy_to_parallel_region(Communicator& comm, const Variable& x) {
  TANDEM_CHECK(x.defined(), "copy_to_parallel_region: rank ", comm.rank(), " passed an undefined variable");
  return call<CopyToParallelRegion>({x}, comm)[0];
}

Variable gather_from_parallel_region(Communicator& comm, const Variable& y, std::int64_t axis) {
  TANDEM_CHECK(y.defined(), "gather_from_parallel_region: rank ", comm.rank(), " passed an undefined variable");
  return call<GatherFromParallelRegion>({y}, comm, axis)[0];
}

Variable reduce_from_parallel_region(Communicator& comm, const Variable& x) {
  TANDEM_CHECK(x.defined(), "reduce_from_parallel_region: rank ", comm.rank(), " passed an undefined variable");
  return call<ReduceFromParallelRegion>({x}, comm)[0];
}

Variable scatter_to_parallel_region(Communicator& comm, const Variable& x, std::int64_t axis) {
  TANDEM_CHECK(x.defined(), "scatter_to_parallel_region: rank ", comm.rank(), " passed an undefined variable");
  return call<ScatterToRegion>({x}, comm, axis, "scatter_to_parallel_region")[0];
}

Variable scatter_to_sequence_parallel_region(Communicator& comm, const Variable& x) {
  TANDEM_CHECK(x.defined(), "scatter_to_sequence_parallel_region: rank ", comm.rank(),
               " passed an undefined variable");
  return call<ScatterToRegion>({x}, comm, std::int64_t{0}, "scatter_to_sequence_parallel_region")[0];
}

Variable gather_from_sequence_parallel_region(Communicator& comm, const Variable& x) {
  TANDEM_CHECK(x.defined(), "gather_from_sequence_parallel_region: rank ", comm.rank(),
               " passed an undefined variable");
  return call<GatherFromSequenceParallelRegion>({x}, comm)[0];
}

Variable reduce_scatter_to_sequence_parallel_region(Communicator& comm, const Variable& x) {
  TANDEM_CHECK(x.defined(), "reduce_scatter_to_sequence_parallel_region: rank ", comm.rank(),
               " passed an undefined variable");
  return call<ReduceScatterToSequenceParallelRegion>({x}, comm)[0];
}

}  // namespace tandem::functions
