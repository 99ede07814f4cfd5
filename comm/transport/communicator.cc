#include "comm/transport/communicator.h"

namespace tandem {

namespace {
thread_local bool g_in_backward = false;
}

CommBackwardScope::CommBackwardScope() : previous_(g_in_backward) { g_in_backward = true; }
CommBackwardScope::~CommBackwardScope() { g_in_backward = previous_; }
bool CommBackwardScope::active() { return g_in_backward; }

namespace {
// Moves a result to the requested device. The MPI layer has already put it where the
// communicator puts results (communicator.h), so a request for another device costs one copy.
Tensor land(Tensor y, const std::optional<Device>& device) { return device && y.defined() ? y.to(*device) : y; }
}  // namespace

Tensor Communicator::recv(int source, int tag, std::optional<Device> device) {
  MessageExpectation expect;
  expect.kind = comm_detail::OpKind::tensor_send;
  expect.operation = "recv";
  return land(recv_message(source, tag, expect).tensor, device);
}

Tensor Communicator::bcast(const Tensor& x, int root, std::optional<Device> device) {
  return land(bcast(x, root), device);
}

std::vector<Tensor> Communicator::gather(const Tensor& x, int root, std::optional<Device> device) {
  std::vector<Tensor> ys = gather(x, root);
  for (Tensor& y : ys) y = land(std::move(y), device);
  return ys;
}

Tensor Communicator::scatter(const std::vector<Tensor>& xs, int root, std::optional<Device> device) {
  return land(scatter(xs, root), device);
}

}  // namespace tandem
