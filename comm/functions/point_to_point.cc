#include "comm/functions/point_to_point.h"

#include "autograd/function_node.h"
#include "comm/functions/pseudo_connect.h"
#include "core/error.h"

namespace tandem::functions {

using comm_detail::OpKind;

namespace {

class SendFunction final : public FunctionNode {
 public:
  SendFunction(Communicator& comm, int peer, int tag)
      : comm_(comm.shared_from_this()), peer_(peer), tag_(tag) {}
  std::string name() const override { return "send"; }
  bool always_record() const override { return true; }
  bool always_run_backward() const override { return true; }

  std::vector<Tensor> forward(const std::vector<Tensor>& xs) override {
    TANDEM_CHECK(!xs.empty(), "send: nothing to send from rank ", comm_->rank(), " to rank ", peer_);
    const auto n = static_cast<std::uint32_t>(xs.size());
    for (std::uint32_t i = 0; i < n; ++i) {
      MessageOptions options;
      options.kind = OpKind::fn_send;
      options.flags = (recording() ? comm_detail::kFlagRecordsGraph : 0) | (n > 1 ? comm_detail::kFlagList : 0);
      options.list_index = i;
      options.list_size = n;
      comm_->send_message(xs[i], peer_, tag_, options);
      shapes_.push_back(xs[i].shape());
      dtypes_.push_back(xs[i].dtype());
      devices_.push_back(xs[i].device());
    }
    return {Tensor({0}, DType::f32, xs[0].device())};  // the delegate
  }

  std::vector<Tensor> backward(const std::vector<Tensor>&) override {
    CommBackwardScope scope;
    const auto n = static_cast<std::uint32_t>(dtypes_.size());
    std::vector<Tensor> grads(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      if (!is_floating(dtypes_[i])) continue;  // no gradient travels for integer data
      MessageExpectation expect;
      expect.kind = OpKind::fn_recv_grad;
      expect.operation =
          detail::concat("send backward (the gradient of ", dtype_name(dtypes_[i]), shape_str(shapes_[i]),
                         n > 1 ? detail::concat(", tensor ", i + 1, " of ", n) : std::string(), ")");
      expect.check_tensor = true;
      expect.dtype = dtypes_[i];
      expect.shape = shapes_[i];
      expect.check_list = true;
      expect.list_index = i;
      Tensor grad = comm_->recv_message(peer_, tag_, expect).tensor;
      if (needs_input_grad(i)) grads[i] = grad.to(devices_[i]);
    }
    return grads;
  }

  comm_detail::SendRecord record() const {
    std::string what = "send of ";
    for (std::size_t i = 0; i < shapes_.size(); ++i) {
      if (i > 0) what += ", ";
      what += detail::concat(dtype_name(dtypes_[i]), shape_str(shapes_[i]));
      if (i < inputs().size() && !inputs()[i]->name.empty()) what += " '" + inputs()[i]->name + "'";
    }
    return {comm_.get(), peer_, tag_, sequence_number(),
            detail::concat(what, " to rank ", peer_, " (tag ", tag_, ")")};
  }

 private:
  CommunicatorPtr comm_;
  int peer_, tag_;
  std::vector<Shape> shapes_;
  std::vector<DType> dtypes_;
  std::vector<Device> devices_;
};

class RecvFunction final : public FunctionNode {
 public:
  RecvFunction(Communicator& comm, int peer, int tag, std::optional<Device> device)
      : comm_(comm.shared_from_this()), peer_(peer), tag_(tag), device_(device) {}
  std::string name() const override { return "recv"; }
  bool always_record() const override { return true; }
  bool always_run_backward() const override { return true; }

  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override {
    for (const Tensor& input : inputs) inputs_.push_back({input.shape(), input.dtype(), input.device()});
    if (!device_ && !inputs.empty()) device_ = inputs[0].device();  // the delegate's
    MessageExpectation expect;
    expect.kind = OpKind::fn_send;
    expect.operation = "recv";
    expect.check_list = true;
    expect.list_index = 0;
    ReceivedMessage first = comm_->recv_message(peer_, tag_, expect);
    const std::uint32_t n = first.header.list_size;
    const bool sender_records = first.header.has_flag(comm_detail::kFlagRecordsGraph);
    list_ = first.header.has_flag(comm_detail::kFlagList);
    std::vector<Tensor> outputs{std::move(first.tensor)};
    for (std::uint32_t i = 1; i < n; ++i) {
      expect.list_index = i;
      outputs.push_back(comm_->recv_message(peer_, tag_, expect).tensor);
    }
    TANDEM_CHECK(sender_records == recording(), "recv on rank ", comm_->rank(), " from rank ", peer_, " (tag ", tag_,
                 "): rank ", peer_, (sender_records ? " records" : " does not record"),
                 " the graph of its send but rank ", comm_->rank(), (recording() ? " records" : " does not record"),
                 " this recv; both must (or neither, under NoGradGuard), or one of them would wait for a gradient "
                 "forever");
    for (Tensor& y : outputs) {
      if (device_) y = y.to(*device_);
      dtypes_.push_back(y.dtype());
    }
    return outputs;
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    CommBackwardScope scope;
    const auto n = static_cast<std::uint32_t>(grad_outputs.size());
    for (std::uint32_t i = 0; i < n; ++i) {
      if (!is_floating(dtypes_[i])) continue;
      MessageOptions options;
      options.kind = OpKind::fn_recv_grad;
      options.flags = comm_detail::kFlagBackward | (list_ ? comm_detail::kFlagList : 0);
      options.list_index = i;
      options.list_size = n;
      comm_->send_message(grad_outputs[i], peer_, tag_, options);
    }
    // The delegate's gradient is a formality: it makes the engine run the send behind it.
    std::vector<Tensor> grads;
    for (const Input& input : inputs_) grads.push_back(zeros(input.shape, input.dtype, input.device));
    return grads;
  }

  bool received_list() const { return list_; }

 private:
  struct Input {
    Shape shape;
    DType dtype;
    Device device;
  };
  CommunicatorPtr comm_;
  int peer_, tag_;
  std::optional<Device> device_;
  bool list_ = false;
  std::vector<DType> dtypes_;
  std::vector<Input> inputs_;
};

Variables delegate_inputs(const Variable& delegate) {
  return delegate.defined() ? Variables{delegate} : Variables{};
}

}  // namespace

Variable send(const Variables& xs, Communicator& comm, int rank, int tag) {
  return call<SendFunction>(xs, comm, rank, tag)[0];
}

Variable send(const Variable& x, Communicator& comm, int rank, int tag) { return send(Variables{x}, comm, rank, tag); }

Variable send_each(const Variables& xs, Communicator& comm, int rank, int tag) {
  TANDEM_CHECK(!xs.empty(), "send_each: nothing to send from rank ", comm.rank(), " to rank ", rank);
  // One send node per variable, created (and so run, and received) in list order, and joined in
  // that order: backward then runs them last first, as the peer's recvs send their gradients.
  Variable joined = send(xs[0], comm, rank, tag);
  for (std::size_t i = 1; i < xs.size(); ++i) joined = pseudo_connect(joined, send(xs[i], comm, rank, tag));
  return joined;
}

Variables recv_list(Communicator& comm, int rank, const Variable& delegate, int tag, std::optional<Device> device) {
  return call<RecvFunction>(delegate_inputs(delegate), comm, rank, tag, device);
}

Variable recv(Communicator& comm, int rank, const Variable& delegate, int tag, std::optional<Device> device) {
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
