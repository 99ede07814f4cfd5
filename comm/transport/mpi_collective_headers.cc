// The header exchange every collective of the MPI communicator starts with: each rank sends its
// header to every peer and checks every peer's in the same way, so every rank reaches the same
// verdict and a mismatch is an error everywhere rather than a hang somewhere. Small collectives
// carry their data in the headers; the data phase of the others ends in finish_collective.
#include <algorithm>
#include <climits>
#include <cstring>
#include <sstream>

#include "comm/transport/mpi_collective_util.h"
#include "comm/transport/mpi_communicator.h"
#include "comm/transport/mpi_env.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/ops.h"

namespace tandem {

using comm_detail::check_mpi;
using comm_detail::OpKind;
using namespace comm_detail::collective_util;  // NOLINT: this file's helpers

std::vector<Tensor> comm_detail::PieceList::to_vector() const {
  std::vector<Tensor> list;
  list.reserve(size_);
  for (std::size_t r = 0; r < size_; ++r) list.push_back((*this)[r]);
  return list;
}

void MpiCommunicator::check_root(int root, const char* operation) const {
  TANDEM_CHECK(root >= 0 && root < size_, operation, ": root ", root, " does not exist (communicator of size ", size_,
               ", this is rank ", rank_, ")");
}

void MpiCommunicator::check_one_kind(const std::vector<Tensor>& xs, const char* operation) const {
  if (!moves_device_tensors()) return;  // staged tensors may mix devices
  for (const Tensor& x : xs) {
    TANDEM_CHECK(x.device().is_cuda() == xs[0].device().is_cuda(), operation, ": rank ", rank_,
                 "'s tensors mix CPU and CUDA (", xs[0].description(), " and ", x.description(), "); the \"", name(),
                 "\" communicator moves CUDA tensors with NCCL and CPU tensors with MPI, so a list must be one kind");
  }
}

bool MpiCommunicator::on_device(const std::vector<Header>& all) const {
  if (!moves_device_tensors()) return false;
  for (const Header& h : all)
    if (h.has_flag(comm_detail::kFlagTyped)) return h.has_flag(comm_detail::kFlagOnDevice);
  return false;
}


bool MpiCommunicator::moves_on_device(const Tensor& x) const {
  return moves_device_tensors() && x.defined() && x.device().is_cuda();
}

Tensor MpiCommunicator::transport_copy(const Tensor& x) const {
  return moves_on_device(x) ? x.to(transport_device()) : Tensor();
}

MpiCommunicator::Header MpiCommunicator::collective_header(OpKind kind, int root, const Tensor* typed) {
  Header header;
  header.kind = kind;
  header.root = root;
  if (typed) {
    header.flags |= comm_detail::kFlagTyped;
    header.dtype = typed->dtype();
    header.shape = typed->shape();
    header.payload_bytes = typed->nbytes();
    if (typed->device().is_cuda()) header.flags |= comm_detail::kFlagOnDevice;
  }
  // The call-site check (communicator.h): the user's line travels with the header.
  if (check_collective_sites_enabled() && flight_call_ != nullptr && flight_call_->user_.known()) {
    header.site = flight_call_->user_.str();
    if (header.site.size() > comm_detail::kMaxSiteBytes) header.site.resize(comm_detail::kMaxSiteBytes);
  }
  return header;
}

void MpiCommunicator::check_usable() const {
  TANDEM_CHECK(broken_.empty(), "comm: this communicator can run no more collectives on rank ", rank_, ": ", broken_,
               "; create a new communicator (or end the job)");
}

bool MpiCommunicator::inlines(const Tensor& x) const {
  // Nothing here may depend on what the peers cannot see in this rank's header (the data's
  // device, on a communicator that does not move device tensors): ranks that pass the header
  // check must all take the same path.
  return inline_collectives_ && size_ > 1 && !moves_on_device(x) && x.nbytes() <= kInlineCollectiveBytes &&
         x.nbytes() * static_cast<std::size_t>(size_ - 1) <= kInlineCollectiveTotal;
}

std::int64_t MpiCommunicator::post_headers(const Header& mine, std::vector<Header>& all,
                                          std::vector<MPI_Request>& requests, KeepAlive& keep_alive,
                                          const InlineData* inline_data) {
  return post_headers([&](int) { return mine; }, all, requests, keep_alive, inline_data, &mine);
}

std::int64_t MpiCommunicator::post_headers(FunctionRef<Header(int)> header_for, std::vector<Header>& all,
                                          std::vector<MPI_Request>& requests, KeepAlive& keep_alive,
                                          const InlineData* inline_data, const Header* same_for_all) {
  check_usable();
  const std::int64_t sequence = collective_sequence_++;
  const bool abandoned_previous = collective_open_;
  collective_open_ = true;
  auto finish = [&](Header header) {
    header.sequence = sequence;
    header.tag = kCollectiveTag;
    if (const char* label = CommLabelScope::current()) header.label = label;
    if (abandoned_previous) header.flags |= comm_detail::kFlagAbandoned;
    return header;
  };
  // The headers go first: what follows (the flight record, this rank's own header, reaping old
  // sends) happens while they travel, off the peers' critical path. Their buffers are the last
  // call's when nothing else holds those any more (an orphaned send's owner does), so a small
  // collective allocates none once warm.
  std::shared_ptr<std::vector<std::vector<char>>> shared_buffers = std::move(spare_header_buffers_);
  if (!shared_buffers || shared_buffers.use_count() != 1)
    shared_buffers = std::make_shared<std::vector<std::vector<char>>>();
  shared_buffers->resize(static_cast<std::size_t>(size_));
  std::vector<std::vector<char>>& buffers = *shared_buffers;
  keep_alive.push_back(shared_buffers);
  spare_header_buffers_ = std::move(shared_buffers);
  // One header for every peer: finished once (its copy is this rank's own), not once per peer.
  Header own;
  if (same_for_all) own = finish(*same_for_all);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    Header for_peer;
    const Header& header = same_for_all ? own : (for_peer = finish(header_for(peer)));
    const bool carries = header.has_flag(comm_detail::kFlagInlinePayload);
    TANDEM_CHECK(!carries || inline_data, "comm: internal error: a header announces an inline payload that nobody gave");
    const Tensor* x = !carries ? nullptr : inline_data->per_peer ? &(*inline_data->per_peer)[peer] : inline_data->to_all;
    buffers[peer].clear();
    buffers[peer].reserve(comm_detail::encoded_header_size(header) + (x ? x->nbytes() : 0));
    comm_detail::encode_header(header, buffers[peer]);
    if (x) {
      const char* bytes = static_cast<const char*>(x->raw_data());
      buffers[peer].insert(buffers[peer].end(), bytes, bytes + x->nbytes());
    }
    requests.emplace_back();
    check_mpi(MPI_Isend(buffers[peer].data(), static_cast<int>(buffers[peer].size()), MPI_BYTE, peer, kCollectiveTag,
                        comm_, &requests.back()),
              "MPI_Isend");
  }
  all.clear();
  all.resize(static_cast<std::size_t>(size_));  // (built in place: no temporary copied size_ times)
  all[rank_] = same_for_all ? std::move(own) : finish(header_for(rank_));
  {
    const Header& h = all[rank_];
    trace::FlightEntry entry;
    entry.op = comm_detail::op_kind_name(h.kind);
    entry.collective = true;
    entry.peer = h.root;
    entry.sequence = sequence;
    if (h.has_flag(comm_detail::kFlagTyped)) entry.dtype = dtype_name(h.dtype);
    collective_entry_ = flight_record(std::move(entry), true, h.has_flag(comm_detail::kFlagTyped) ? &h.shape : nullptr);
  }
  reap_orphans();
  return sequence;
}

bool MpiCommunicator::take_header(int peer, const WaitContext* blocking, Header& out, std::vector<char>* message,
                                  std::size_t* offset) {
  auto early = early_collective_headers_.find(peer);
  if (early != early_collective_headers_.end() && !early->second.empty()) {
    ArrivedHeader& arrived = early->second.front();
    out = std::move(arrived.header);
    if (message) *message = std::move(arrived.message);
    if (offset) *offset = arrived.payload_at;
    early->second.pop_front();
    return true;
  }
  // The message lands in the last one's room, unless its payload is wanted (message).
  std::vector<char> bytes = std::move(spare_received_);
  if (blocking) {
    receive_message_bytes(peer, kCollectiveTag, *blocking, bytes);
  } else if (!try_receive(peer, kCollectiveTag, bytes)) {
    spare_received_ = std::move(bytes);
    return false;
  }
  comm_detail::DecodedMessage decoded = comm_detail::decode_header(bytes.data(), bytes.size(), peer);
  out = std::move(decoded.header);
  if (offset) *offset = decoded.header_bytes;
  if (message) *message = std::move(bytes);
  else spare_received_ = std::move(bytes);
  return true;
}

std::vector<MpiCommunicator::Header> MpiCommunicator::exchange_headers(const Header& mine, bool same_shape,
                                                                       InlineData* inline_data) {
  return exchange_headers([&](int) { return mine; }, same_shape, inline_data, &mine);
}

std::vector<MpiCommunicator::Header> MpiCommunicator::exchange_headers(FunctionRef<Header(int)> header_for,
                                                                       bool same_shape, InlineData* inline_data,
                                                                       const Header* same_for_all) {
  // Started collectives whose headers are still on their way come first: their headers were
  // sent before this one's.
  complete_started_headers();
  std::vector<Header> all;
  // The header sends' requests and owners: the last call's vectors (their capacity), when no call
  // nested in this one took them first.
  std::vector<MPI_Request> requests = std::move(spare_requests_);
  KeepAlive keep_alive = std::move(spare_keep_alive_);
  requests.clear();
  keep_alive.clear();
  post_headers(header_for, all, requests, keep_alive, inline_data, same_for_all);
  if (inline_data) {
    inline_data->arrived = std::move(spare_arrived_);
    inline_data->arrived.resize(static_cast<std::size_t>(size_));  // (empty: the last list was cleared)
    inline_data->spare = &spare_received_;
    inline_data->spare_list = &spare_arrived_;
  }
  const Header& own = all[rank_];
  const auto operation = [&own] { return own.describe(); };
  try {
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      const WaitContext context{comm_detail::LazyText(operation), peer, true};
      if (inline_data) take_header(peer, &context, all[peer], &inline_data->arrived[peer].message,
                                     &inline_data->arrived[peer].offset);
      else take_header(peer, &context, all[peer]);
    }
  } catch (...) {
    // A peer may take this rank's headers long after it gave up (a timeout here is not one
    // there): MPI may still be reading their buffers.
    orphans_.push_back(Orphan{requests, keep_alive});
    throw;
  }
  wait_all_keeping(requests, WaitContext{comm_detail::LazyText(operation), rank_ == 0 ? 1 % size_ : 0, true},
                   keep_alive);
  // The sends are done: their buffers may serve the next call (and the orphans' copies of these
  // vectors, on a failure above, keep what MPI may still read).
  keep_alive.clear();
  spare_keep_alive_ = std::move(keep_alive);
  spare_requests_ = std::move(requests);
  apply_verdict(all, same_shape);
  trace::FlightRecorder::instance().set_state(collective_entry_, trace::FlightState::matched);
  return all;
}

void MpiCommunicator::apply_verdict(const std::vector<Header>& all, bool same_shape) {
  try {
    check_headers(all, same_shape);
  } catch (const Error&) {
    discard_eager_data(all);
    throw;
  }
}

void MpiCommunicator::discard_eager_data(const std::vector<Header>& all) {
  auto sink = std::make_shared<std::vector<std::vector<char>>>();
  sink->reserve(static_cast<std::size_t>(size_));
  std::vector<MPI_Request> requests;
  for (int peer = 0; peer < size_; ++peer) {
    const Header& h = all[peer];
    if (peer == rank_ || !h.has_data_flag(comm_detail::kDataEager) || h.has_data_flag(comm_detail::kDataInMemory) ||
        h.payload_bytes == 0 ||
        h.payload_bytes > static_cast<std::uint64_t>(INT_MAX) || h.has_flag(comm_detail::kFlagInlinePayload))
      continue;  // (an inline piece came inside the header; one left in memory was never sent)
    sink->emplace_back(h.payload_bytes);
    requests.emplace_back();
    check_mpi(MPI_Irecv(sink->back().data(), static_cast<int>(h.payload_bytes), MPI_BYTE, peer, kEagerDataTag, comm_,
                        &requests.back()),
              "MPI_Irecv (a piece sent before the headers disagreed)");
  }
  // Data left in a peer's memory needs no draining. But a peer still in a collective this rank
  // gave up (its header is of an earlier one) reads this rank's data and then waits for word
  // that this rank has read its own: it gets that word (nothing was read, and its result does
  // not depend on it), and completes, as where its data went in an MPI message drained above.
  auto words = std::make_shared<std::vector<ReadDone>>(static_cast<std::size_t>(size_));
  for (int peer = 0; peer < size_; ++peer) {
    const Header& h = all[peer];
    if (peer == rank_ || !h.has_data_flag(comm_detail::kDataInMemory) || h.sequence >= all[rank_].sequence) continue;
    ReadDone& word = (*words)[peer];
    word.sequence = h.sequence;
    word.communicator = book_->id();
    requests.emplace_back();
    check_mpi(MPI_Isend(&word, sizeof(ReadDone), MPI_BYTE, peer, kReadDoneTag, comm_, &requests.back()),
              "MPI_Isend (read done, for a collective this rank gave up)");
  }
  if (requests.empty()) return;
  try {
    wait_all(requests, WaitContext{"discarding the pieces sent with headers that disagree", -1, true},
             KeepAlive{sink, words});
  } catch (const Error&) {
    // The peer failed or ended: the disagreement being raised is the error that matters.
  }
}

void MpiCommunicator::check_headers(const std::vector<Header>& all, bool same_shape) const {
  // The verdict: every rank sees every header and applies the same rules.
  const Header& first = all[0];
  const Header* typed = nullptr;
  std::string reason;
  for (int r = 0; r < size_ && reason.empty(); ++r) {
    const Header& h = all[r];
    if (h.kind != first.kind) reason = "they are in different operations";
    else if (h.sequence != first.sequence) reason = "they are at different collectives";
    else if (h.site != first.site)
      reason = "they called it from different lines: has a rank skipped a collective? (TANDEM_CHECK_COLLECTIVE_SITES)";
    else if (h.root != first.root) reason = "they name different roots";
    else if (h.reduce_op != first.reduce_op) reason = "they ask for different reductions";
    else if (h.digest != first.digest) reason = "their lists of tensors differ";
    else if (h.has_flag(comm_detail::kFlagTyped)) {
      if (!typed) typed = &h;
      else if (h.dtype != typed->dtype) reason = "their dtypes differ";
      else if (same_shape && h.shape != typed->shape) reason = "their shapes differ";
      else if (moves_device_tensors() &&
               h.has_flag(comm_detail::kFlagOnDevice) != typed->has_flag(comm_detail::kFlagOnDevice))
        reason = detail::concat("some pass CUDA tensors and others CPU tensors, which \"", name(),
                                "\" moves with NCCL and with MPI respectively");
    }
  }
  if (!reason.empty()) {
    std::ostringstream out;
    out << "comm: the ranks disagree at a collective (" << reason << "):";
    for (int r = 0; r < size_; ++r) out << (r ? ";" : "") << " rank " << r << " is in " << all[r].describe();
    TANDEM_FAIL(out.str());
  }
}

void MpiCommunicator::finish_collective(std::vector<MPI_Request>& requests, const char* operation,
                                        KeepAlive keep_alive, bool closes, std::int64_t sequence) {
  // The data phase waits like everything else: a peer that gave this collective up (after its
  // own wait failed) or finished is an error here, not a hang.
  if (sequence < 0) sequence = collective_sequence_ - 1;
  try {
    const comm_detail::LazyText what([operation, sequence] { return detail::concat(operation, " (collective #", sequence, ")"); });
    wait_all(requests, WaitContext{what, -1, true, sequence}, std::move(keep_alive));
  } catch (const Error& e) {
    broken_ = detail::concat(operation, " (collective #", sequence, ") failed in flight (", e.what(), ")");
    throw;
  }
  if (closes) collective_open_ = false;
}

}  // namespace tandem
