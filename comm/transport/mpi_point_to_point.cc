// Point-to-point traffic of the MPI communicator: tensors and objects, with headers.
#include <algorithm>
#include <climits>
#include <cstring>

#include "comm/transport/mpi_communicator.h"
#include "comm/transport/mpi_env.h"
#include "core/error.h"

namespace tandem {

using comm_detail::check_mpi;
using comm_detail::OpKind;

namespace {

// MPI counts are ints: larger payloads travel in pieces of this many bytes.
constexpr std::size_t kChunkBytes = std::size_t(1) << 30;

}  // namespace

void MpiCommunicator::check_peer(int peer, int tag, const char* operation) const {
  TANDEM_CHECK(peer >= 0 && peer < size_, operation, ": rank ", peer, " does not exist (communicator of size ", size_,
               ", this is rank ", rank_, ")");
  TANDEM_CHECK(peer != rank_, operation, ": rank ", rank_,
               " cannot communicate with itself (that would wait forever); pass the value directly");
  TANDEM_CHECK(tag >= 0 && tag <= kMaxUserTag, operation, ": tag ", tag, " on rank ", rank_, " is outside [0, ",
               kMaxUserTag, "]");
}

void MpiCommunicator::check_defined(const Tensor& x, const char* operation) const {
  TANDEM_CHECK(x.defined(), operation, ": undefined tensor on rank ", rank_);
}

Device MpiCommunicator::landing(const Header& header) const {
  return header.has_flag(comm_detail::kFlagOnDevice) ? device() : Device::cpu();
}

void MpiCommunicator::send_bytes(Header header, const void* data, std::shared_ptr<const void> owner, int dest, int tag,
                                 const char* operation, bool blocking) {
  reap_orphans();
  header.tag = tag;
  header.sequence = book_->record_send(dest, tag, header);
  trace::FlightEntry entry;
  entry.op = operation;
  entry.peer = dest;
  entry.tag = tag;
  entry.sequence = header.sequence;
  const bool tensor = header.kind != OpKind::object_send;
  if (tensor) entry.dtype = dtype_name(header.dtype);
  const bool posted_only = !blocking && !header.has_flag(comm_detail::kFlagDevicePayload);
  const std::int64_t flight_entry = flight_record(std::move(entry), !posted_only, tensor ? &header.shape : nullptr);
  // The message's buffer: the last send's when nothing else (a pending or orphaned send) holds it.
  std::shared_ptr<std::vector<char>> buffer = std::move(spare_send_buffer_);
  if (!buffer || buffer.use_count() != 1) buffer = std::make_shared<std::vector<char>>();
  spare_send_buffer_ = buffer;
  std::vector<char>& message = *buffer;
  message.clear();
  const std::size_t size = header.payload_bytes;
  // A device payload follows on the device transport, after this header; see send_message.
  const bool device_payload = header.has_flag(comm_detail::kFlagDevicePayload);
  const bool inline_payload = !device_payload && size <= kInlineBytes;
  if (inline_payload) header.flags |= comm_detail::kFlagInlinePayload;
  message.reserve(comm_detail::encoded_header_size(header) + (inline_payload ? size : 0));
  comm_detail::encode_header(header, message);
  if (inline_payload && size > 0)
    message.insert(message.end(), static_cast<const char*>(data), static_cast<const char*>(data) + size);

  std::vector<MPI_Request> requests = std::move(spare_send_requests_);
  requests.assign(1, MPI_REQUEST_NULL);
  if (device_payload) {
    check_mpi(MPI_Issend(message.data(), static_cast<int>(message.size()), MPI_BYTE, dest, tag, comm_, &requests[0]),
              "MPI_Issend");
  } else {
    check_mpi(MPI_Isend(message.data(), static_cast<int>(message.size()), MPI_BYTE, dest, tag, comm_, &requests[0]),
              "MPI_Isend");
  }
  if (!inline_payload && !device_payload) {
    // Straight from the tensor's memory, in pieces MPI can count.
    const char* bytes = static_cast<const char*>(data);
    for (std::size_t offset = 0; offset < size; offset += kChunkBytes) {
      requests.emplace_back();
      const int count = static_cast<int>(std::min(kChunkBytes, size - offset));
      check_mpi(MPI_Isend(bytes + offset, count, MPI_BYTE, dest, tag, comm_, &requests.back()), "MPI_Isend");
    }
  }
  if (!blocking && !device_payload) {
    pending_sends_.push_back(
        PendingSend{std::move(requests), KeepAlive{buffer, inline_payload ? nullptr : owner}, header, dest, flight_entry});
    reap_pending_sends();
    return;
  }
  // A failed wait leaves the payload in flight: its memory stays alive until it completes (the
  // orphan holds it). A caller that changes the tensor after a failed send may see the change
  // delivered.
  KeepAlive keep_alive = std::move(spare_send_keep_alive_);
  keep_alive.assign({buffer, inline_payload ? nullptr : owner});
  wait_all_keeping(requests, WaitContext{comm_detail::LazyText([&] { return sent_text(header, dest); }), dest, false},
                   keep_alive);
  keep_alive.clear();
  spare_send_keep_alive_ = std::move(keep_alive);
  spare_send_requests_ = std::move(requests);
}

std::string MpiCommunicator::sent_text(const Header& header, int dest) {
  // Built only when read (a wait that is diagnosed or fails): made at every send, it took a large
  // share of a small send's time (docs/performance.md, "What a small message costs").
  return detail::concat(header.describe(), " to rank ", dest);
}

void MpiCommunicator::reap_pending_sends() {
  while (!pending_sends_.empty()) {
    PendingSend& front = pending_sends_.front();
    int done = 0;
    check_mpi(MPI_Testall(static_cast<int>(front.requests.size()), front.requests.data(), &done, MPI_STATUSES_IGNORE),
              "MPI_Testall");
    if (!done) return;
    trace::FlightRecorder::instance().set_state(front.flight_entry, trace::FlightState::completed);
    pending_sends_.pop_front();
  }
}

void MpiCommunicator::wait_sends(CallSite site) {
  FlightCall flight(*this, site);
  while (!pending_sends_.empty()) {
    PendingSend send = std::move(pending_sends_.front());
    pending_sends_.pop_front();
    // A failed wait sets the send aside with its memory (orphans), as a failed blocking send.
    try {
      wait_all(send.requests,
               WaitContext{comm_detail::LazyText([&send] { return "wait_sends: " + sent_text(send.header, send.dest); }),
                           send.dest, false},
               std::move(send.keep_alive));
    } catch (const Error& e) {
      trace::FlightRecorder::instance().set_state(send.flight_entry, trace::FlightState::failed, e.what());
      throw;
    }
    trace::FlightRecorder::instance().set_state(send.flight_entry, trace::FlightState::completed);
  }
}

std::size_t MpiCommunicator::pending_sends() {
  reap_pending_sends();
  return pending_sends_.size();
}

void MpiCommunicator::receive_payload(const Incoming& incoming, void* dst, std::shared_ptr<const void> owner,
                                      int source, int tag, const WaitContext& context) {
  const Header& header = incoming.message.header;
  const std::size_t size = header.payload_bytes;
  if (header.has_flag(comm_detail::kFlagInlinePayload)) {
    if (size > 0) std::memcpy(dst, incoming.bytes.data() + incoming.message.header_bytes, size);
    return;
  }
  std::vector<MPI_Request> requests;
  char* bytes = static_cast<char*>(dst);
  for (std::size_t offset = 0; offset < size; offset += kChunkBytes) {
    requests.emplace_back();
    const int count = static_cast<int>(std::min(kChunkBytes, size - offset));
    check_mpi(MPI_Irecv(bytes + offset, count, MPI_BYTE, source, tag, comm_, &requests.back()), "MPI_Irecv");
  }
  WaitContext payload_context = context;
  payload_context.payload = true;
  wait_all(requests, payload_context, {std::move(owner)});
}

void MpiCommunicator::send_message(const Tensor& x, int dest, int tag, const MessageOptions& options, CallSite site) {
  FlightCall flight(*this, site);
  const char* operation = options.operation;
  check_peer(dest, tag, operation);
  check_defined(x, operation);
  Header header;
  header.kind = options.kind;
  header.flags = options.flags;
  header.label = options.label;
  header.layer_flags = options.layer_flags;
  TANDEM_CHECK(options.kind != OpKind::layer_message || !options.label.empty(), "comm: ", operation, " on rank ",
               rank_, " to rank ", dest, " (tag ", tag, "): a layer's message needs a label");
  header.dtype = x.dtype();
  header.shape = x.shape();
  header.payload_bytes = x.nbytes();
  header.list_index = options.list_index;
  header.list_size = options.list_size;
  header.aux = options.aux;
  if (x.device().is_cuda()) header.flags |= comm_detail::kFlagOnDevice;
  if (moves_device_tensors() && x.device().is_cuda() && x.nbytes() >= kDevicePayloadBytes) {
    // The header goes synchronously (MPI_Issend): once it returns, the receiver has matched it
    // and queues its half of the transfer before any other device communication, so the
    // device halves are queued in the same order on both ranks and cannot wait on each other.
    // A receiver that never matches it makes this wait fail (or time out) here, on the host,
    // before anything is queued on the device. (Sent at once instead, the device half would
    // block the GPU until the receiver queued its own, and a ring of sends would hang the GPUs.)
    // A receiver that matches the header only after that wait failed waits on its GPU for a
    // payload that never comes: as with most errors here, the job should end.
    header.flags |= comm_detail::kFlagDevicePayload;
    const Tensor payload = x.to(transport_device());
    send_bytes(std::move(header), nullptr, nullptr, dest, tag, operation);
    device_send(payload, dest);
    return;
  }
  // MPI reads host memory: a CUDA tensor is copied there first (waiting for its kernels).
  if (x.device().is_cpu()) {
    send_bytes(std::move(header), x.raw_data(), x.storage(), dest, tag, operation, options.blocking);
  } else {
    const Tensor host = comm_detail::host_for_mpi(x);
    send_bytes(std::move(header), host.raw_data(), host.storage(), dest, tag, operation, options.blocking);
  }
}

ReceivedMessage MpiCommunicator::recv_message(int source, int tag, const MessageExpectation& expect, CallSite site) {
  FlightCall flight(*this, site);
  const char* operation = expect.operation.empty() ? "recv" : expect.operation.c_str();
  check_peer(source, tag, operation);
  reap_orphans();
  const WaitContext context{
      comm_detail::LazyText([&] { return detail::concat(operation, " (from rank ", source, ", tag ", tag, ")"); }),
      source, false};
  trace::FlightEntry entry;
  entry.op = operation;
  entry.receive = true;
  entry.peer = source;
  entry.tag = tag;
  entry.sequence = book_->expected(source, tag);  // the message it waits for
  const std::int64_t flight_entry = flight_record(std::move(entry));
  Incoming incoming;
  incoming.bytes = std::move(spare_received_);
  receive_message_bytes(source, tag, context, incoming.bytes);
  incoming.message = comm_detail::decode_header(incoming.bytes.data(), incoming.bytes.size(), source);
  const Header& header = incoming.message.header;
  trace::FlightRecorder::instance().describe(flight_entry, header.sequence,
                                             header.kind == OpKind::object_send ? "" : dtype_name(header.dtype),
                                             header.kind == OpKind::object_send ? Shape{} : header.shape);
  trace::FlightRecorder::instance().set_state(flight_entry, trace::FlightState::matched);

  std::int64_t& expected_sequence = book_->expected(source, tag);
  std::string problem;
  if (header.kind != expect.kind) {
    problem = detail::concat("it expects ",
                             expect.kind == OpKind::layer_message && !expect.expects.empty()
                                 ? expect.expects
                                 : detail::concat("a message from ", comm_detail::op_kind_name(expect.kind)));
  } else if (header.sequence != expected_sequence) {
    problem = detail::concat("it expects message #", expected_sequence, " on this tag");
  } else if (expect.check_tensor && (header.dtype != expect.dtype || header.shape != expect.shape)) {
    problem = detail::concat("it expects ", dtype_name(expect.dtype), shape_str(expect.shape));
  } else if (expect.check_list && header.list_index != expect.list_index) {
    problem = detail::concat("it expects tensor ", expect.list_index + 1, " of a list");
  }
  expected_sequence = header.sequence + 1;

  // The payload is taken even when the message is not the one expected, so that the channel
  // stays in step (and a device sender is not left waiting).
  ReceivedMessage received;
  if (header.kind == OpKind::object_send) {
    // Objects arrive as bytes; recv_obj reads them out.
    received.tensor = Tensor({static_cast<std::int64_t>(header.payload_bytes)}, DType::boolean);
    receive_payload(incoming, received.tensor.raw_data(), received.tensor.storage(), source, tag, context);
  } else if (header.has_flag(comm_detail::kFlagDevicePayload)) {
    TANDEM_CHECK(moves_device_tensors(), "comm: ", operation, " on rank ", rank_, " received ", header.describe(),
                 " from rank ", source, " with its payload on a device transport, which the \"", name(),
                 "\" communicator does not have (are the ranks using different communicators?)");
    received.tensor = Tensor(header.shape, header.dtype, transport_device());
    device_recv(received.tensor, source);
  } else {
    received.tensor = comm_detail::host_buffer(header.shape, header.dtype, landing(header));
    receive_payload(incoming, received.tensor.raw_data(), received.tensor.storage(), source, tag, context);
  }
  if (!problem.empty()) {
    TANDEM_FAIL("comm: ", operation, " on rank ", rank_, " received ", header.describe(), " from rank ", source,
                ", but ", problem, " (the two ranks' programs disagree)");
  }
  if (header.kind != OpKind::object_send && received.tensor.device() != landing(header))
    received.tensor = received.tensor.to(landing(header));
  received.header = std::move(incoming.message.header);  // its last use: `header` refers to it
  spare_received_ = std::move(incoming.bytes);
  return received;
}

void MpiCommunicator::send_obj(const std::string& bytes, int dest, int tag, CallSite site) {
  FlightCall flight(*this, site);
  check_peer(dest, tag, "send_obj");
  Header header;
  header.kind = OpKind::object_send;
  header.dtype = DType::boolean;
  header.payload_bytes = bytes.size();
  auto copy = std::make_shared<const std::string>(bytes);  // outlives a failed send
  send_bytes(header, copy->data(), copy, dest, tag, "send_obj");
}

std::string MpiCommunicator::recv_obj(int source, int tag, CallSite site) {
  FlightCall flight(*this, site);
  MessageExpectation expect;
  expect.kind = OpKind::object_send;
  expect.operation = "recv_obj";
  const Tensor bytes = recv_message(source, tag, expect, site).tensor;
  if (bytes.numel() == 0) return std::string();
  return std::string(static_cast<const char*>(bytes.raw_data()), static_cast<std::size_t>(bytes.numel()));
}

}  // namespace tandem
