// Collectives of the MPI communicator: a header exchange that every rank checks in the same
// way (so every rank reaches the same verdict, and a mismatch is an error everywhere rather
// than a hang somewhere), then the MPI collective on the tensors' bytes.
#include <algorithm>
#include <climits>
#include <cstring>
#include <sstream>

#include "comm/transport/mpi_communicator.h"
#include "comm/transport/mpi_env.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/ops.h"

namespace tandem {

using comm_detail::check_mpi;
using comm_detail::OpKind;

namespace {

constexpr std::size_t kChunkBytes = std::size_t(1) << 30;

MPI_Datatype mpi_type(DType dtype, const char* operation) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::boolean: break;
  }
  TANDEM_FAIL(operation, ": cannot sum ", dtype_name(dtype), " tensors (f32, f64, i32 and i64 can be)");
}

int checked_int(std::size_t value, const char* operation) {
  TANDEM_CHECK(value <= static_cast<std::size_t>(INT_MAX), operation, ": ", value,
               " bytes in one collective exceed what the \"naive\" communicator's MPI calls can count (2 GiB)");
  return static_cast<int>(value);
}

// Views of a flat buffer: one tensor per shape, consecutive.
std::vector<Tensor> split_flat(const Tensor& flat, const std::vector<Shape>& shapes) {
  std::vector<Tensor> pieces;
  pieces.reserve(shapes.size());
  std::int64_t begin = 0;
  for (const Shape& shape : shapes) {
    const std::int64_t n = shape_numel(shape);
    pieces.push_back(flat.slice_flat(begin, shape));
    begin += n;
  }
  return pieces;
}

// t on `device`: t itself, moved (no copy of its shape), when it lies there already.
Tensor moved_to(Tensor t, const Device& device) {
  if (t.device() == device) return t;  // (a conditional expression would copy it)
  return t.to(device);
}

// The same, the shapes moved into the views (no copy of each).
std::vector<Tensor> split_flat(const Tensor& flat, std::vector<Shape>&& shapes) {
  std::vector<Tensor> pieces;
  pieces.reserve(shapes.size());
  std::int64_t begin = 0;
  for (Shape& shape : shapes) {
    const std::int64_t n = shape_numel(shape);
    pieces.push_back(flat.slice_flat(begin, std::move(shape)));
    begin += n;
  }
  return pieces;
}

// The pieces as one buffer, in order: a view when they already lie back to back in one
// storage (slices of one tensor, as split produces), else a packed copy.
struct Packed {
  const void* data = nullptr;
  std::shared_ptr<const void> owner;
};

// The tensors on the host (copies of those elsewhere), for MPI.
std::vector<Tensor> on_host(const std::vector<Tensor>& xs) {
  std::vector<Tensor> hosts;
  hosts.reserve(xs.size());
  for (const Tensor& x : xs) hosts.push_back(comm_detail::host_for_mpi(x));
  return hosts;
}

// An exchange's pieces as they would be on the host, and there already (the same list, nothing
// copied) when every piece is on the CPU; else copies in `storage`.
comm_detail::PieceList on_host(const comm_detail::PieceList& xs, std::vector<Tensor>& storage) {
  bool all_cpu = true;
  for (std::size_t r = 0; r < xs.size() && all_cpu; ++r) all_cpu = xs[r].device().is_cpu();
  if (all_cpu) return xs;
  storage = on_host(xs.to_vector());
  return storage;
}

// A set of ranks: bits in place up to 64 ranks (a small exchange allocates nothing for it).
class RankSet {
 public:
  explicit RankSet(int size) {
    if (size > 64) more_.assign(static_cast<std::size_t>(size), false);
  }
  bool has(int rank) const { return more_.empty() ? (bits_ >> rank) & 1 : more_[static_cast<std::size_t>(rank)]; }
  void add(int rank) {
    if (more_.empty()) bits_ |= std::uint64_t(1) << rank;
    else more_[static_cast<std::size_t>(rank)] = true;
  }

 private:
  std::uint64_t bits_ = 0;
  std::vector<bool> more_;
};

// An exchange's pieces as views of `flat`, each with the shape of its header (moved out of it).
std::vector<Tensor> split_flat(const Tensor& flat, std::vector<comm_detail::MessageHeader>&& headers) {
  std::vector<Tensor> pieces;
  pieces.reserve(headers.size());
  std::int64_t begin = 0;
  for (comm_detail::MessageHeader& header : headers) {
    const std::int64_t n = shape_numel(header.shape);
    pieces.push_back(flat.slice_flat(begin, std::move(header.shape)));
    begin += n;
  }
  return pieces;
}

// The elements of an exchange's pieces for this rank, all together.
std::int64_t pieces_numel(const std::vector<comm_detail::MessageHeader>& all) {
  std::int64_t numel = 0;
  for (const comm_detail::MessageHeader& header : all) numel += shape_numel(header.shape);
  return numel;
}

Packed pack(const std::vector<Tensor>& pieces, DType dtype) {
  const char* next = nullptr;
  const Storage* storage = nullptr;
  bool consecutive = true;
  for (const Tensor& piece : pieces) {
    if (piece.nbytes() == 0) continue;
    const char* begin = static_cast<const char*>(piece.raw_data());
    if (storage && (piece.storage().get() != storage || begin != next)) consecutive = false;
    if (!storage) storage = piece.storage().get();
    next = begin + piece.nbytes();
  }
  if (consecutive) {
    for (const Tensor& piece : pieces)
      if (piece.nbytes() > 0) return Packed{piece.raw_data(), piece.storage()};
    return Packed{};
  }
  std::int64_t total = 0;
  for (const Tensor& piece : pieces) total += piece.numel();
  Tensor flat({total}, dtype);
  char* out = static_cast<char*>(flat.raw_data());
  for (const Tensor& piece : pieces) {
    if (piece.nbytes() > 0) std::memcpy(out, piece.raw_data(), piece.nbytes());
    out += piece.nbytes();
  }
  return Packed{flat.raw_data(), flat.storage()};
}

void divide(Tensor& y, int size) {
  if (y.dtype() == DType::f32) {
    float* p = y.data<float>();
    const float scale = 1.0f / static_cast<float>(size);
    for (std::int64_t i = 0; i < y.numel(); ++i) p[i] *= scale;
  } else {
    double* p = y.data<double>();
    for (std::int64_t i = 0; i < y.numel(); ++i) p[i] /= size;
  }
}

// Whether every header carries its sender's tensor (kFlagInlinePayload): then the collective's
// data has all arrived with the headers, and every rank, seeing the same headers, skips the
// data phase alike.
bool all_inline(const std::vector<comm_detail::MessageHeader>& all) {
  for (const comm_detail::MessageHeader& header : all)
    if (!header.has_flag(comm_detail::kFlagInlinePayload)) return false;
  return true;
}

template <typename T>
void add_elements(char* into, const char* from, std::int64_t n) {
  // from lies inside a received message, not necessarily aligned for T.
  for (std::int64_t i = 0; i < n; ++i) {
    T a, b;
    std::memcpy(&a, into + i * sizeof(T), sizeof(T));
    std::memcpy(&b, from + i * sizeof(T), sizeof(T));
    a += b;
    std::memcpy(into + i * sizeof(T), &a, sizeof(T));
  }
}

// into += from, elementwise (the dtypes MPI sums: see mpi_type).
void add_into(void* into, const void* from, std::int64_t n, DType dtype) {
  char* out = static_cast<char*>(into);
  const char* in = static_cast<const char*>(from);
  switch (dtype) {
    case DType::f32: return add_elements<float>(out, in, n);
    case DType::f64: return add_elements<double>(out, in, n);
    case DType::i32: return add_elements<std::int32_t>(out, in, n);
    case DType::i64: return add_elements<std::int64_t>(out, in, n);
    case DType::boolean: break;
  }
  TANDEM_FAIL("comm: internal error: no sum of ", dtype_name(dtype), " tensors");
}

std::uint64_t shapes_digest(const std::vector<Tensor>& xs) {
  Fnv1a64 h;  // over ndim and extents
  for (const Tensor& x : xs) {
    h.mix(x.dim());
    for (std::int64_t e : x.shape()) h.mix(static_cast<std::uint64_t>(e));
  }
  return h.digest();
}

}  // namespace

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

// Once the headers agree, every peer has committed to the collective and queues its half on its
// GPU, where nothing can take it back: a failure on this rank from then on (an allocation out
// of memory included) leaves those halves waiting forever, so it must break the communicator.
// Hence every step after the exchange that can throw runs inside the phase, and what can be
// done before it (transport_copy, outputs of a locally known size) is done before it, when a
// failure is still this rank's alone and leaves the communicator usable. What follows the phase
// (copies back to the caller's device) may throw without harm: every rank's half is queued.
template <typename F>
void MpiCommunicator::run_device_phase(const char* operation, F&& phase) {
  const std::int64_t sequence = collective_sequence_ - 1;
  try {
    phase();
  } catch (const std::exception& e) {  // tandem::Error, and std::bad_alloc from host containers
    // The peers have queued their halves, which can now never complete.
    broken_ = detail::concat(operation, " (collective #", sequence, ") failed on the device (", e.what(), ")");
    throw;
  }
  collective_open_ = false;
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

Tensor MpiCommunicator::bcast_checked(const Tensor& x, int root, std::uint64_t digest, const char* operation, CallSite site) {
  FlightCall flight(*this, site);
  check_root(root, operation);
  const bool is_root = rank_ == root;
  if (is_root) check_defined(x, operation);
  Header mine = collective_header(OpKind::bcast, root, is_root ? &x : nullptr);
  mine.digest = digest;
  // A small tensor travels inside the root's headers; every receiver keeps what they carry.
  const bool small = is_root && inlines(x);
  if (small) mine.flags |= comm_detail::kFlagInlinePayload;
  Tensor host_copy;
  const Tensor& host = small ? comm_detail::host_view_for_mpi(x, host_copy) : host_copy;
  InlineData carried;
  carried.to_all = &host;
  // Device transport: the root's copy before the exchange, the others' buffers (sized by the
  // root's header) inside the device phase (see run_device_phase).
  Tensor buffer = is_root ? transport_copy(x) : Tensor();
  // A small communicator's root sends the payload now, beside its header (kEagerBcastRanks);
  // the root's header tells the others (kDataEager), so every rank takes the same path.
  std::vector<MPI_Request> eager_sends;
  KeepAlive eager_keep, offered;
  std::vector<bool> in_memory;  // per peer, where the payload stays in memory for it
  if (is_root && !small && eager_data_ && size_ <= kEagerBcastRanks && !hierarchical_ && !moves_on_device(x) &&
      x.nbytes() > 0 && x.nbytes() <= static_cast<std::size_t>(INT_MAX)) {
    const Tensor send = comm_detail::host_for_mpi(x);
    eager_keep.push_back(send.storage());
    // One header goes to every peer: the payload stays in memory when every peer reads it there.
    bool all_read = true;
    for (int peer = 0; peer < size_; ++peer) all_read = all_read && (peer == rank_ || offers_memory_to(peer, send.nbytes()));
    if (all_read) {
      in_memory.assign(size_, true);
      in_memory[rank_] = false;
      offered.push_back(send.storage());
      mine.data_flags = comm_detail::kDataEager | comm_detail::kDataInMemory;
      mine.address = reinterpret_cast<std::uint64_t>(send.raw_data());
    } else {
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_) continue;
        eager_sends.emplace_back();
        check_mpi(MPI_Isend(send.raw_data(), static_cast<int>(send.nbytes()), MPI_BYTE, peer, kEagerDataTag, comm_,
                            &eager_sends.back()),
                  "MPI_Isend");
      }
      mine.data_flags = comm_detail::kDataEager;
    }
  }
  std::vector<Header> all;
  try {
    all = exchange_headers(mine, false, &carried);
  } catch (...) {
    // On a disagreement the peers discard the payload (the same verdict everywhere); otherwise
    // the job is ending. Either way the sends complete later, their buffer kept until then.
    if (!eager_sends.empty()) orphans_.push_back(Orphan{eager_sends, eager_keep});
    leave_offered(offered);
    throw;
  }
  const Header& from_root = all[root];
  if (from_root.has_flag(comm_detail::kFlagInlinePayload)) {
    collective_open_ = false;  // no data phase: the tensor came with the root's header
    if (is_root) return x;
    Tensor y = comm_detail::host_buffer(from_root.shape, from_root.dtype, landing(from_root));
    if (y.nbytes() > 0) std::memcpy(y.raw_data(), carried.payload(root), y.nbytes());
    return moved_to(std::move(y), landing(from_root));
  }
  if (from_root.has_data_flag(comm_detail::kDataInMemory)) {
    auto reads = std::make_shared<DirectReads>();
    KeepAlive keep{reads};
    std::vector<MPI_Request> requests;
    if (is_root) {
      keep.insert(keep.end(), offered.begin(), offered.end());
      await_reads(in_memory, from_root.sequence, *reads, requests);
      finish_collective(requests, operation, keep);
      settle_reads(*reads, operation, std::move(keep));
      return x;
    }
    Tensor y = comm_detail::host_buffer(from_root.shape, from_root.dtype, landing(from_root));
    keep.push_back(y.storage());
    read_memory_of(root, from_root, y.raw_data(), *reads, requests, operation);
    finish_collective(requests, operation, keep);
    settle_reads(*reads, operation, std::move(keep));
    return moved_to(std::move(y), landing(from_root));
  }
  if (from_root.has_data_flag(comm_detail::kDataEager)) {
    if (is_root) {
      finish_collective(eager_sends, operation, std::move(eager_keep));
      return x;
    }
    Tensor y = comm_detail::host_buffer(from_root.shape, from_root.dtype, landing(from_root));
    std::vector<MPI_Request> requests(1);
    check_mpi(MPI_Irecv(y.raw_data(), checked_int(from_root.payload_bytes, operation), MPI_BYTE, root, kEagerDataTag,
                        comm_, &requests[0]),
              "MPI_Irecv");
    finish_collective(requests, operation, {y.storage()});
    return moved_to(std::move(y), landing(from_root));
  }
  if (on_device(all)) {
    run_device_phase(operation, [&] {
      if (!is_root) buffer = Tensor(from_root.shape, from_root.dtype, transport_device());
      if (buffer.nbytes() > 0) device_bcast(buffer, root);
    });
    return is_root ? x : buffer.to(landing(from_root));
  }
  Tensor y = is_root ? comm_detail::host_for_mpi(x)
                      : comm_detail::host_buffer(from_root.shape, from_root.dtype, landing(from_root));
  char* bytes = static_cast<char*>(y.raw_data());
  std::vector<MPI_Request> requests;
  for (std::size_t offset = 0; offset < y.nbytes(); offset += kChunkBytes) {
    const int count = static_cast<int>(std::min(kChunkBytes, y.nbytes() - offset));
    requests.emplace_back();
    check_mpi(MPI_Ibcast(bytes + offset, count, MPI_BYTE, root, comm_, &requests.back()), "MPI_Ibcast");
  }
  finish_collective(requests, operation, {y.storage()});
  if (is_root) return x;
  return moved_to(std::move(y), landing(from_root));
}

Tensor MpiCommunicator::bcast(const Tensor& x, int root, CallSite site) { return bcast_checked(x, root, 0, "bcast", site); }

std::vector<Tensor> MpiCommunicator::gather(const Tensor& x, int root, CallSite site) {
  FlightCall flight(*this, site);
  check_root(root, "gather");
  check_defined(x, "gather");
  const Header mine = collective_header(OpKind::gather, root, &x);
  const Tensor staged = transport_copy(x);  // before the exchange (see run_device_phase)
  const std::vector<Header> all = exchange_headers(mine, false);
  const bool is_root = rank_ == root;
  std::vector<Shape> shapes(size_);
  std::int64_t numel = 0;
  for (int r = 0; r < size_; ++r) {
    shapes[r] = all[r].shape;
    numel += shape_numel(shapes[r]);
  }
  if (on_device(all)) {
    Tensor flat;
    std::vector<Tensor> pieces;
    run_device_phase("gather", [&] {
      if (is_root) {  // sized by the peers' headers
        flat = Tensor({numel}, x.dtype(), transport_device());
        pieces = split_flat(flat, shapes);
      }
      device_gather(staged, pieces, root);
    });
    if (!is_root) return {};
    return split_flat(moved_to(std::move(flat), x.device()), std::move(shapes));
  }
  const Tensor send = comm_detail::host_for_mpi(x);
  const int send_count = checked_int(send.nbytes(), "gather");
  std::vector<MPI_Request> requests(1);
  if (!is_root) {
    check_mpi(MPI_Igatherv(send.raw_data(), send_count, MPI_BYTE, nullptr, nullptr, nullptr, MPI_BYTE, root, comm_,
                           &requests[0]),
              "MPI_Igatherv");
    finish_collective(requests, "gather", {send.storage()});
    return {};
  }
  std::vector<int> counts(size_), displacements(size_);
  std::size_t total = 0;
  for (int r = 0; r < size_; ++r) {
    counts[r] = checked_int(all[r].payload_bytes, "gather");
    displacements[r] = checked_int(total, "gather");
    total += all[r].payload_bytes;
  }
  checked_int(total, "gather");
  Tensor flat({numel}, x.dtype());
  check_mpi(MPI_Igatherv(send.raw_data(), send_count, MPI_BYTE, flat.raw_data(), counts.data(), displacements.data(),
                         MPI_BYTE, root, comm_, &requests[0]),
            "MPI_Igatherv");
  finish_collective(requests, "gather", {send.storage(), flat.storage()});
  return split_flat(moved_to(std::move(flat), x.device()), std::move(shapes));
}

Tensor MpiCommunicator::scatter(const std::vector<Tensor>& xs, int root, CallSite site) {
  FlightCall flight(*this, site);
  check_root(root, "scatter");
  const bool is_root = rank_ == root;
  if (is_root) {
    TANDEM_CHECK(static_cast<int>(xs.size()) == size_, "scatter: the root (rank ", rank_, ") passed ", xs.size(),
                 " tensors for ", size_, " ranks");
    for (const Tensor& x : xs) {
      check_defined(x, "scatter");
      TANDEM_CHECK(x.dtype() == xs[0].dtype(), "scatter: the root's tensors mix dtypes (", xs[0].description(), " and ",
                   x.description(), ")");
    }
    check_one_kind(xs, "scatter");
  }
  std::vector<Tensor> sends;  // the root's transport copies, before the exchange (see run_device_phase)
  if (is_root && moves_on_device(xs[0]))
    for (const Tensor& x : xs) sends.push_back(transport_copy(x));
  const std::vector<Header> all = exchange_headers(
      [&](int peer) {
        return collective_header(OpKind::scatter, root, is_root ? &xs[peer] : nullptr);
      },
      false);
  const Header& mine = all[root];  // what the root sent this rank
  if (on_device(all)) {
    Tensor y;
    run_device_phase("scatter", [&] {
      if (!is_root) y = Tensor(mine.shape, mine.dtype, transport_device());  // sized by the root's header
      device_scatter(sends, y, root);
    });
    return is_root ? xs[root] : y.to(landing(mine));
  }
  if (is_root) {
    std::vector<int> counts(size_), displacements(size_);
    std::size_t total = 0;
    for (int r = 0; r < size_; ++r) {
      counts[r] = checked_int(xs[r].nbytes(), "scatter");
      displacements[r] = checked_int(total, "scatter");
      total += xs[r].nbytes();
    }
    const Packed flat = pack(on_host(xs), xs[0].dtype());
    std::vector<MPI_Request> requests(1);
    check_mpi(MPI_Iscatterv(flat.data, counts.data(), displacements.data(), MPI_BYTE, MPI_IN_PLACE, 0, MPI_BYTE, root,
                            comm_, &requests[0]),
              "MPI_Iscatterv");
    finish_collective(requests, "scatter", {flat.owner});
    return xs[root];
  }
  Tensor y = comm_detail::host_buffer(mine.shape, mine.dtype, landing(mine));
  std::vector<MPI_Request> requests(1);
  check_mpi(MPI_Iscatterv(nullptr, nullptr, nullptr, MPI_BYTE, y.raw_data(), checked_int(y.nbytes(), "scatter"),
                          MPI_BYTE, root, comm_, &requests[0]),
            "MPI_Iscatterv");
  finish_collective(requests, "scatter", {y.storage()});
  return y.to(landing(mine));
}

std::vector<Tensor> MpiCommunicator::allgather(const Tensor& x, CallSite site) {
  FlightCall flight(*this, site);
  check_defined(x, "allgather");
  // A small communicator: every rank sends its tensor to every peer beside its header (inside it
  // when small) and receives theirs, the pieces of alltoall (MPICH's non-blocking allgather took
  // several times as long at 2 ranks: docs/performance.md, "Communication"). The choice is the same
  // on every rank.
  if (exchanges_directly(x)) {
    FlatExchange exchanged =
        exchange_pieces(PieceList::same_for_all(x, size_), OpKind::allgather, "allgather", nullptr, PieceOptions());
    return split_flat(exchanged.flat, std::move(exchanged.headers));
  }
  Header mine = collective_header(OpKind::allgather, -1, &x);
  const bool small = inlines(x);
  if (small) mine.flags |= comm_detail::kFlagInlinePayload;
  Tensor host_copy;
  const Tensor& host = small ? comm_detail::host_view_for_mpi(x, host_copy) : host_copy;
  InlineData carried;
  carried.to_all = &host;
  const Tensor staged = transport_copy(x);  // before the exchange (see run_device_phase)
  const std::vector<Header> all = exchange_headers(mine, false, &carried);
  std::vector<int> counts(size_), displacements(size_);
  std::vector<Shape> shapes(size_);
  std::size_t total = 0;
  std::int64_t numel = 0;
  bool equal = true;
  for (int r = 0; r < size_; ++r) {
    shapes[r] = all[r].shape;
    numel += shape_numel(shapes[r]);
    equal = equal && all[r].payload_bytes == all[0].payload_bytes;
  }
  if (all_inline(all)) {  // every rank's tensor came with its header
    collective_open_ = false;
    Tensor flat({numel}, x.dtype());
    char* into = static_cast<char*>(flat.raw_data());
    for (int r = 0; r < size_; ++r) {
      const std::size_t bytes = all[r].payload_bytes;
      if (bytes > 0) std::memcpy(into, r == rank_ ? host.raw_data() : carried.payload(r), bytes);
      into += bytes;
    }
    return split_flat(moved_to(std::move(flat), x.device()), std::move(shapes));
  }
  if (on_device(all)) {
    Tensor flat;
    std::vector<Tensor> pieces;
    run_device_phase("allgather", [&] {
      flat = Tensor({numel}, x.dtype(), transport_device());  // sized by the peers' headers
      pieces = split_flat(flat, shapes);
      device_allgather(staged, flat, pieces);
    });
    return split_flat(moved_to(std::move(flat), x.device()), std::move(shapes));
  }
  for (int r = 0; r < size_; ++r) {
    counts[r] = checked_int(all[r].payload_bytes, "allgather");
    displacements[r] = checked_int(total, "allgather");
    total += all[r].payload_bytes;
  }
  checked_int(total, "allgather");
  const Tensor send = comm_detail::host_for_mpi(x);
  Tensor flat({numel}, x.dtype());
  std::vector<MPI_Request> requests(1);
  if (equal) {
    check_mpi(MPI_Iallgather(send.raw_data(), counts[rank_], MPI_BYTE, flat.raw_data(), counts[0], MPI_BYTE, comm_,
                             &requests[0]),
              "MPI_Iallgather");
  } else {
    check_mpi(MPI_Iallgatherv(send.raw_data(), counts[rank_], MPI_BYTE, flat.raw_data(), counts.data(),
                              displacements.data(), MPI_BYTE, comm_, &requests[0]),
              "MPI_Iallgatherv");
  }
  finish_collective(requests, "allgather", {send.storage(), flat.storage()});
  return split_flat(moved_to(std::move(flat), x.device()), std::move(shapes));
}

std::vector<Tensor> MpiCommunicator::alltoall(const std::vector<Tensor>& xs, CallSite site) {
  FlightCall flight(*this, site);
  TANDEM_CHECK(static_cast<int>(xs.size()) == size_, "alltoall: rank ", rank_, " passed ", xs.size(), " tensors for ",
               size_, " ranks");
  for (const Tensor& x : xs) {
    check_defined(x, "alltoall");
    TANDEM_CHECK(x.dtype() == xs[0].dtype(), "alltoall: rank ", rank_, "'s tensors mix dtypes (", xs[0].description(),
                 " and ", x.description(), ")");
  }
  check_one_kind(xs, "alltoall");
  FlatExchange exchanged = exchange_pieces(xs, OpKind::alltoall, "alltoall", nullptr, PieceOptions());
  return split_flat(exchanged.flat, std::move(exchanged.headers));
}

AlltoallvResult MpiCommunicator::alltoallv(const Tensor& x, const std::vector<std::int64_t>& send_counts, CallSite site) {
  FlightCall flight(*this, site);
  check_defined(x, "alltoallv");
  TANDEM_CHECK(x.dim() >= 1, "alltoallv: rank ", rank_, " passed ", x.description(),
               "; its pieces are rows along the first axis, so it needs at least one axis");
  TANDEM_CHECK(static_cast<int>(send_counts.size()) == size_, "alltoallv: rank ", rank_, " passed ",
               send_counts.size(), " send counts for ", size_, " ranks");
  std::int64_t total = 0;
  for (std::size_t r = 0; r < send_counts.size(); ++r) {
    TANDEM_CHECK(send_counts[r] >= 0, "alltoallv: rank ", rank_, "'s send count for rank ", r, " is ",
                 send_counts[r], " (counts are numbers of rows, at least 0)");
    total += send_counts[r];
  }
  TANDEM_CHECK(total == x.shape()[0], "alltoallv: rank ", rank_, "'s send counts add up to ", total, " rows but ",
               x.description(), " has ", x.shape()[0]);
  // Consecutive row ranges of one (always contiguous) tensor: MPI sends straight from x, unpacked.
  std::vector<Tensor> pieces;
  std::int64_t begin = 0;
  for (std::int64_t count : send_counts) {
    pieces.push_back(x.slice_rows(begin, begin + count));
    begin += count;
  }
  Shape row_shape(x.shape().begin() + 1, x.shape().end());
  const FlatExchange exchanged = exchange_pieces(pieces, OpKind::alltoallv, "alltoallv", &row_shape, PieceOptions());
  AlltoallvResult result;
  std::int64_t received = 0;
  for (const Header& header : exchanged.headers) {
    result.recv_counts.push_back(header.shape[0]);
    received += header.shape[0];
  }
  row_shape.insert(row_shape.begin(), received);
  result.y = exchanged.flat.reshape(row_shape);
  return result;
}

bool MpiCommunicator::exchanges_directly(const Tensor& x) const {
  // The same on every rank whose header passes the check (exchange_pieces raises on every rank
  // when some tensor is too large to go beside its header).
  return eager_data_ && size_ <= kDirectRanks && !hierarchical_ && !moves_on_device(x);
}

MpiCommunicator::FlatExchange MpiCommunicator::exchange_pieces(const PieceList& xs, OpKind kind,
                                                               const char* operation, const Shape* row_shape,
                                                               const PieceOptions& options) {
  // Whether every piece of this rank has the same size: when all ranks say so (with the same
  // size), every rank can choose MPI_Alltoall, which beats the v-variant.
  bool eager = eager_data_ && !moves_on_device(xs[0]);
  for (std::size_t r = 0; r < xs.size(); ++r)
    eager = eager && xs[r].nbytes() <= static_cast<std::size_t>(INT_MAX) && xs[r].dim() <= comm_detail::kMaxDims;
  if (eager) return exchange_pieces_eagerly(xs, kind, operation, row_shape, options);
  std::int64_t uniform = static_cast<std::int64_t>(xs[0].nbytes());
  for (std::size_t r = 0; r < xs.size(); ++r)
    if (static_cast<std::int64_t>(xs[r].nbytes()) != uniform) uniform = -1;
  std::vector<Tensor> sends;  // transport copies, before the exchange (see run_device_phase)
  if (moves_on_device(xs[0]))
    for (std::size_t r = 0; r < xs.size(); ++r) sends.push_back(transport_copy(xs[r]));
  std::vector<Header> all = exchange_headers(
      [&](int peer) {
        Header header = collective_header(kind, -1, &xs[peer]);
        header.aux = uniform;
        header.reduce_op = options.reduce_op;
        header.digest = options.digest;
        return header;
      },
      options.same_shape);
  // Some peers sent their pieces with their headers and this rank could not (see the eager
  // path): every rank sees the same flags, so every rank raises this.
  for (int r = 0; r < size_; ++r) {
    if (!all[r].has_data_flag(comm_detail::kDataEager)) continue;
    discard_eager_data(all);
    TANDEM_FAIL(operation, ": rank ", rank_, " passes a piece of more than ", INT_MAX,
                " bytes (or of more than ", comm_detail::kMaxDims, " axes), which MPI cannot move in one message");
  }
  if (row_shape) check_rows(all, *row_shape, operation);
  const std::int64_t numel = pieces_numel(all);
  const Device device = xs[0].device();
  FlatExchange out;
  if (on_device(all)) {
    run_device_phase(operation, [&] {
      out.flat = Tensor({numel}, xs[0].dtype(), transport_device());  // sized by the peers' headers
      std::vector<Tensor> pieces = split_flat(out.flat, std::vector<Header>(all));
      device_alltoall(sends, pieces);
    });
    out.flat = out.flat.to(device);
    out.headers = std::move(all);
    return out;
  }
  bool equal = uniform >= 0 && uniform <= INT_MAX;
  for (const Header& header : all) equal = equal && header.aux == uniform;
  std::vector<int> send_counts(size_), send_displacements(size_), recv_counts(size_), recv_displacements(size_);
  std::size_t send_total = 0, recv_total = 0;
  for (int r = 0; r < size_; ++r) {
    send_counts[r] = checked_int(xs[r].nbytes(), operation);
    send_displacements[r] = checked_int(send_total, operation);
    send_total += xs[r].nbytes();
    recv_counts[r] = checked_int(all[r].payload_bytes, operation);
    recv_displacements[r] = checked_int(recv_total, operation);
    recv_total += all[r].payload_bytes;
  }
  checked_int(send_total, operation);
  checked_int(recv_total, operation);
  const Packed send = pack(on_host(xs.to_vector()), xs[0].dtype());
  Tensor flat({numel}, xs[0].dtype());
  std::vector<MPI_Request> requests(1);
  if (equal) {  // every rank saw every count in the headers, so all choose the same call
    check_mpi(MPI_Ialltoall(send.data, send_counts[0], MPI_BYTE, flat.raw_data(), send_counts[0], MPI_BYTE, comm_,
                            &requests[0]),
              "MPI_Ialltoall");
  } else {
    check_mpi(MPI_Ialltoallv(send.data, send_counts.data(), send_displacements.data(), MPI_BYTE, flat.raw_data(),
                             recv_counts.data(), recv_displacements.data(), MPI_BYTE, comm_, &requests[0]),
              "MPI_Ialltoallv");
  }
  finish_collective(requests, operation, {send.owner, flat.storage()});
  out.flat = moved_to(std::move(flat), device);
  out.headers = std::move(all);
  return out;
}

void MpiCommunicator::check_rows(const std::vector<Header>& all, const Shape& row_shape, const char* operation) const {
  // Every rank sees every rank's rows (in the piece it sent here), so every rank reaches the
  // same verdict.
  for (int r = 0; r < size_; ++r) {
    const Shape& shape = all[r].shape;
    const bool same = !shape.empty() && Shape(shape.begin() + 1, shape.end()) == row_shape;
    if (same) continue;
    std::ostringstream text;
    text << operation << ": the ranks' rows differ (every rank must send rows of one shape):";
    for (int q = 0; q < size_; ++q) {
      const Shape& piece = all[q].shape;
      text << (q ? ";" : "") << " rank " << q << " sends rows of "
           << shape_str(piece.empty() ? piece : Shape(piece.begin() + 1, piece.end())) << " "
           << dtype_name(all[q].dtype);
    }
    TANDEM_FAIL(text.str());
  }
}

MpiCommunicator::FlatExchange MpiCommunicator::exchange_pieces_eagerly(const PieceList& xs, OpKind kind,
                                                                       const char* operation,
                                                                       const Shape* row_shape,
                                                                       const PieceOptions& options) {
  check_usable();
  // Each peer's piece goes now, before the headers; the header says it did (kDataEager) and how
  // long it is, so the receiver posts its receive as soon as it has the header.
  std::vector<Tensor> host_copies;
  const PieceList hosts = on_host(xs, host_copies);
  std::vector<MPI_Request> requests;  // (none when every piece goes inside its header)
  KeepAlive keep_alive;
  // Small pieces travel inside the headers instead (each receiver takes what each header
  // carries, so the choice is the sender's alone).
  RankSet inside(size_);
  std::size_t inside_total = 0;
  for (int peer = 0; peer < size_; ++peer) {
    const std::size_t bytes = hosts[static_cast<std::size_t>(peer)].nbytes();
    if (!inline_collectives_ || peer == rank_ || bytes == 0 || bytes > kInlineCollectiveBytes ||
        inside_total + bytes > kInlineCollectiveTotal)
      continue;
    inside.add(peer);
    inside_total += bytes;
  }
  InlineData carried;
  carried.per_peer = &hosts;
  // Large pieces for peers on this host stay here, for the peer to read (kDataInMemory); sized
  // at the first such piece (small exchanges never make one).
  std::vector<bool> in_memory;
  KeepAlive offered;
  for (int peer = 0; peer < size_; ++peer) {
    const Tensor& piece = hosts[static_cast<std::size_t>(peer)];
    if (peer == rank_ || piece.nbytes() == 0 || inside.has(peer)) continue;
    if (offers_memory_to(peer, piece.nbytes())) {
      if (in_memory.empty()) in_memory.assign(size_, false);
      in_memory[peer] = true;
      offered.push_back(piece.storage());
      continue;
    }
    requests.emplace_back();
    check_mpi(MPI_Isend(piece.raw_data(), static_cast<int>(piece.nbytes()), MPI_BYTE, peer, kEagerDataTag, comm_,
                        &requests.back()),
              "MPI_Isend");
    keep_alive.push_back(piece.storage());
  }
  std::vector<Header> all;
  try {
    all = exchange_headers(
        [&](int peer) {
          Header header = collective_header(kind, -1, &xs[peer]);
          header.data_flags = comm_detail::kDataEager;
          header.reduce_op = options.reduce_op;
          header.digest = options.digest;
          if (inside.has(peer)) header.flags |= comm_detail::kFlagInlinePayload;
          if (!in_memory.empty() && in_memory[peer]) {
            header.data_flags |= comm_detail::kDataInMemory;
            header.address = reinterpret_cast<std::uint64_t>(hosts[static_cast<std::size_t>(peer)].raw_data());
          }
          return header;
        },
        options.same_shape, &carried);
    for (int r = 0; r < size_; ++r) {
      if (all[r].has_data_flag(comm_detail::kDataEager)) continue;
      discard_eager_data(all);
      TANDEM_FAIL(operation, ": rank ", r, " passes a piece of more than ", INT_MAX, " bytes (or of more than ",
                  comm_detail::kMaxDims, " axes), which MPI cannot move in one message");
    }
    if (row_shape) {
      try {
        check_rows(all, *row_shape, operation);
      } catch (const Error&) {
        discard_eager_data(all);
        throw;
      }
    }
  } catch (...) {
    // On a disagreement the peers discard these pieces (the same verdict everywhere); otherwise
    // the job is ending. Either way the sends complete later, their buffers kept until then.
    orphans_.push_back(Orphan{requests, keep_alive});
    leave_offered(offered);
    throw;
  }
  // Data read from or left in memory: the read-done words (and nothing to set up without).
  bool reading = !offered.empty();
  for (int r = 0; r < size_ && !reading; ++r) reading = all[r].has_data_flag(comm_detail::kDataInMemory);
  std::shared_ptr<DirectReads> reads;
  if (reading) {
    reads = std::make_shared<DirectReads>();
    keep_alive.push_back(reads);
    for (const auto& piece : offered) keep_alive.push_back(piece);
    if (in_memory.empty()) in_memory.assign(size_, false);  // (only the peers offered theirs)
    await_reads(in_memory, all[rank_].sequence, *reads, requests);
  }
  FlatExchange out;
  const std::int64_t numel = pieces_numel(all);
  Tensor flat({numel}, xs[0].dtype());
  char* into = static_cast<char*>(flat.raw_data());
  char* own = nullptr;  // where this rank's piece for itself goes: copied once the receives are posted
  for (int r = 0; r < size_; ++r) {
    const std::uint64_t bytes = all[r].payload_bytes;
    if (r == rank_) {
      own = into;
    } else if (all[r].has_flag(comm_detail::kFlagInlinePayload)) {
      if (bytes > 0) std::memcpy(into, carried.payload(r), bytes);
    } else if (all[r].has_data_flag(comm_detail::kDataInMemory)) {
      read_memory_of(r, all[r], into, *reads, requests, operation);
    } else if (bytes > 0) {
      requests.emplace_back();
      check_mpi(MPI_Irecv(into, checked_int(bytes, operation), MPI_BYTE, r, kEagerDataTag, comm_, &requests.back()),
                "MPI_Irecv");
    }
    into += bytes;
  }
  // This rank's own piece last: the peers whose memory it read are told first.
  const Tensor& mine = hosts[static_cast<std::size_t>(rank_)];
  if (mine.nbytes() > 0) std::memcpy(own, mine.raw_data(), mine.nbytes());
  if (requests.empty()) {
    collective_open_ = false;  // every piece came inside its header: nothing to wait for
  } else {
    keep_alive.push_back(flat.storage());
    if (reads) {
      finish_collective(requests, operation, keep_alive);
      settle_reads(*reads, operation, std::move(keep_alive));
    } else {
      finish_collective(requests, operation, std::move(keep_alive));
    }
  }
  out.flat = moved_to(std::move(flat), xs[0].device());
  out.headers = std::move(all);
  return out;
}

Tensor MpiCommunicator::allreduce_checked(const Tensor& x, AllreduceOp op, std::uint64_t digest,
                                          const char* operation, CallSite site) {
  FlightCall flight(*this, site);
  check_defined(x, operation);
  const MPI_Datatype type = mpi_type(x.dtype(), operation);
  TANDEM_CHECK(op == AllreduceOp::sum || is_floating(x.dtype()), operation, ": the mean of ", x.description(),
               " needs a floating dtype");
  // Ranks whose headers agree (dtype, shape, device) choose alike: small tensors inside the
  // headers, middle ones exchanged whole beside them (summed here), large ones by MPI.
  const bool small = inlines(x);
  if (!small && exchanges_directly(x) && x.nbytes() <= kDirectAllreduceBytes) {
    PieceOptions options;
    options.reduce_op = op == AllreduceOp::mean ? 1 : 0;
    options.digest = digest;
    options.same_shape = true;
    const Tensor host = comm_detail::host_for_mpi(x);
    const FlatExchange exchanged =
        exchange_pieces(PieceList::same_for_all(host, size_), OpKind::allreduce, operation, nullptr, options);
    // Every rank's tensor arrived whole: each rank sums them in rank order, so all get the same bits.
    Tensor y(x.shape(), x.dtype());
    if (y.nbytes() > 0) {
      const char* pieces = static_cast<const char*>(exchanged.flat.raw_data());
      std::memcpy(y.raw_data(), pieces, y.nbytes());
      for (int r = 1; r < size_; ++r) add_into(y.raw_data(), pieces + r * y.nbytes(), y.numel(), y.dtype());
    }
    if (op == AllreduceOp::mean) divide(y, size_);
    return moved_to(std::move(y), x.device());
  }
  Header mine = collective_header(OpKind::allreduce, -1, &x);
  mine.reduce_op = op == AllreduceOp::mean ? 1 : 0;
  mine.digest = digest;
  if (small) mine.flags |= comm_detail::kFlagInlinePayload;
  Tensor host_copy;
  const Tensor& host = small ? comm_detail::host_view_for_mpi(x, host_copy) : host_copy;
  InlineData carried;
  carried.to_all = &host;
  // Device transport: the copy and the output (of x's shape) before the exchange (see run_device_phase).
  const Tensor staged = transport_copy(x);
  Tensor device_y = staged.defined() ? Tensor(x.shape(), x.dtype(), transport_device()) : Tensor();
  const std::vector<Header> all = exchange_headers(mine, true, &carried);
  if (all_inline(all)) {
    // Every rank's tensor came with its header: each rank sums them in rank order, so all get
    // the same bits.
    collective_open_ = false;
    Tensor y(x.shape(), x.dtype());
    if (y.nbytes() > 0) {
      std::memcpy(y.raw_data(), rank_ == 0 ? host.raw_data() : carried.payload(0), y.nbytes());
      for (int r = 1; r < size_; ++r)
        add_into(y.raw_data(), r == rank_ ? host.raw_data() : carried.payload(r), y.numel(), y.dtype());
    }
    if (op == AllreduceOp::mean) divide(y, size_);
    return moved_to(std::move(y), x.device());
  }
  if (on_device(all)) {
    run_device_phase(operation, [&] {
      if (device_y.numel() > 0) device_allreduce(staged, device_y);
    });
    // The arithmetic of divide() below, as a kernel queued behind the sum.
    if (op == AllreduceOp::mean)
      device_y = device_y.dtype() == DType::f32 ? mul(device_y, 1.0 / size_) : div(device_y, double(size_));
    return device_y.to(x.device());
  }
  const Tensor send = comm_detail::host_for_mpi(x);
  Tensor y(x.shape(), x.dtype());
  const std::size_t element = dtype_size(x.dtype());
  const std::size_t chunk = kChunkBytes / element;
  if (hierarchical_) {
    hierarchical_sum(send, y, type, chunk, operation);
  } else {
    std::vector<MPI_Request> requests;
    for (std::size_t offset = 0; offset < static_cast<std::size_t>(x.numel()); offset += chunk) {
      const int count = static_cast<int>(std::min(chunk, static_cast<std::size_t>(x.numel()) - offset));
      requests.emplace_back();
      check_mpi(MPI_Iallreduce(static_cast<const char*>(send.raw_data()) + offset * element,
                               static_cast<char*>(y.raw_data()) + offset * element, count, type, MPI_SUM, comm_,
                               &requests.back()),
                "MPI_Iallreduce");
    }
    finish_collective(requests, operation, {send.storage(), y.storage()});
  }
  if (op == AllreduceOp::mean) divide(y, size_);
  return moved_to(std::move(y), x.device());
}

Tensor MpiCommunicator::allreduce(const Tensor& x, AllreduceOp op, CallSite site) { return allreduce_checked(x, op, 0, "allreduce", site); }

Tensor MpiCommunicator::reduce(const Tensor& x, int root, CallSite site) {
  FlightCall flight(*this, site);
  check_root(root, "reduce");
  check_defined(x, "reduce");
  const MPI_Datatype type = mpi_type(x.dtype(), "reduce");
  const Header mine = collective_header(OpKind::reduce, root, &x);
  const bool is_root = rank_ == root;
  // Device transport: the copy and the root's output (of x's shape) before the exchange (see
  // run_device_phase).
  const Tensor staged = transport_copy(x);
  Tensor device_y = staged.defined() && is_root ? Tensor(x.shape(), x.dtype(), transport_device()) : Tensor();
  const std::vector<Header> all = exchange_headers(mine, true);
  if (on_device(all)) {
    run_device_phase("reduce", [&] {
      if (x.numel() > 0) device_reduce(staged, device_y, root);
    });
    return is_root ? device_y.to(x.device()) : Tensor();
  }
  const Tensor send = comm_detail::host_for_mpi(x);
  Tensor y = is_root ? Tensor(x.shape(), x.dtype()) : Tensor();
  const std::size_t element = dtype_size(x.dtype());
  const std::size_t chunk = kChunkBytes / element;
  std::vector<MPI_Request> requests;
  for (std::size_t offset = 0; offset < static_cast<std::size_t>(x.numel()); offset += chunk) {
    const int count = static_cast<int>(std::min(chunk, static_cast<std::size_t>(x.numel()) - offset));
    requests.emplace_back();
    check_mpi(MPI_Ireduce(static_cast<const char*>(send.raw_data()) + offset * element,
                          is_root ? static_cast<char*>(y.raw_data()) + offset * element : nullptr, count, type,
                          MPI_SUM, root, comm_, &requests.back()),
              "MPI_Ireduce");
  }
  finish_collective(requests, "reduce", {send.storage(), is_root ? y.storage() : nullptr});
  return is_root ? y.to(x.device()) : Tensor();
}

Tensor MpiCommunicator::reduce_scatter(const std::vector<Tensor>& xs, CallSite site) {
  FlightCall flight(*this, site);
  TANDEM_CHECK(static_cast<int>(xs.size()) == size_, "reduce_scatter: rank ", rank_, " passed ", xs.size(),
               " tensors for ", size_, " ranks");
  for (const Tensor& x : xs) {
    check_defined(x, "reduce_scatter");
    TANDEM_CHECK(x.dtype() == xs[0].dtype(), "reduce_scatter: rank ", rank_, "'s tensors mix dtypes (",
                 xs[0].description(), " and ", x.description(), ")");
  }
  check_one_kind(xs, "reduce_scatter");
  const MPI_Datatype type = mpi_type(xs[0].dtype(), "reduce_scatter");
  Header mine = collective_header(OpKind::reduce_scatter, -1, &xs[rank_]);
  mine.digest = shapes_digest(xs);
  // Device transport: the copies and the output (of xs[rank]'s shape) before the exchange (see
  // run_device_phase).
  std::vector<Tensor> sends;
  Tensor device_y;
  if (moves_on_device(xs[0])) {
    for (const Tensor& x : xs) sends.push_back(transport_copy(x));
    device_y = Tensor(xs[rank_].shape(), xs[rank_].dtype(), transport_device());
  }
  const std::vector<Header> all = exchange_headers(mine, false);
  const Device device = xs[0].device();
  if (on_device(all)) {
    run_device_phase("reduce_scatter", [&] { device_reduce_scatter(sends, device_y); });
    return device_y.to(device);
  }
  std::vector<int> counts(size_);
  std::size_t total = 0;
  for (int r = 0; r < size_; ++r) {
    counts[r] = checked_int(static_cast<std::size_t>(xs[r].numel()), "reduce_scatter");
    total += xs[r].nbytes();
  }
  checked_int(total, "reduce_scatter");
  const Packed send = pack(on_host(xs), xs[0].dtype());
  Tensor y(xs[rank_].shape(), xs[rank_].dtype());
  std::vector<MPI_Request> requests(1);
  check_mpi(MPI_Ireduce_scatter(send.data, y.raw_data(), counts.data(), type, MPI_SUM, comm_, &requests[0]),
            "MPI_Ireduce_scatter");
  finish_collective(requests, "reduce_scatter", {send.owner, y.storage()});
  return y.to(device);
}

std::string MpiCommunicator::bcast_obj(const std::string& bytes, int root, CallSite site) {
  FlightCall flight(*this, site);
  check_root(root, "bcast_obj");
  Header mine;
  mine.kind = OpKind::object_bcast;
  mine.root = root;
  if (rank_ == root) mine.payload_bytes = bytes.size();
  const std::vector<Header> all = exchange_headers(mine, false);
  auto result = std::make_shared<std::string>(rank_ == root ? bytes : std::string(all[root].payload_bytes, '\0'));
  std::vector<MPI_Request> requests;
  for (std::size_t offset = 0; offset < result->size(); offset += kChunkBytes) {
    const int count = static_cast<int>(std::min(kChunkBytes, result->size() - offset));
    requests.emplace_back();
    check_mpi(MPI_Ibcast(result->data() + offset, count, MPI_BYTE, root, comm_, &requests.back()), "MPI_Ibcast");
  }
  finish_collective(requests, "bcast_obj", {result});
  return *result;
}

std::vector<std::string> MpiCommunicator::gather_obj(const std::string& bytes, int root, CallSite site) {
  FlightCall flight(*this, site);
  check_root(root, "gather_obj");
  Header mine;
  mine.kind = OpKind::object_gather;
  mine.root = root;
  mine.payload_bytes = bytes.size();
  const std::vector<Header> all = exchange_headers(mine, false);
  const int send_count = checked_int(bytes.size(), "gather_obj");
  auto mine_bytes = std::make_shared<const std::string>(bytes);
  std::vector<MPI_Request> requests(1);
  if (rank_ != root) {
    check_mpi(MPI_Igatherv(mine_bytes->data(), send_count, MPI_BYTE, nullptr, nullptr, nullptr, MPI_BYTE, root, comm_,
                           &requests[0]),
              "MPI_Igatherv");
    finish_collective(requests, "gather_obj", {mine_bytes});
    return {};
  }
  std::vector<int> counts(size_), displacements(size_);
  std::size_t total = 0;
  for (int r = 0; r < size_; ++r) {
    counts[r] = checked_int(all[r].payload_bytes, "gather_obj");
    displacements[r] = checked_int(total, "gather_obj");
    total += all[r].payload_bytes;
  }
  auto flat = std::make_shared<std::string>(checked_int(total, "gather_obj"), '\0');
  check_mpi(MPI_Igatherv(mine_bytes->data(), send_count, MPI_BYTE, flat->data(), counts.data(), displacements.data(),
                         MPI_BYTE, root, comm_, &requests[0]),
            "MPI_Igatherv");
  finish_collective(requests, "gather_obj", {mine_bytes, flat});
  std::vector<std::string> result(size_);
  for (int r = 0; r < size_; ++r) result[r] = flat->substr(displacements[r], counts[r]);
  return result;
}

// --- collectives that overlap computation ---------------------------------------------------

// A started collective (mpi_communicator.h): its headers may still be on their way; the data
// phase completes as finish_collective's does (a failure breaks the communicator).
class MpiPendingCollective final : public PendingCollective {
 public:
  MpiPendingCollective(std::shared_ptr<MpiCommunicator> comm, std::shared_ptr<MpiCommunicator::StartedCollective> state,
                       Tensor result, Device device)
      : comm_(std::move(comm)), state_(std::move(state)), result_(std::move(result)), device_(device) {}

  ~MpiPendingCollective() override {
    if (done_) return;
    // Dropped unfinished: MPI may still use the buffers, which stay alive until it is done. One
    // whose peers' headers were never taken leaves them queued for the next collective: none may run.
    if (state_->advance) {
      // A data phase in stages (the hierarchical allreduce's): stages not posted yet are awaited
      // by other ranks, so no collective may run here any more.
      bool posted = false;
      try {
        posted = state_->data_posted && state_->advance(false, state_->requests);
      } catch (const Error&) {
      }
      comm_->orphans_.push_back(MpiCommunicator::Orphan{state_->stage_requests(), state_->keep_alive});
      if (!posted) {
        comm_->broken_ = detail::concat(state_->operation, " (collective #", state_->sequence,
                                        ") was dropped between its stages");
      }
    }
    comm_->orphans_.push_back(MpiCommunicator::Orphan{state_->requests, state_->keep_alive});
    if (!state_->data_posted) {
      auto& started = comm_->started_;
      started.erase(std::remove(started.begin(), started.end(), state_), started.end());
      comm_->broken_ = detail::concat(state_->operation, " (collective #", state_->sequence,
                                      ") was abandoned before its peers' headers arrived");
    }
  }

  bool test() override {
    if (done_) return true;
    comm_->progress_started(nullptr, false);
    if (!state_->data_posted) return false;
    if (state_->advance && !state_->advance(false, state_->requests)) return false;
    int done = 0;
    check_mpi(MPI_Testall(static_cast<int>(state_->requests.size()), state_->requests.data(), &done,
                          MPI_STATUSES_IGNORE),
              "MPI_Testall");
    done_ = done != 0;
    if (done_) {
      state_->keep_alive.clear();  // the send buffers' memory goes now, not at the update
      trace::FlightRecorder::instance().set_state(state_->flight_entry, trace::FlightState::completed);
    }
    return done_;
  }

  Tensor wait() override {
    if (!done_) {
      comm_->progress_started(state_.get(), true);
      const MpiCommunicator::StartedCollective* state = state_.get();
      const comm_detail::LazyText what([state] { return detail::concat(state->operation, " (collective #", state->sequence, ")"); });
      try {
        if (state_->advance) {
          try {
            state_->advance(true, state_->requests);
          } catch (const Error&) {
            // A stage's wait failed (and set its own requests aside): so are the rest.
            comm_->orphans_.push_back(MpiCommunicator::Orphan{state_->requests, state_->keep_alive});
            comm_->orphans_.push_back(MpiCommunicator::Orphan{state_->stage_requests(), state_->keep_alive});
            throw;
          }
        }
        comm_->wait_all(state_->requests, MpiCommunicator::WaitContext{what, -1, true, state_->sequence},
                        state_->keep_alive);
      } catch (const Error& e) {
        done_ = true;  // wait_all (or the catch above) has set the requests aside
        comm_->broken_ = detail::concat(what, " failed in flight (", e.what(), ")");
        trace::FlightRecorder::instance().set_state(state_->flight_entry, trace::FlightState::failed, e.what());
        throw;
      }
      done_ = true;
      state_->keep_alive.clear();
      trace::FlightRecorder::instance().set_state(state_->flight_entry, trace::FlightState::completed);
    }
    return result_.to(device_);
  }

 private:
  std::shared_ptr<MpiCommunicator> comm_;
  std::shared_ptr<MpiCommunicator::StartedCollective> state_;
  Tensor result_;
  Device device_;
  bool done_ = false;
};

std::unique_ptr<PendingCollective> MpiCommunicator::start_collective(
    Header mine, bool same_shape, const char* operation, std::function<void(std::vector<MPI_Request>&)> post_data,
    KeepAlive keep_alive, Tensor result, Device device, StartedStages stages) {
  auto state = std::make_shared<StartedCollective>();
  state->advance = std::move(stages.advance);
  state->stage_requests = std::move(stages.stage_requests);
  state->sequence = post_headers(mine, state->all, state->requests, state->keep_alive);
  // The entry ends when the pending collective completes, not with this call.
  state->flight_entry = collective_entry_;
  if (flight_call_ && !flight_call_->ending_.empty() && flight_call_->ending_.back() == collective_entry_) {
    flight_call_->ending_.pop_back();
    trace::FlightRecorder::instance().mark_in_flight(collective_entry_);
  }
  // The data phase is the pending collective's from here: the next header is not "abandoned".
  collective_open_ = false;
  state->have.assign(size_, false);
  state->have[rank_] = true;
  state->same_shape = same_shape;
  state->post_data = std::move(post_data);
  state->operation = operation;
  for (auto& k : keep_alive) state->keep_alive.push_back(std::move(k));
  started_.push_back(state);
  progress_started(nullptr, false);
  return std::make_unique<MpiPendingCollective>(std::static_pointer_cast<MpiCommunicator>(shared_from_this()),
                                                std::move(state), std::move(result), device);
}

void MpiCommunicator::progress_started(const StartedCollective* until, bool blocking) {
  while (!started_.empty()) {
    StartedCollective& c = *started_.front();
    const Header& own = c.all[rank_];
    const comm_detail::LazyText operation([&own] { return own.describe(); });
    for (int peer = 0; peer < size_; ++peer) {
      if (c.have[peer]) continue;
      const WaitContext context{operation, peer, true};
      if (!take_header(peer, blocking ? &context : nullptr, c.all[peer])) return;
      c.have[peer] = true;
    }
    const std::shared_ptr<StartedCollective> keep = started_.front();
    started_.pop_front();
    apply_verdict(c.all, c.same_shape);  // the same verdict on every rank
    trace::FlightRecorder::instance().set_state(c.flight_entry, trace::FlightState::matched);
    c.post_data(c.requests);
    c.post_data = nullptr;  // it holds the buffers, which keep_alive now keeps (until completion)
    c.data_posted = true;
    if (&c == until) return;
  }
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_allreduce_sum(const Tensor& x, std::uint64_t digest,
                                                                        const char* operation, bool in_place, CallSite site) {
  FlightCall flight(*this, site);
  check_defined(x, operation);
  // A device transport moves CUDA tensors in device order already: the blocking form.
  if (moves_on_device(x)) return Communicator::start_allreduce_sum(x, digest, operation, in_place, site);
  const MPI_Datatype type = mpi_type(x.dtype(), operation);
  const int count = checked_int(x.nbytes(), operation) / static_cast<int>(dtype_size(x.dtype()));
  Header mine = collective_header(OpKind::allreduce, -1, &x);
  mine.digest = digest;
  const Tensor send = comm_detail::host_for_mpi(x);
  if (hierarchical_) return start_hierarchical_sum(x, send, type, kChunkBytes / dtype_size(x.dtype()), mine, operation);
  // In place on the host: the sum lands in x's own memory (a CUDA x's host copy is ours anyway).
  const bool same = in_place || !x.device().is_cpu();
  Tensor y = same ? send : Tensor(x.shape(), x.dtype());
  MPI_Comm comm = comm_;
  auto post = [send, y, count, type, comm, same](std::vector<MPI_Request>& requests) mutable {
    requests.emplace_back();
    check_mpi(MPI_Iallreduce(same ? MPI_IN_PLACE : send.raw_data(), y.raw_data(), count, type, MPI_SUM, comm,
                             &requests.back()),
              "MPI_Iallreduce");
  };
  return start_collective(mine, true, operation, post, KeepAlive{send.storage(), y.storage()}, y, x.device());
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_reduce_scatter_sum(const Tensor& x, std::uint64_t digest,
                                                                             const char* operation, CallSite site) {
  FlightCall flight(*this, site);
  const std::vector<Tensor> stripes = comm_detail::reduce_scatter_stripes(x, size_, operation);
  if (moves_on_device(x)) return Communicator::start_reduce_scatter_sum(x, digest, operation, site);
  const MPI_Datatype type = mpi_type(x.dtype(), operation);
  Header mine = collective_header(OpKind::reduce_scatter, -1, &x);
  mine.digest = digest;
  const Tensor send = comm_detail::host_for_mpi(x);
  Tensor y(stripes[0].shape(), x.dtype());
  const int count = checked_int(y.nbytes(), operation) / static_cast<int>(dtype_size(x.dtype()));
  MPI_Comm comm = comm_;
  auto post = [send, y, count, type, comm](std::vector<MPI_Request>& requests) mutable {
    requests.emplace_back();
    check_mpi(MPI_Ireduce_scatter_block(send.raw_data(), y.raw_data(), count, type, MPI_SUM, comm, &requests.back()),
              "MPI_Ireduce_scatter_block");
  };
  return start_collective(mine, true, operation, post, KeepAlive{send.storage(), y.storage()}, y, x.device());
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_allgather(const Tensor& x, std::uint64_t digest,
                                                                    const char* operation, CallSite site) {
  FlightCall flight(*this, site);
  check_defined(x, operation);
  if (moves_on_device(x)) return Communicator::start_allgather(x, digest, operation, site);
  Header mine = collective_header(OpKind::allgather, -1, &x);
  mine.digest = digest;
  const Tensor send = comm_detail::host_for_mpi(x);
  Tensor y({size_ * x.numel()}, x.dtype());
  const int count = checked_int(x.nbytes(), operation);
  checked_int(y.nbytes(), operation);
  MPI_Comm comm = comm_;
  // same_shape: the headers' verdict makes every rank's piece the size the buffers assume.
  auto post = [send, y, count, comm](std::vector<MPI_Request>& requests) mutable {
    requests.emplace_back();
    check_mpi(MPI_Iallgather(send.raw_data(), count, MPI_BYTE, y.raw_data(), count, MPI_BYTE, comm, &requests.back()),
              "MPI_Iallgather");
  };
  return start_collective(mine, true, operation, post, KeepAlive{send.storage(), y.storage()}, y, x.device());
}

}  // namespace tandem
