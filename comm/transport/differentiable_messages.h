// The wire protocol of the differentiable send and recv (comm/functions/point_to_point.h): which
// kind, flags and list positions their messages carry and what a receiver checks, decided here
// and nowhere else. The autograd nodes say what they mean (activations forward, a gradient
// back); the headers (message.h) are this file's business.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/transport/communicator.h"

namespace tandem::comm_detail {

// Forward: xs to dest, in order, each its own message; more than one travel as a list.
// records_graph: the sender recorded a node, so it will wait for their gradients.
void send_activations(Communicator& comm, const std::vector<Tensor>& xs, int dest, int tag, bool records_graph);

struct Activations {
  std::vector<Tensor> tensors;  // on the CPU or the communicator's device (communicator.h)
  bool records_graph = false;   // the sender's records_graph
  bool list = false;            // sent as a list (even of one)
};
// Receives what one send_activations sent (all of a list).
Activations recv_activations(Communicator& comm, int source, int tag);

// Backward: the gradient of activation `index` of `count` goes back to its sender (list: the
// activations came as a list).
void send_gradient(Communicator& comm, const Tensor& grad, int dest, int tag, std::uint32_t index, std::uint32_t count,
                   bool list);
// The sender's half: the gradient of its activation `index` of `count`, which was dtype[shape].
Tensor recv_gradient(Communicator& comm, int source, int tag, std::uint32_t index, std::uint32_t count, DType dtype,
                     const Shape& shape);

}  // namespace tandem::comm_detail
