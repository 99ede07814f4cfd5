// What the communication FunctionNodes share: the communicator, what this rank's inputs were
// (to give delegates their zero gradients and every gradient its input's device), and where
// results land.
//
// How a node takes part (Participation):
// - always: a node whose backward is the peer's half of a message exchange (send/recv, the
//   collectives) is recorded whenever gradients are recorded, and its backward runs whenever it
//   is reachable, gradient or not, since every rank must take part alike;
// - once_recorded: recorded as usual (when an input requires a gradient, which is the same on
//   every rank), but once recorded its backward collective runs gradient or not (the parallel
//   regions' allreduce, multi-node batch normalisation);
// - as_usual: an ordinary node whose backward needs no peer.
#pragma once

#include <optional>
#include <vector>

#include "autograd/function_node.h"
#include "comm/transport/communicator.h"

namespace tandem::functions {

class CommunicationNode : public FunctionNode {
 public:
  enum class Participation { always, once_recorded, as_usual };
  bool always_record() const override { return participation_ == Participation::always; }
  bool always_run_backward() const override { return participation_ != Participation::as_usual; }
  // Graph dumps: every rank of the communicator takes part, unless a subclass names a peer.
  FunctionDescription describe() const override { return exchange(FunctionDescription::Exchange::collective); }

  explicit CommunicationNode(Communicator& comm, std::optional<Device> device = std::nullopt,
                             Participation participation = Participation::always)
      : comm_(comm.shared_from_this()), device_(device), participation_(participation) {}

 protected:
  // This node's exchange on comm_, for describe(): peer is the other rank or a collective's root.
  FunctionDescription exchange(FunctionDescription::Exchange kind, int peer = -1, int tag = -1) const {
    return {kind, peer, tag, comm_->rank(), comm_->size(), comm_.get(), {}};
  }

  void remember_inputs(const std::vector<Tensor>& inputs) {
    for (const Tensor& x : inputs) inputs_.push_back({x.shape(), x.dtype(), x.device()});
  }
  // Zero gradients for inputs that only connect the graph (delegates).
  std::vector<Tensor> zero_input_grads() const {
    std::vector<Tensor> grads;
    for (const Input& input : inputs_) grads.push_back(zeros(input.shape, input.dtype, input.device));
    return grads;
  }
  // Gradients on their inputs' devices (communication puts results on the device of this rank's
  // first tensor, or on the communicator's).
  std::vector<Tensor> on_input_devices(std::vector<Tensor> grads) const {
    for (std::size_t i = 0; i < grads.size() && i < inputs_.size(); ++i)
      if (grads[i].defined()) grads[i] = grads[i].to(inputs_[i].device);
    return grads;
  }
  // Where this rank's results land: the requested device; else its (first) input's (a rank that
  // passed no data but a delegate: the delegate's, so that results follow the model); else where
  // the communicator puts them (nullopt).
  std::optional<Device> landing() const {
    if (device_) return device_;
    if (!inputs_.empty()) return inputs_[0].device;
    return std::nullopt;
  }
  std::vector<Tensor> no_grads() const { return std::vector<Tensor>(inputs_.size()); }

  struct Input {
    Shape shape;
    DType dtype;
    Device device;
  };
  CommunicatorPtr comm_;
  std::optional<Device> device_;
  std::vector<Input> inputs_;

 private:
  Participation participation_;
};

}  // namespace tandem::functions
