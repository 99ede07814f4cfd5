#include "comm/protocol/activations_and_gradients.h"

#include <cstring>

#include "core/error.h"

namespace tandem::protocol {

namespace {

using comm_detail::kFlagList;
using comm_detail::MessageHeader;
using comm_detail::OpKind;

constexpr const char* kActivationLabel = "activation";
constexpr const char* kGradientLabel = "gradient";
constexpr const char* kAbortLabel = "abort";

MessageOptions options_for(const Channel& to, const char* label, std::uint8_t layer_flags, const char* operation) {
  MessageOptions options;
  options.kind = OpKind::layer_message;
  options.label = label;
  options.layer_flags = layer_flags;
  options.blocking = to.blocking;
  options.aux = to.number;
  options.operation = operation;
  return options;
}

MessageExpectation expectation(const std::string& operation, bool gradients) {
  MessageExpectation expect;
  expect.kind = OpKind::layer_message;
  expect.operation = operation;
  expect.expects = gradients ? "a gradient" : "an activation";
  return expect;
}

std::string number_text(std::int64_t number) {
  return number < 0 ? std::string() : detail::concat(" of microbatch ", number);
}

// What arrived against what the receiver expects: the direction and the number.
void check_meaning(const Communicator& comm, const MessageHeader& h, const Channel& from, bool gradients,
                   const std::string& what) {
  if (h.layer_flags & kAbort) return;
  const bool gradient = (h.layer_flags & kGradient) != 0;
  TANDEM_CHECK(gradient == gradients && h.aux == from.number, "comm: rank ", comm.rank(), " expected ", what,
               " from rank ", from.peer, " (tag ", from.tag, ") but received ", gradient ? "a gradient" : "an activation",
               number_text(h.aux), " (", h.describe(), "): the two ranks' programs disagree",
               from.number >= 0 ? " (they run different schedules)" : "");
}

}  // namespace

void send_activations(Communicator& comm, const std::vector<Tensor>& xs, const std::vector<bool>& takes_gradient,
                      const Channel& to, bool as_list) {
  TANDEM_CHECK(takes_gradient.size() == xs.size(), "comm: send_activations: ", xs.size(), " tensors but ",
               takes_gradient.size(), " takes_gradient flags");
  const auto n = static_cast<std::uint32_t>(xs.size());
  for (std::uint32_t i = 0; i < n; ++i) {
    MessageOptions options = options_for(to, kActivationLabel, takes_gradient[i] ? kTakesGradient : 0, "send");
    options.flags = (as_list || n > 1) ? kFlagList : 0;
    options.list_index = i;
    options.list_size = n;
    comm.send_message(xs[i], to.peer, to.tag, options);
  }
}

void send_gradient(Communicator& comm, const Tensor& grad, std::uint32_t index, std::uint32_t count, bool list,
                   const Channel& to) {
  MessageOptions options = options_for(to, kGradientLabel, kGradient, "recv backward");
  options.flags = list ? kFlagList : 0;
  options.list_index = index;
  options.list_size = count;
  comm.send_message(grad, to.peer, to.tag, options);
}

void send_gradients(Communicator& comm, const std::vector<Tensor>& grads, const Channel& to) {
  const auto n = static_cast<std::uint32_t>(grads.size());
  for (std::uint32_t i = 0; i < n; ++i) send_gradient(comm, grads[i], i, n, true, to);
}

void send_abort(Communicator& comm, const std::string& failure, const Channel& to) {
  comm.send_message(text_tensor(failure), to.peer, to.tag, options_for(to, kAbortLabel, kAbort, "send"));
}

Received recv_list(Communicator& comm, const Channel& from, bool gradients, const char* operation,
                   const std::string& what, int* consumed) {
  const MessageExpectation expect = expectation(operation, gradients);
  Received got;
  std::uint32_t n = 1;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (consumed) ++*consumed;  // recv_message takes the message off the channel even when it then throws
    ReceivedMessage message = comm.recv_message(from.peer, from.tag, expect);
    const MessageHeader& h = message.header;
    if (h.layer_flags & kAbort) throw Aborted{tensor_text(message.tensor)};
    check_meaning(comm, h, from, gradients, what);
    if (i == 0) {
      n = h.list_size;
      got.list = h.has_flag(kFlagList);
    } else {
      TANDEM_CHECK(h.list_index == i && h.list_size == n, "comm: rank ", comm.rank(), " expected tensor ", i + 1,
                   " of ", n, " of ", what, " from rank ", from.peer, " but received ", h.describe());
    }
    got.takes_gradient.push_back((h.layer_flags & kTakesGradient) != 0);
    got.tensors.push_back(std::move(message.tensor));
  }
  return got;
}

Tensor recv_gradient(Communicator& comm, const Channel& from, std::uint32_t index, std::uint32_t count, DType dtype,
                     const Shape& shape) {
  const std::string what =
      detail::concat("the gradient of ", dtype_name(dtype), shape_str(shape),
                     count > 1 ? detail::concat(", tensor ", index + 1, " of ", count) : std::string());
  MessageExpectation expect = expectation(detail::concat("send backward (", what, ")"), true);
  expect.check_tensor = true;
  expect.dtype = dtype;
  expect.shape = shape;
  expect.check_list = true;
  expect.list_index = index;
  ReceivedMessage message = comm.recv_message(from.peer, from.tag, expect);
  if (message.header.layer_flags & kAbort) throw Aborted{tensor_text(message.tensor)};
  check_meaning(comm, message.header, from, true, what);
  return std::move(message.tensor);
}

void drop_message(Communicator& comm, int source, int tag) {
  MessageExpectation expect;
  expect.kind = OpKind::layer_message;
  expect.operation = "drain after a failed step";
  comm.recv_message(source, tag, expect);
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

}  // namespace tandem::protocol
