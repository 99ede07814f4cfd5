#include "comm/functions/parallel_region.h"

#include "comm/functions/communication_node.h"
#include "core/error.h"
#include "core/ops.h"

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

class GatherFromParallelRegion final : public CommunicationNode {
 public:
  GatherFromParallelRegion(Communicator& comm, std::int64_t axis)
      : CommunicationNode(comm, std::nullopt, Participation::as_usual), axis_(axis) {}
  std::string name() const override { return "gather_from_parallel_region"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& y = in[0];
    const auto dims = static_cast<std::int64_t>(y.dim());
    TANDEM_CHECK(dims > 0, "gather_from_parallel_region: rank ", comm_->rank(), ": y must have an axis ", axis_,
                 ", got ", y.description());
    axis_ = axis_ < 0 ? axis_ + dims : axis_;
    TANDEM_CHECK(axis_ >= 0 && axis_ < dims, "gather_from_parallel_region: rank ", comm_->rank(), ": axis ", axis_,
                 " out of range for y ", y.description());
    const std::vector<Tensor> shares = comm_->allgather(y);
    // The shares must agree on every other axis; say which rank differs before concat would.
    begin_ = 0;
    for (int r = 0; r < static_cast<int>(shares.size()); ++r) {
      const Tensor& s = shares[r];
      bool same = s.dim() == y.dim() && s.dtype() == y.dtype();
      for (std::int64_t d = 0; same && d < dims; ++d) same = d == axis_ || s.size(d) == y.size(d);
      TANDEM_CHECK(same, "gather_from_parallel_region: rank ", r, "'s share ", s.description(),
                   " does not match rank ", comm_->rank(), "'s ", y.description(), " except along axis ", axis_);
      if (r < comm_->rank()) begin_ += s.size(axis_);
    }
    end_ = begin_ + y.size(axis_);
    return {concat(shares, axis_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    return {slice(gy[0], axis_, begin_, end_)};
  }

 private:
  std::int64_t axis_, begin_ = 0, end_ = 0;
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

}  // namespace tandem::functions
