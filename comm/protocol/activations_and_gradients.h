// Activations forward, gradients back: the wire protocol of every layer that sends tensors whose
// gradients come back, decided here and nowhere else. The differentiable send and recv
// (comm/functions/point_to_point.h) and the pipeline runtime (comm/pipeline/pipeline.h) both
// speak it; the transport moves its messages as OpKind::layer_message and only prints their
// label.
//
// - An activation says whether its sender recorded a graph node for it (kTakesGradient): exactly
//   those get a gradient back.
// - A gradient answers one activation, in the activation's place in its list.
// - An abort carries a failure's text instead of a tensor: a pipeline rank that fails mid-step
//   sends one on every channel it sends on, so that a peer blocked there stops instead of
//   waiting forever. A receive that finds one throws Aborted.
// Tensors sent together travel as a list, one message each; every message carries a number the
// receiver checks (the pipeline's microbatch; -1 elsewhere), so ranks that run different
// schedules get an error naming both sides, not a silently mixed-up gradient.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/transport/communicator.h"

namespace tandem::protocol {

// The header's layer_flags of this protocol.
inline constexpr std::uint8_t kTakesGradient = 1;  // an activation whose sender will wait for its gradient
inline constexpr std::uint8_t kGradient = 2;       // the backward direction
inline constexpr std::uint8_t kAbort = 4;          // a failure's text, in place of a tensor

// Where messages go (or come from) and the number they carry.
struct Channel {
  int peer = 0;
  int tag = 0;
  std::int64_t number = -1;  // the pipeline's microbatch; -1 outside a pipeline
  bool blocking = true;      // sends: false returns once posted (isend)
};

// Thrown by the receives below when an abort arrives instead of the expected message.
struct Aborted {
  std::string failure;  // the text the failing rank sent
};

// Forward: xs as one list, takes_gradient[i] for each. as_list: mark them as a list even when
// there is one (the receiver learns it); more than one always travel as a list.
void send_activations(Communicator& comm, const std::vector<Tensor>& xs, const std::vector<bool>& takes_gradient,
                      const Channel& to, bool as_list);
// Backward: the gradient of activation `index` of `count` (list: the activations came as a list).
void send_gradient(Communicator& comm, const Tensor& grad, std::uint32_t index, std::uint32_t count, bool list,
                   const Channel& to);
// Backward, all at once: grads[i] answers activation i of a list of grads.size().
void send_gradients(Communicator& comm, const std::vector<Tensor>& grads, const Channel& to);
void send_abort(Communicator& comm, const std::string& failure, const Channel& to);

struct Received {
  std::vector<Tensor> tensors;  // on the CPU or the communicator's device (communicator.h)
  std::vector<bool> takes_gradient;
  bool list = false;  // sent as a list (even of one)
};
// Receives one list of activations (gradients: of gradients) carrying from.number. `operation`
// names the receiving operation and `what` what it waits for, for errors ("pipeline: receive",
// "the activation of microbatch 2 from stage 0 on rank 0"). Throws
// Aborted for an abort and tandem::Error for anything else the receiver does not expect (the
// other direction, another number). `consumed`, when given, counts the messages taken off the
// channel, also when it throws.
Received recv_list(Communicator& comm, const Channel& from, bool gradients, const char* operation,
                   const std::string& what, int* consumed = nullptr);
// The sender's half of send_gradient: the gradient of its activation `index` of `count`, which
// was dtype[shape].
Tensor recv_gradient(Communicator& comm, const Channel& from, std::uint32_t index, std::uint32_t count, DType dtype,
                     const Shape& shape);
// Receives one message of this protocol and drops it (draining a channel after an abort).
void drop_message(Communicator& comm, int source, int tag);

// Text as a tensor of bytes (boolean, one byte each) and back.
Tensor text_tensor(const std::string& text);
std::string tensor_text(const Tensor& bytes);

}  // namespace tandem::protocol
