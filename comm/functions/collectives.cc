#include "comm/functions/collectives.h"

#include "comm/functions/backward_scope.h"
#include "comm/functions/communication_node.h"
#include "core/error.h"

namespace tandem::functions {

namespace {

// A collective node: a CommunicationNode that knows the dtype every rank agreed on in forward,
// which decides whether gradients travel.
class CollectiveFunction : public CommunicationNode {
 public:
  using CommunicationNode::CommunicationNode;

 protected:
  // For the collectives with a root (bcast, gather, scatter): the root in graph dumps.
  FunctionDescription rooted(int root) const { return exchange(FunctionDescription::Exchange::collective, root); }
  bool differentiable() const { return is_floating(dtype_); }
  DType dtype_ = DType::f32;
};

class Bcast final : public CollectiveFunction {
 public:
  Bcast(Communicator& comm, int root, std::optional<Device> device) : CollectiveFunction(comm, device), root_(root) {}
  std::string name() const override { return "bcast"; }
  FunctionDescription describe() const override { return rooted(root_); }
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override {
    remember_inputs(inputs);
    const bool is_root = comm_->rank() == root_;
    TANDEM_CHECK(!is_root || !inputs.empty(), "bcast: the root (rank ", root_, ") passed no variable");
    Tensor y = comm_->bcast(is_root ? inputs[0] : Tensor(), root_, landing());
    dtype_ = y.dtype();
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    if (!differentiable()) return no_grads();
    CommBackwardScope scope;
    Tensor sum = comm_->reduce(gy[0], root_);
    std::vector<Tensor> grads = zero_input_grads();
    if (comm_->rank() == root_) grads[0] = sum;
    return on_input_devices(grads);
  }

 private:
  int root_;
};

class Gather final : public CollectiveFunction {
 public:
  Gather(Communicator& comm, int root, std::optional<Device> device) : CollectiveFunction(comm, device), root_(root) {}
  std::string name() const override { return "gather"; }
  FunctionDescription describe() const override { return rooted(root_); }
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override {
    remember_inputs(inputs);
    dtype_ = inputs[0].dtype();
    std::vector<Tensor> ys = comm_->gather(inputs[0], root_, landing());
    if (comm_->rank() != root_) return {Tensor({0}, DType::f32, inputs[0].device())};  // the delegate
    return ys;
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gys) override {
    if (!differentiable()) return no_grads();
    CommBackwardScope scope;
    const bool is_root = comm_->rank() == root_;
    return on_input_devices({comm_->scatter(is_root ? gys : std::vector<Tensor>{}, root_)});
  }

 private:
  int root_;
};

class Scatter final : public CollectiveFunction {
 public:
  Scatter(Communicator& comm, int root, std::optional<Device> device)
      : CollectiveFunction(comm, device), root_(root) {}
  std::string name() const override { return "scatter"; }
  FunctionDescription describe() const override { return rooted(root_); }
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override {
    remember_inputs(inputs);
    const bool is_root = comm_->rank() == root_;
    Tensor y = comm_->scatter(is_root ? inputs : std::vector<Tensor>{}, root_, landing());
    dtype_ = y.dtype();
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    if (!differentiable()) return no_grads();
    CommBackwardScope scope;
    std::vector<Tensor> gathered = comm_->gather(gy[0], root_);
    if (comm_->rank() == root_) return on_input_devices(gathered);
    return zero_input_grads();
  }

 private:
  int root_;
};

class Allgather final : public CollectiveFunction {
 public:
  using CollectiveFunction::CollectiveFunction;
  std::string name() const override { return "allgather"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override {
    remember_inputs(inputs);
    dtype_ = inputs[0].dtype();
    return comm_->allgather(inputs[0]);
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gys) override {
    if (!differentiable()) return no_grads();
    CommBackwardScope scope;
    return on_input_devices({comm_->reduce_scatter(gys)});
  }
};

class Alltoall final : public CollectiveFunction {
 public:
  using CollectiveFunction::CollectiveFunction;
  std::string name() const override { return "alltoall"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override {
    remember_inputs(inputs);
    dtype_ = inputs.empty() ? DType::f32 : inputs[0].dtype();
    return comm_->alltoall(inputs);
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gys) override {
    if (!differentiable()) return no_grads();
    CommBackwardScope scope;
    return on_input_devices(comm_->alltoall(gys));
  }
};

class Alltoallv final : public CollectiveFunction {
 public:
  Alltoallv(Communicator& comm, std::vector<std::int64_t> send_counts)
      : CollectiveFunction(comm), send_counts_(std::move(send_counts)) {}
  std::string name() const override { return "alltoallv"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override {
    remember_inputs(inputs);
    dtype_ = inputs[0].dtype();
    AlltoallvResult result = comm_->alltoallv(inputs[0], send_counts_);
    recv_counts_ = std::move(result.recv_counts);
    return {result.y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    if (!differentiable()) return no_grads();
    CommBackwardScope scope;
    // The same routes backwards: what came from rank r goes back to it.
    AlltoallvResult back = comm_->alltoallv(gy[0], recv_counts_);
    TANDEM_CHECK(back.recv_counts == send_counts_, "alltoallv (in backward): rank ", comm_->rank(),
                 " got its gradients back in pieces of other lengths than it sent");
    return on_input_devices({back.y});
  }
  const std::vector<std::int64_t>& recv_counts() const { return recv_counts_; }

 private:
  std::vector<std::int64_t> send_counts_, recv_counts_;
};

class Allreduce final : public CollectiveFunction {
 public:
  Allreduce(Communicator& comm, AllreduceOp op) : CollectiveFunction(comm), op_(op) {}
  std::string name() const override { return "allreduce"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override {
    remember_inputs(inputs);
    dtype_ = inputs[0].dtype();
    return {comm_->allreduce(inputs[0], op_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    if (!differentiable()) return no_grads();
    CommBackwardScope scope;
    return on_input_devices({comm_->allreduce(gy[0], op_)});
  }

 private:
  AllreduceOp op_;
};

void check_defined(const Variable& x, const char* operation, const Communicator& comm) {
  TANDEM_CHECK(x.defined(), operation, ": rank ", comm.rank(), " passed an undefined variable");
}

}  // namespace

Variable bcast(Communicator& comm, const Variable& x, int root, std::optional<Device> device, CallSite site) {
  const CallSiteScope scope(site);  // the messages record the user's line
  return call<Bcast>(x.defined() ? Variables{x} : Variables{}, comm, root, device)[0];
}

Variables gather(Communicator& comm, const Variable& x, int root, std::optional<Device> device, CallSite site) {
  const CallSiteScope scope(site);  // the messages record the user's line
  check_defined(x, "gather", comm);
  return call<Gather>({x}, comm, root, device);
}

Variable scatter(Communicator& comm, const Variables& xs, int root, std::optional<Device> device, CallSite site) {
  const CallSiteScope scope(site);  // the messages record the user's line
  return call<Scatter>(xs, comm, root, device)[0];
}

Variables allgather(Communicator& comm, const Variable& x, CallSite site) {
  const CallSiteScope scope(site);  // the messages record the user's line
  check_defined(x, "allgather", comm);
  return call<Allgather>({x}, comm);
}

Variables alltoall(Communicator& comm, const Variables& xs, CallSite site) {
  const CallSiteScope scope(site);  // the messages record the user's line
  return call<Alltoall>(xs, comm);
}

Variable alltoallv(Communicator& comm, const Variable& x, const std::vector<std::int64_t>& send_counts,
                   std::vector<std::int64_t>* recv_counts, CallSite site) {
  const CallSiteScope scope(site);  // the messages record the user's line
  check_defined(x, "alltoallv", comm);
  auto node = std::make_shared<Alltoallv>(comm, send_counts);
  Variable y = node->apply({x})[0];
  if (recv_counts) *recv_counts = node->recv_counts();
  return y;
}

Variable allreduce(Communicator& comm, const Variable& x, AllreduceOp op, CallSite site) {
  const CallSiteScope scope(site);  // the messages record the user's line
  check_defined(x, "allreduce", comm);
  return call<Allreduce>({x}, comm, op)[0];
}

}  // namespace tandem::functions
