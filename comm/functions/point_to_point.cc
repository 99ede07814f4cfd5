#include "comm/functions/point_to_point.h"

#include "comm/functions/communication_node.h"
#include "comm/functions/pseudo_connect.h"
#include "comm/functions/backward_scope.h"
#include "comm/protocol/activations_and_gradients.h"
#include "core/error.h"

namespace tandem::functions {

namespace {

class SendFunction final : public CommunicationNode {
 public:
  SendFunction(Communicator& comm, int peer, int tag) : CommunicationNode(comm), peer_(peer), tag_(tag) {}
  std::string name() const override { return "send"; }
  FunctionDescription describe() const override { return exchange(FunctionDescription::Exchange::send, peer_, tag_); }

  std::vector<Tensor> forward(const std::vector<Tensor>& xs) override {
    TANDEM_CHECK(!xs.empty(), "send: nothing to send from rank ", comm_->rank(), " to rank ", peer_);
    remember_inputs(xs);
    protocol::send_activations(*comm_, xs, std::vector<bool>(xs.size(), recording()), {peer_, tag_}, false);
    return {Tensor({0}, DType::f32, xs[0].device())};  // the delegate
  }

  std::vector<Tensor> backward(const std::vector<Tensor>&) override {
    CommBackwardScope scope;
    const auto n = static_cast<std::uint32_t>(inputs_.size());
    std::vector<Tensor> grads(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      if (!is_floating(inputs_[i].dtype)) continue;  // no gradient travels for integer data
      Tensor grad = protocol::recv_gradient(*comm_, {peer_, tag_}, i, n, inputs_[i].dtype, inputs_[i].shape);
      if (needs_input_grad(i)) grads[i] = grad;
    }
    return on_input_devices(grads);
  }

  comm_detail::SendRecord record() const {
    std::string what = "send of ";
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      if (i > 0) what += ", ";
      what += detail::concat(dtype_name(inputs_[i].dtype), shape_str(inputs_[i].shape));
      if (i < inputs().size() && !inputs()[i]->name.empty()) what += " '" + inputs()[i]->name + "'";
    }
    return {comm_.get(), peer_, tag_, sequence_number(),
            detail::concat(what, " to rank ", peer_, " (tag ", tag_, ")")};
  }

 private:
  int peer_, tag_;
};

class RecvFunction final : public CommunicationNode {
 public:
  RecvFunction(Communicator& comm, int peer, int tag, std::optional<Device> device)
      : CommunicationNode(comm, device), peer_(peer), tag_(tag) {}
  std::string name() const override { return "recv"; }
  FunctionDescription describe() const override { return exchange(FunctionDescription::Exchange::recv, peer_, tag_); }

  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override {
    remember_inputs(inputs);  // the delegate, if any
    protocol::Received got = protocol::recv_list(*comm_, {peer_, tag_}, false, "recv", "the activations of a send");
    const bool records_graph = got.takes_gradient[0];
    TANDEM_CHECK(records_graph == recording(), "recv on rank ", comm_->rank(), " from rank ", peer_, " (tag ",
                 tag_, "): rank ", peer_, (records_graph ? " records" : " does not record"),
                 " the graph of its send but rank ", comm_->rank(), (recording() ? " records" : " does not record"),
                 " this recv; both must (or neither, under NoGradGuard), or one of them would wait for a gradient "
                 "forever");
    list_ = got.list;
    const std::optional<Device> device = landing();
    for (Tensor& y : got.tensors) {
      if (device) y = y.to(*device);
      dtypes_.push_back(y.dtype());
    }
    return got.tensors;
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    CommBackwardScope scope;
    const auto n = static_cast<std::uint32_t>(grad_outputs.size());
    for (std::uint32_t i = 0; i < n; ++i) {
      if (is_floating(dtypes_[i])) protocol::send_gradient(*comm_, grad_outputs[i], i, n, list_, {peer_, tag_});
    }
    // The delegate's gradient is a formality: it makes the engine run the send behind it.
    return zero_input_grads();
  }

 private:
  int peer_, tag_;
  bool list_ = false;
  std::vector<DType> dtypes_;
};

Variables delegate_inputs(const Variable& delegate) {
  return delegate.defined() ? Variables{delegate} : Variables{};
}

}  // namespace

Variable send(const Variables& xs, Communicator& comm, int rank, int tag, CallSite site) {
  const CallSiteScope scope(site);  // the messages record the user's line
  return call<SendFunction>(xs, comm, rank, tag)[0];
}

Variable send(const Variable& x, Communicator& comm, int rank, int tag, CallSite site) {
  const CallSiteScope scope(site);  // the messages record the user's line
  return send(Variables{x}, comm, rank, tag);
}

Variable send_each(const Variables& xs, Communicator& comm, int rank, int tag, CallSite site) {
  const CallSiteScope scope(site);  // the messages record the user's line
  TANDEM_CHECK(!xs.empty(), "send_each: nothing to send from rank ", comm.rank(), " to rank ", rank);
  // One send node per variable, created (and so run, and received) in list order, and joined in
  // that order: backward then runs them last first, as the peer's recvs send their gradients.
  Variable joined = send(xs[0], comm, rank, tag);
  for (std::size_t i = 1; i < xs.size(); ++i) joined = pseudo_connect(joined, send(xs[i], comm, rank, tag));
  return joined;
}

Variables recv_list(Communicator& comm, int rank, const Variable& delegate, int tag, std::optional<Device> device, CallSite site) {
  const CallSiteScope scope(site);  // the messages record the user's line
  return call<RecvFunction>(delegate_inputs(delegate), comm, rank, tag, device);
}

Variable recv(Communicator& comm, int rank, const Variable& delegate, int tag, std::optional<Device> device, CallSite site) {
  const CallSiteScope scope(site);  // the messages record the user's line
  Variables ys = recv_list(comm, rank, delegate, tag, device);
  TANDEM_CHECK(ys.size() == 1, "recv on rank ", comm.rank(), ": rank ", rank, " sent a list of ", ys.size(),
               " variables (tag ", tag, "); receive it with recv_list");
  return ys[0];
}

}  // namespace tandem::functions

namespace tandem::comm_detail {

std::optional<SendRecord> send_record(const FunctionNode& node) {
  const auto* send = dynamic_cast<const functions::SendFunction*>(&node);
  if (send == nullptr) return std::nullopt;
  return send->record();
}

}  // namespace tandem::comm_detail
