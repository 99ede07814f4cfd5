#include "comm/pipeline/pipeline_messages.h"

#include <cstring>

#include "core/error.h"

namespace tandem::pipeline::detail {

using comm_detail::kFlagBackward;
using comm_detail::kFlagList;
using comm_detail::kFlagRecordsGraph;
using comm_detail::OpKind;

int send_tensors(Communicator& comm, const std::vector<Tensor>& tensors, const std::vector<bool>& takes_gradient,
                 int dest, int tag, int microbatch, bool gradients) {
  const auto n = static_cast<std::uint32_t>(tensors.size());
  for (std::uint32_t i = 0; i < n; ++i) {
    MessageOptions options;
    options.kind = OpKind::pipeline;
    options.flags = (takes_gradient[i] ? kFlagRecordsGraph : 0) | (gradients ? kFlagBackward : 0) | kFlagList;
    options.list_index = i;
    options.list_size = n;
    options.blocking = false;
    options.aux = microbatch;
    comm.send_message(tensors[i], dest, tag, options);
  }
  return static_cast<int>(n);
}

Tensor text_tensor(const std::string& text) {
  Tensor bytes({static_cast<std::int64_t>(text.size())}, DType::boolean);
  if (!text.empty()) std::memcpy(bytes.raw_data(), text.data(), text.size());
  return bytes;
}

std::string tensor_text(const Tensor& bytes) {
  const Tensor host = bytes.to(Device::cpu());
  return std::string(static_cast<const char*>(host.raw_data()), host.nbytes());
}

ReceivedTensors recv_tensors(Communicator& comm, int source, int tag, int microbatch, bool gradients,
                             const std::string& what, int& consumed) {
  MessageExpectation expect;
  expect.kind = OpKind::pipeline;
  expect.operation = "pipeline: receive " + what;
  ReceivedTensors got;
  std::uint32_t n = 1;
  for (std::uint32_t i = 0; i < n; ++i) {
    ++consumed;  // recv_message takes the message off the channel even when it then throws
    ReceivedMessage message = comm.recv_message(source, tag, expect);
    const comm_detail::MessageHeader& h = message.header;
    if (h.aux == kAbortMicrobatch) throw PipelineAbort{tensor_text(message.tensor)};
    TANDEM_CHECK(h.aux == microbatch && h.has_flag(kFlagBackward) == gradients, "pipeline: rank ", comm.rank(),
                 " expected ", what, " but received ", h.has_flag(kFlagBackward) ? "a gradient" : "an activation",
                 " of microbatch ", h.aux, " from rank ", source, ": the ranks run different schedules");
    if (i == 0) {
      n = h.list_size;
    } else {
      TANDEM_CHECK(h.list_index == i && h.list_size == n, "pipeline: rank ", comm.rank(), " expected tensor ", i + 1,
                   " of ", n, " of ", what, " but received ", h.describe());
    }
    got.takes_gradient.push_back(h.has_flag(kFlagRecordsGraph));
    got.tensors.push_back(std::move(message.tensor));
  }
  got.messages = static_cast<int>(n);
  return got;
}

void drop_message(Communicator& comm, int source, int tag) {
  MessageExpectation expect;
  expect.kind = OpKind::pipeline;
  expect.operation = "pipeline: drain after a failed step";
  comm.recv_message(source, tag, expect);
}

void send_abort(Communicator& comm, const std::string& failure, int dest, int tag) {
  const Tensor bytes = text_tensor(failure);
  MessageOptions options;
  options.kind = OpKind::pipeline;
  options.blocking = false;
  options.aux = kAbortMicrobatch;
  comm.send_message(bytes, dest, tag, options);
}

}  // namespace tandem::pipeline::detail
