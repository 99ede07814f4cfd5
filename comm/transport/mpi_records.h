// The records the MPI communicator (mpi_communicator.h) keeps while it moves bytes: what a wait
// is for, the small collectives' data that came inside their headers, the direct reads' words,
// the collectives started and not yet complete, sends in flight and requests set aside. Plain
// data, internal to comm/transport.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/transport/lazy_text.h"
#include "comm/transport/message.h"
#include "core/tensor.h"

namespace tandem::comm_detail {

// Buffers an MPI request reads or writes: kept alive until the request completes.
using KeepAlive = std::vector<std::shared_ptr<const void>>;

// The pieces of an exchange, one per rank: a list, or one tensor for every rank (allgather's
// and allreduce's), without copying it per rank.
class PieceList {
 public:
  PieceList(const std::vector<Tensor>& list) : data_(list.data()), size_(list.size()) {}  // NOLINT
  static PieceList same_for_all(const Tensor& x, int ranks) { return PieceList(&x, ranks, true); }
  const Tensor& operator[](std::size_t rank) const { return data_[same_ ? 0 : rank]; }
  std::size_t size() const { return size_; }
  std::vector<Tensor> to_vector() const;

 private:
  PieceList(const Tensor* data, int ranks, bool same)
      : data_(data), size_(static_cast<std::size_t>(ranks)), same_(same) {}
  const Tensor* data_;
  std::size_t size_;
  bool same_ = false;
};

// What a rank is doing while it waits, for the diagnosis and the errors.
struct WaitContext {
  LazyText operation;  // "recv (tag 0)"; built when a wait is diagnosed or fails
  int peer;
  bool in_collective;
  // In a collective's data phase: its sequence number (a peer that has moved on to a later
  // collective has given this one up). -1 elsewhere.
  std::int64_t data_phase = -1;
  // Waiting for the payload of a point-to-point message whose header has arrived: the sender
  // has posted it, so it completes as the sender goes on making MPI calls, in a collective too
  // (the sender may have sent it with isend and moved on). Only the sender's end or failure
  // can stop it.
  bool payload = false;
  // A point-to-point receive's tag (-1 elsewhere): the diagnosis looks for the wanted message
  // once more after it has found the peer's collective header (see diagnose_wait).
  int tag = -1;
};

// Small collectives' data travels inside the headers (kFlagInlinePayload, which header_for
// sets on the headers that carry it): a collective whose every relevant header carries its
// data needs no data phase, one exchange of messages instead of two (kInlineCollectiveBytes).
struct InlineData {
  const Tensor* to_all = nullptr;                 // the tensor in the header for every peer,
  const PieceList* per_peer = nullptr;            // or one per peer (alltoall)
  // Per rank: its header's message as it arrived, and where the payload starts in it.
  struct Arrived {
    std::vector<char> message;
    std::size_t offset = 0;
  };
  std::vector<Arrived> arrived;
  const char* payload(int rank) const { return arrived[rank].message.data() + arrived[rank].offset; }
  // Where a message's room goes back when the collective is done with it (the communicator's
  // spare_received_, set by exchange_headers): the next message lands there.
  std::vector<char>* spare = nullptr;
  // And where the list goes back (the communicator's spare_arrived_): the next one is in it.
  std::vector<Arrived>* spare_list = nullptr;
  InlineData() = default;
  InlineData(const InlineData&) = delete;
  InlineData& operator=(const InlineData&) = delete;
  ~InlineData() {
    if (!spare) return;
    for (Arrived& a : arrived)
      if (a.message.capacity() > spare->capacity()) *spare = std::move(a.message);
    arrived.clear();
    if (arrived.capacity() > spare_list->capacity()) *spare_list = std::move(arrived);
  }
};

// The word a reader sends back: which collective, and 0 or the errno of its failed read. A
// sender that gave a collective up (its wait failed) left its data in memory (kept to the
// end of the program) and may get such a word during a later collective, even on a later
// communicator (MPI reuses a freed communicator's context for a new one): the communicator's
// id (the ledger's, unique in the job) and the sequence tell it apart.
struct ReadDone {
  std::int64_t sequence = -1;
  std::int32_t error = 0;
  std::int32_t communicator = -1;
};

// The words of one collective, per rank: from the peers that read this rank's memory, and to
// the peers whose memory this rank read.
struct DirectReads {
  std::int64_t sequence = -1;
  std::vector<ReadDone> from, to;
  std::vector<bool> awaited;
};

// A collective started now and completed later (Communicator::start_*), as far as it has got.
struct StartedCollective {
  std::vector<MessageHeader> all;
  std::vector<bool> have;  // per rank: its header is in `all`
  bool same_shape = true;
  std::vector<MPI_Request> requests;  // the header sends, then the data phase
  KeepAlive keep_alive;
  std::function<void(std::vector<MPI_Request>&)> post_data;
  bool data_posted = false;
  // A data phase in stages (StartedStages below); empty: post_data posts it all.
  std::function<bool(bool blocking, std::vector<MPI_Request>& requests)> advance;
  std::function<std::vector<MPI_Request>()> stage_requests;
  std::string operation;
  std::int64_t sequence = 0;
  std::int64_t flight_entry = -1;
};

// A data phase in stages (the hierarchical allreduce): advance posts the stages whose inputs
// have arrived (blocking: waits for each in turn), appends the last stage's requests to
// `requests` once every stage is posted, and returns whether they are; stage_requests lists
// the requests it has not handed over (set aside when the collective is dropped or fails).
struct StartedStages {
  std::function<bool(bool blocking, std::vector<MPI_Request>& requests)> advance;
  std::function<std::vector<MPI_Request>()> stage_requests;
};

// Collective headers received early (while diagnosing a wait), per peer, oldest first.
struct ArrivedHeader {
  MessageHeader header;
  std::vector<char> message;  // kept for an inline payload (else empty)
  std::size_t payload_at = 0;
};

// Requests a failed wait set aside, with their buffers: completed later (reap_orphans).
struct Orphan {
  std::vector<MPI_Request> requests;
  KeepAlive keep_alive;
};

// Sends posted by isend, oldest first, completed in order.
struct PendingSend {
  std::vector<MPI_Request> requests;
  KeepAlive keep_alive;
  MessageHeader header;  // what was sent, for the text of a failed wait (built then: see sent_text)
  int dest;
  std::int64_t flight_entry = -1;
};

// What an exchange of pieces received: back to back in `flat`, headers[r].shape being rank r's.
struct FlatExchange {
  Tensor flat;
  std::vector<MessageHeader> headers;
};

// What allgather and allreduce add to the pieces' headers when they exchange their tensors so.
struct PieceOptions {
  std::int32_t reduce_op = 0;
  std::uint64_t digest = 0;
  bool same_shape = false;
};

}  // namespace tandem::comm_detail
