// The wire protocol of the pipeline runtime (pipeline.h): what a stage's activations, the
// gradients that come back, and an abort look like on the wire, decided here and nowhere else.
//
// Every message has kind OpKind::pipeline and carries its microbatch in the header's aux field,
// so a receiver checks that what arrives is the microbatch its schedule expects (ranks running
// different schedules are an error naming both, not a silently mixed-up gradient). A stage's
// outputs travel as a list (one message per tensor); each says whether the sender recorded a
// graph for it (kFlagRecordsGraph), and gradients come back, flagged kFlagBackward, for exactly
// those. An abort is a message with aux = kAbortMicrobatch whose payload is the failure's text:
// a rank that fails mid-step sends one on every channel it sends on, so that a peer blocked on
// that channel stops instead of waiting forever (pipeline.cc: the end of a step).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/transport/communicator.h"

namespace tandem::pipeline::detail {

inline constexpr std::int64_t kAbortMicrobatch = -2;

// Thrown by the receives below when an abort arrives instead of the expected message.
struct PipelineAbort {
  std::string failure;  // the text the failing rank sent
};

// tensors go to dest as a list, each marked with whether it takes a gradient; gradients (the
// backward direction) set kFlagBackward. Non-blocking (isend): the caller goes on computing.
// Returns the number of messages sent.
int send_tensors(Communicator& comm, const std::vector<Tensor>& tensors, const std::vector<bool>& takes_gradient,
                 int dest, int tag, int microbatch, bool gradients);

struct ReceivedTensors {
  std::vector<Tensor> tensors;
  std::vector<bool> takes_gradient;
  int messages = 0;  // consumed from the channel (also counted when a check below throws)
};

// Receives one list from `source` on `tag` for `microbatch`. `what` describes it for errors
// ("the activation of microbatch 2 from stage 0 on rank 0"). Throws PipelineAbort for an abort,
// tandem::Error when the message is not what the schedule expects (another microbatch, the
// other direction). `consumed` counts the messages taken from the channel even when it throws.
ReceivedTensors recv_tensors(Communicator& comm, int source, int tag, int microbatch, bool gradients,
                             const std::string& what, int& consumed);

// Receives one message of any pipeline kind and drops it (draining a channel after an abort).
void drop_message(Communicator& comm, int source, int tag);

void send_abort(Communicator& comm, const std::string& failure, int dest, int tag);

// Text as a tensor of bytes (boolean, one byte each) and back: for the documents the ranks
// exchange with allgather (the end of a step, the profile).
Tensor text_tensor(const std::string& text);
std::string tensor_text(const Tensor& bytes);

}  // namespace tandem::pipeline::detail
