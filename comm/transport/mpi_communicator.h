// The "naive" communicator: MPI (MPICH) point-to-point and collectives, and the base of
// "pure_nccl" (comm/transport/nccl_communicator.h).
//
// Point-to-point messages travel on the user's tag: one message (header plus payload) up to
// kInlineBytes, otherwise the header and then the payload, sent from and received into the
// tensors' own memory. A collective first exchanges headers with every peer on a reserved tag
// (which makes a mismatch between ranks an error on every rank, and makes a peer that entered
// a collective visible to a rank waiting for it elsewhere), then moves the data with the MPI
// collective.
//
// CUDA tensors: "naive" copies them to host memory (through the backend's copies, which wait
// for the kernels that produce them), moves the bytes with MPI, and copies what arrives to the
// device where it lands (communicator.h). A subclass that moves CUDA tensors itself (pure_nccl)
// overrides the device_* members below: the headers, the checks and the placement of results
// stay here, so both communicators behave alike and differ only in how the bytes move.
#pragma once

#include <mpi.h>

#include <deque>
#include <functional>
#include <map>
#include <unordered_map>

#include "comm/trace/flight_recorder.h"
#include "comm/transport/communicator.h"
#include "comm/transport/direct_read.h"
#include "comm/transport/lazy_text.h"
#include "comm/transport/mpi_records.h"
#include "comm/transport/traffic_ledger.h"
#include "core/function_ref.h"

namespace tandem {

namespace comm_detail {
class HostHierarchy;
}

class MpiCommunicator : public Communicator {
 public:
  // Works on a duplicate of comm; the caller keeps (and frees) its own. Collective over comm.
  static std::shared_ptr<MpiCommunicator> create(MPI_Comm comm);
  ~MpiCommunicator() override;

  std::string name() const override { return hierarchy_ ? "hierarchical" : "naive"; }
  MPI_Comm mpi_comm() const { return comm_; }

  // "hierarchical" (ChainerMN's name): every allreduce (blocking or started; data
  // parallelism's) becomes a sum onto the first rank of each host, an allreduce among those ranks,
  // and a broadcast within each host (comm_detail::HostHierarchy), so each host sends its sum over the
  // network once instead of every rank sending its own. Everything else, the headers and their
  // checks included (on all ranks of the communicator), is the flat communicator's. Collective;
  // a split of a hierarchical communicator is hierarchical too.
  void make_hierarchical();
  bool hierarchical() const { return hierarchy_ != nullptr; }

  std::shared_ptr<Communicator> split(int color, int key, CallSite site = CallSite::current()) override;
  void barrier(CallSite site = CallSite::current()) override;

  // The overloads that take a landing device (communicator.h) stay visible beside the overrides.
  using Communicator::bcast;
  using Communicator::gather;
  using Communicator::scatter;
  Tensor bcast(const Tensor& x, int root, CallSite site = CallSite::current()) override;
  std::vector<Tensor> gather(const Tensor& x, int root, CallSite site = CallSite::current()) override;
  Tensor scatter(const std::vector<Tensor>& xs, int root, CallSite site = CallSite::current()) override;
  std::vector<Tensor> allgather(const Tensor& x, CallSite site = CallSite::current()) override;
  std::vector<Tensor> alltoall(const std::vector<Tensor>& xs, CallSite site = CallSite::current()) override;
  AlltoallvResult alltoallv(const Tensor& x, const std::vector<std::int64_t>& send_counts, CallSite site = CallSite::current()) override;
  Tensor allreduce(const Tensor& x, AllreduceOp op, CallSite site = CallSite::current()) override;
  Tensor reduce(const Tensor& x, int root, CallSite site = CallSite::current()) override;
  Tensor reduce_scatter(const std::vector<Tensor>& xs, CallSite site = CallSite::current()) override;

  void send_obj(const std::string& bytes, int dest, int tag, CallSite site = CallSite::current()) override;
  std::string recv_obj(int source, int tag, CallSite site = CallSite::current()) override;
  std::string bcast_obj(const std::string& bytes, int root, CallSite site = CallSite::current()) override;
  std::vector<std::string> gather_obj(const std::string& bytes, int root, CallSite site = CallSite::current()) override;

  Tensor bcast_checked(const Tensor& x, int root, std::uint64_t digest, const char* operation, CallSite site = CallSite::current()) override;
  Tensor allreduce_checked(const Tensor& x, AllreduceOp op, std::uint64_t digest, const char* operation, CallSite site = CallSite::current()) override;
  std::unique_ptr<PendingCollective> start_allreduce_sum(const Tensor& x, std::uint64_t digest,
                                                         const char* operation, bool in_place, CallSite site = CallSite::current()) override;
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const Tensor& x, std::uint64_t digest,
                                                              const char* operation, CallSite site = CallSite::current()) override;
  std::unique_ptr<PendingCollective> start_allgather(const Tensor& x, std::uint64_t digest, const char* operation,
                                                     CallSite site = CallSite::current()) override;

  void send_message(const Tensor& x, int dest, int tag, const MessageOptions& options, CallSite site = CallSite::current()) override;
  void wait_sends(CallSite site = CallSite::current()) override;
  std::size_t pending_sends() override;
  ReceivedMessage recv_message(int source, int tag, const MessageExpectation& expect, CallSite site = CallSite::current()) override;

  // Point-to-point payloads up to this size travel inside the header's message.
  static constexpr std::size_t kInlineBytes = 8192;
  // A collective's tensor travels inside its headers when it has at most this many bytes and all
  // its copies (one to each peer) at most kInlineCollectiveTotal: then an exchange of small
  // messages beats a header exchange followed by MPI's collective (bench ids tandem.mpi.<op>.4B
  // against mpi.<op>.4B: docs/performance.md, "Communication"), while larger ones cost more moved
  // bytes than they save.
  static constexpr std::size_t kInlineCollectiveBytes = 4096;
  static constexpr std::size_t kInlineCollectiveTotal = 32768;
  // Whether x travels inside headers to every peer (the same rule on every rank: a collective's
  // ranks whose tensors agree decide alike).
  bool inlines(const Tensor& x) const;
  // With a device transport, point-to-point payloads of CUDA tensors from this size on travel on
  // it; smaller ones through host memory, as "naive" sends them. The transport's send waits
  // until the receiver takes the message (see send_message), which MPI does for large messages
  // too; below this size a send returns at once, so that a ring of small messages (every rank
  // sending before it receives) works as it does with "naive".
  static constexpr std::size_t kDevicePayloadBytes = std::size_t(64) << 10;
  // The tag of collective headers (above every user tag).
  static constexpr int kCollectiveTag = kMaxUserTag + 1;
  // The tag of alltoall(v) pieces and bcast payloads sent with their headers (kDataEager in message.h); used where
  // MPI's tag bound allows it (MPICH: 2^28 - 1), else those exchanges wait for the headers.
  static constexpr int kEagerDataTag = kCollectiveTag + 1;
  // The tag of the word a receiver sends back once it has read a piece that stayed in the
  // sender's memory (kDataInMemory in message.h): 0, or the errno of the failed read.
  static constexpr int kReadDoneTag = kCollectiveTag + 2;
  // Pieces and payloads from this size on go beside their headers by the receiver reading them
  // straight out of the sender's memory (direct_read.h), where it can; below, MPI's own paths cost
  // less (docs/performance.md, "Large tensors are read straight from the sender's memory").
  static constexpr std::size_t kDirectReadMinBytes = std::size_t(64) << 10;
  // Whether this rank reads what `peer` leaves in its memory (same host name, the kernel allows
  // it, TANDEM_DIRECT_READ not 0 on either rank), decided when the communicator was created.
  bool reads_memory_of(int peer) const { return !reads_from_.empty() && reads_from_[peer] != 0; }

 protected:
  // Takes ownership of `owned` (freed by the destructor). Collective over it.
  explicit MpiCommunicator(MPI_Comm owned);


  using Header = comm_detail::MessageHeader;

  // Runs split's header exchange and MPI_Comm_split: the part this rank belongs to.
  MPI_Comm split_mpi(int color, int key);
  // Whether a collective failed in flight, so that no further one may run.
  bool broken() const { return !broken_.empty(); }

  // --- the device transport (pure_nccl) ------------------------------------------------------
  // Whether this communicator moves CUDA tensors itself instead of staging them through host
  // memory for MPI. When it does, the ranks of a collective must agree on the kind of their
  // tensors (the header exchange checks it), and the members below move the bytes of CUDA
  // tensors. Each is called once the headers agree (point to point: once the receiver has
  // matched the header), by every rank concerned, in the same order on every rank; their
  // tensors are on transport_device(), contiguous, of one dtype and of the sizes the headers
  // promised, and none is empty unless noted. The results are queued in device order: a
  // kernel queued later on the device sees them.
  virtual bool moves_device_tensors() const { return false; }
  virtual Device transport_device() const { return device(); }
  virtual void device_send(const Tensor& x, int dest);
  virtual void device_recv(Tensor& y, int source);
  // buffer: the root's tensor at the root, the destination elsewhere.
  virtual void device_bcast(Tensor& buffer, int root);
  // pieces (the root only): one destination per rank, possibly empty; the root's own included.
  virtual void device_gather(const Tensor& x, std::vector<Tensor>& pieces, int root);
  // xs (the root only): one per rank, possibly empty. y: the destination away from the root.
  virtual void device_scatter(const std::vector<Tensor>& xs, Tensor& y, int root);
  // pieces: one destination per rank, possibly empty, consecutive views of flat.
  virtual void device_allgather(const Tensor& x, Tensor& flat, std::vector<Tensor>& pieces);
  // xs[j] goes to rank j; pieces[j] receives from rank j; either may be empty.
  virtual void device_alltoall(const std::vector<Tensor>& xs, std::vector<Tensor>& pieces);
  // Element-wise sums (f32, f64, i32, i64).
  virtual void device_allreduce(const Tensor& x, Tensor& y);
  virtual void device_reduce(const Tensor& x, Tensor& y, int root);  // y: the root only
  // xs[i] (possibly empty; the same size on every rank) is summed into rank i's y.
  virtual void device_reduce_scatter(const std::vector<Tensor>& xs, Tensor& y);

 protected:
  // --- the flight recorder (comm/trace/flight_recorder.h) -----------------------------------
  // Every public member opens one for its call: the entries recorded inside it (by the header
  // exchange, send_bytes, recv_message) carry the caller's site, and those that end with the
  // call are completed (or failed, when it throws) when it returns. A member called from
  // another (bcast from bcast_checked) joins the outer call.
  class FlightCall {
   public:
    FlightCall(MpiCommunicator& comm, const CallSite& site);
    ~FlightCall();
    FlightCall(const FlightCall&) = delete;
    FlightCall& operator=(const FlightCall&) = delete;

   private:
    friend class MpiCommunicator;
    MpiCommunicator& comm_;
    bool outer_;
    CallSite user_, direct_;
    int uncaught_;
    // The entries that end with the call. A call makes one or two, so the first four are kept
    // in place, not in a heap block (one allocation less in every small collective).
    class EndingIds {
     public:
      void push_back(std::int64_t id) {
        if (few_count_ < 4) few_[few_count_++] = id;
        else more_.push_back(id);
      }
      bool empty() const { return few_count_ == 0; }
      std::int64_t back() const { return more_.empty() ? few_[few_count_ - 1] : more_.back(); }
      void pop_back() {
        if (!more_.empty()) more_.pop_back();
        else --few_count_;
      }
      template <typename F>
      void for_each(F&& f) const {
        for (int i = 0; i < few_count_; ++i) f(few_[i]);
        for (std::int64_t id : more_) f(id);
      }

     private:
      std::int64_t few_[4] = {};
      int few_count_ = 0;
      std::vector<std::int64_t> more_;
    };
    EndingIds ending_;
  };
  FlightCall* flight_call_ = nullptr;
  // Records an entry for this communicator (its id, rank and the current call's sites); returns
  // its id (-1 when the recorder is off). ends_with_call: completed when the public call returns
  // (false for an isend or a started collective, completed later).
  // shape: the entry's shape, when the entry does not carry it (see FlightRecorder::record).
  std::int64_t flight_record(trace::FlightEntry entry, bool ends_with_call = true,
                             const Shape* shape = nullptr);
  // The entry of the collective whose headers this rank posted last.
  std::int64_t collective_entry_ = -1;

 private:
  friend class MpiPendingCollective;  // mpi_pending.cc

  // --- waiting (mpi_wait.cc) ----------------------------------------------------------------
  using KeepAlive = comm_detail::KeepAlive;
  using WaitContext = comm_detail::WaitContext;
  using InlineData = comm_detail::InlineData;
  using ReadDone = comm_detail::ReadDone;
  using DirectReads = comm_detail::DirectReads;
  using StartedCollective = comm_detail::StartedCollective;
  using StartedStages = comm_detail::StartedStages;
  using ArrivedHeader = comm_detail::ArrivedHeader;
  using Orphan = comm_detail::Orphan;
  using PendingSend = comm_detail::PendingSend;
  using FlatExchange = comm_detail::FlatExchange;
  using PieceOptions = comm_detail::PieceOptions;
  // Waits for a message from (source, tag) and receives it whole (its first part, when the
  // payload follows separately).
  std::vector<char> receive_message_bytes(int source, int tag, const WaitContext& context);
  // The same into `bytes` (resized to the message; its capacity reused).
  void receive_message_bytes(int source, int tag, const WaitContext& context, std::vector<char>& bytes);
  // Receives a whole message from (source, tag) into bytes if one has arrived; no waiting.
  bool try_receive(int source, int tag, std::vector<char>& bytes);
  // Completes requests, diagnosing and timing out as receive_message_bytes does. When the wait
  // fails, the requests still in flight and their buffers (keep_alive) are set aside and
  // completed later, so MPI never touches freed memory.
  void wait_all(std::vector<MPI_Request>& requests, const WaitContext& context, KeepAlive keep_alive = {});
  // The same, keep_alive copied into the orphan only when the wait fails (the caller keeps its own).
  void wait_all_keeping(std::vector<MPI_Request>& requests, const WaitContext& context, const KeepAlive& keep_alive);
  // Whether every request has completed, without running MPI's progress engine when they have.
  static bool all_complete(std::vector<MPI_Request>& requests);
  // Completes what failed waits set aside, as far as it has arrived.
  void reap_orphans();
  // Called now and then while waiting on a peer: throws when the wait can never end.
  void diagnose_wait(const WaitContext& context, double waited_seconds);
  [[noreturn]] void fail_timeout(const WaitContext& context, double waited_seconds);
  // Whether the peer announced the end of its program (mpi_env.h) long enough ago that what it
  // sent before has arrived.
  bool peer_finished(int peer);
  // "; messages sent and never received: ..." between this rank and a peer that has finished or
  // failed, from the peer's report (traffic_ledger.h); "" when every message was matched.
  std::string never_received(const comm_detail::TrafficReport& report, int world_peer) const;
  // "rank 2" in this communicator, or "world rank 5" for a process outside it.
  std::string who(int world_peer) const;
  // The oldest collective header from the peer that no collective here has taken yet
  // (receiving one if it has arrived), or null.
  const Header* early_collective_header(int peer);
  std::string pending_from(int peer);

  // --- point to point (mpi_point_to_point.cc) -----------------------------------------------
  void check_peer(int peer, int tag, const char* operation) const;
  void send_bytes(Header header, const void* data, std::shared_ptr<const void> owner, int dest, int tag,
                  const char* operation, bool blocking = true);
  struct Incoming {
    comm_detail::DecodedMessage message;
    std::vector<char> bytes;
  };
  // Receives the payload (inline or the following message) into dst.
  void receive_payload(const Incoming& incoming, void* dst, std::shared_ptr<const void> owner, int source, int tag,
                       const WaitContext& context);
  // Runs the data phase of collective `sequence` (requests from MPI_I* calls) to completion.
  // closes: false for a stage of a data phase that goes on (the hierarchical allreduce's).
  // sequence: the collective's (default: the one whose headers went out last).
  void finish_collective(std::vector<MPI_Request>& requests, const char* operation, KeepAlive keep_alive,
                         bool closes = true, std::int64_t sequence = -1);
  // The hierarchical allreduce's data phase (mpi_hierarchical.cc): y = the sum over every rank
  // of send (host memory, of y's size), moved in pieces of at most chunk elements; blocking, or
  // started (its stages advanced by the pending collective's test and wait).
  void hierarchical_sum(const Tensor& send, Tensor& y, MPI_Datatype type, std::size_t chunk, const char* operation);
  // x: the caller's tensor; send: its bytes in host memory; mine: the header (digest set).
  std::unique_ptr<PendingCollective> start_hierarchical_sum(const Tensor& x, const Tensor& send, MPI_Datatype type,
                                                            std::size_t chunk, comm_detail::MessageHeader mine,
                                                            const char* operation);

  // --- collectives (mpi_collectives.cc) -----------------------------------------------------
  // Sends this rank's header for the next collective to every peer (header_for(peer) may vary
  // per peer), receives every peer's, and checks that they describe the same collective.
  // Returns the headers indexed by rank, this rank's own (header_for(rank)) included.
  // alltoall's exchange: xs[j] (one dtype, one kind) goes to rank j; what arrives, in rank
  // order, lies back to back in `flat` (on xs[0]'s device), headers[r].shape being rank r's
  // piece (the exchange's headers, kept: no list of shapes to allocate).
  // row_shape (alltoallv): every piece must be rows of this shape, on every rank.
  using PieceList = comm_detail::PieceList;
  FlatExchange exchange_pieces(const PieceList& xs, comm_detail::OpKind kind, const char* operation,
                               const Shape* row_shape, const PieceOptions& options);
  // same_for_all: header_for gives this header to every peer (then finished once, not per peer).
  std::vector<Header> exchange_headers(FunctionRef<Header(int peer)> header_for, bool same_shape,
                                       InlineData* inline_data = nullptr, const Header* same_for_all = nullptr);
  // The same with one header for every peer (most collectives).
  std::vector<Header> exchange_headers(const Header& mine, bool same_shape, InlineData* inline_data = nullptr);
  // exchange_headers in parts: post this rank's headers to every peer (the sends' requests and
  // buffers appended), take one peer's next collective header (blocking with a context, else
  // only if it has arrived), and the verdict (throws the disagreement error).
  std::int64_t post_headers(FunctionRef<Header(int peer)> header_for, std::vector<Header>& all,
                            std::vector<MPI_Request>& requests, KeepAlive& keep_alive,
                            const InlineData* inline_data = nullptr, const Header* same_for_all = nullptr);
  std::int64_t post_headers(const Header& mine, std::vector<Header>& all, std::vector<MPI_Request>& requests,
                            KeepAlive& keep_alive, const InlineData* inline_data = nullptr);
  // message/offset (optional): the whole message and where an inline payload starts in it.
  bool take_header(int peer, const WaitContext* blocking, Header& out, std::vector<char>* message = nullptr,
                   std::size_t* offset = nullptr);
  void check_headers(const std::vector<Header>& all, bool same_shape) const;
  // check_headers, and when the headers disagree, the peers' eager pieces for this rank
  // received and discarded first (each rank reaches the same verdict and discards what was sent
  // to it, so no message stays queued for a later exchange).
  void apply_verdict(const std::vector<Header>& all, bool same_shape);
  void discard_eager_data(const std::vector<Header>& all);
  // Throws when an earlier failure left this communicator unusable (broken_).
  void check_usable() const;
  // Whether kEagerDataTag is within MPI's tag bound here.
  bool eager_data_ = false;
  // --- direct reads (mpi_direct_read.cc) ----------------------------------------------------
  // Per rank: its pid, whether this rank reads its memory, whether it reads this rank's (all
  // empty where no peer can). Set by find_direct_readers at creation, from the identities the
  // ranks exchanged.
  std::vector<std::int64_t> peer_pid_;
  std::vector<char> reads_from_, read_by_;
  // allowed: the eager path and the read-done tag are available here.
  void find_direct_readers(const std::vector<comm_detail::ProcessIdentity>& identities,
                           const std::vector<bool>& same_host, bool allowed);
  // Whether this rank leaves `bytes` for `peer` in its memory instead of sending them.
  bool offers_memory_to(int peer, std::size_t bytes) const {
    return !read_by_.empty() && read_by_[peer] != 0 && bytes >= kDirectReadMinBytes;
  }
  // After the verdict. Each peer this rank left data for (offered[peer]) sends its word: a
  // receive for it joins `requests`.
  void await_reads(const std::vector<bool>& offered, std::int64_t sequence, DirectReads& reads,
                   std::vector<MPI_Request>& requests);
  // Reads `header`'s data (from rank `peer`'s memory) into `into` and sends the peer its word
  // (the send joins `requests`). A failed read is raised by settle_reads, after the wait.
  void read_memory_of(int peer, const Header& header, void* into, DirectReads& reads,
                      std::vector<MPI_Request>& requests, const char* operation);
  // After the collective's wait: words of earlier collectives are set aside and the right ones
  // awaited; then a read that failed, here or at a peer that read this rank's memory, is an
  // error on both ranks, naming both. `reads` lives in `keep_alive` (the receives write it).
  void settle_reads(DirectReads& reads, const char* operation, KeepAlive keep_alive);
  // A collective that failed before its data moved: what it left in memory stays there, for
  // peers that may still read it (a timeout here is not one there), to the end of the program.
  static void leave_offered(const KeepAlive& offered);
  // Whether small collectives carry their tensors inside their headers (kInlineCollectiveBytes).
  bool inline_collectives_ = true;
  // alltoall(v) with the pieces sent at once beside the headers (kDataEager): each peer's piece
  // is received as soon as its header says how long it is, while this rank's own moves, so the
  // data phase does not wait for the slowest rank to finish its header exchange.
  FlatExchange exchange_pieces_eagerly(const PieceList& xs, comm_detail::OpKind kind,
                                       const char* operation, const Shape* row_shape, const PieceOptions& options);
  // Up to this many ranks (and without a host hierarchy), allgather and allreduce of CPU tensors
  // exchange the whole tensors directly, beside their headers (exchange_pieces_eagerly), and
  // allreduce sums what arrived in rank order. At 2 ranks MPICH's allgather and allreduce take
  // several times as long as that exchange (bench/comm_bench: tandem.mpi.allgather.1MB and
  // tandem.mpi.allreduce.1MB against mpi.*; docs/performance.md, "Communication").
  static constexpr int kDirectRanks = 3;
  // allreduce exchanges tensors directly up to this size (beyond, each rank would receive and add
  // the whole tensor from every peer, where MPI's reduce-scatter splits the work).
  static constexpr std::size_t kDirectAllreduceBytes = std::size_t(1) << 22;
  bool exchanges_directly(const Tensor& x) const;
  // Up to this many ranks a bcast's root sends the payload to every peer with its header: as many
  // copies leave the root as in MPI's binomial tree, and the data phase does not wait for the
  // header exchange (bench id tandem.mpi.bcast.1MB: docs/performance.md, "Communication"). Beyond,
  // MPI's trees and scatter-allgather move less through the root.
  static constexpr int kEagerBcastRanks = 3;
  // The alltoallv verdict on the rows (every rank sees every rank's row shape).
  void check_rows(const std::vector<Header>& all, const Shape& row_shape, const char* operation) const;

  // --- collectives started now and completed later (start_*, mpi_collectives.cc) -------------
  // Their headers go out at once; the peers' are taken as they arrive (in the order the
  // collectives started), and the data phase is posted once they agree, so a rank never waits
  // for its peers to start.
  std::unique_ptr<PendingCollective> start_collective(Header mine, bool same_shape, const char* operation,
                                                      std::function<void(std::vector<MPI_Request>&)> post_data,
                                                      KeepAlive keep_alive, Tensor result, Device device,
                                                      StartedStages stages = {});
  // Takes the started collectives' headers in order and posts their data phases; blocking: until
  // `until`'s is posted (or all, when null); otherwise as far as the headers have arrived.
  void progress_started(const StartedCollective* until, bool blocking);
  void complete_started_headers() { progress_started(nullptr, true); }
  std::deque<std::shared_ptr<StartedCollective>> started_;
  // Moves on, without waiting, the started collectives of this process's other communicators
  // (their header exchanges and hierarchical stages): called by every blocking wait. A rank
  // blocked on one communicator must still post the data phases it started on another, whose
  // peers may be waiting for them before they can reach this wait (MPI's progress rule, which
  // covers only what has been posted to MPI). Without it, rank 0 waiting for bucket #3 on one
  // communicator and rank 1 (whose #3 had not seen rank 0's header yet) blocked in a
  // parameter gather on another hang each other.
  void progress_other_communicators();
  Header collective_header(comm_detail::OpKind kind, int root, const Tensor* typed);
  void check_root(int root, const char* operation) const;
  void check_defined(const Tensor& x, const char* operation) const;
  // pure_nccl: the tensors of one rank's list must be all CUDA or all CPU, so that every peer
  // takes the same path.
  void check_one_kind(const std::vector<Tensor>& xs, const char* operation) const;
  // Whether a collective's data moves on the device: this communicator moves CUDA tensors and
  // the (agreed) typed headers describe CUDA tensors.
  bool on_device(const std::vector<Header>& all) const;
  // Whether this rank's x would move on the device transport (the header exchange checks that
  // the peers agree), and x on transport_device() if so (else undefined): collectives make their
  // transport copies before the exchange (see run_device_phase in mpi_collectives.cc).
  bool moves_on_device(const Tensor& x) const;
  Tensor transport_copy(const Tensor& x) const;
  // Where a tensor that this rank receives without passing one lands (communicator.h).
  Device landing(const Header& header) const;
  // Runs a device data phase as finish_collective runs an MPI one: a failure breaks the
  // communicator (the peers' halves stay queued). Everything after the header exchange that can
  // throw (allocations sized by the peers' headers included) runs inside it.
  template <typename F>
  void run_device_phase(const char* operation, F&& phase);

  MPI_Comm comm_ = MPI_COMM_NULL;
  // make_hierarchical: the ranks of this rank's host and the first rank of every host, with the
  // started hierarchical sums (null: the flat communicator).
  std::unique_ptr<comm_detail::HostHierarchy> hierarchy_;
  std::vector<int> world_rank_of_;  // rank in this communicator -> rank in MPI_COMM_WORLD
  // Point-to-point counts and the last headers sent, per peer and tag (traffic_ledger.h): the
  // sequence numbers of the headers, the end-of-program check and the deadlock probes.
  std::shared_ptr<comm_detail::TrafficBook> book_;
  std::int64_t collective_sequence_ = 0;
  // True from a collective's header exchange until its data phase completes: still true at the
  // next collective means this rank gave the previous one up (its wait failed), which the next
  // header tells the peers, so that one still waiting for it fails instead of hanging.
  bool collective_open_ = false;
  // Set when a collective's data phase fails: its MPI request stays posted and MPI would pair it
  // with this rank's next collective call, so no further collective may run here.
  std::string broken_;
  std::map<int, std::deque<ArrivedHeader>> early_collective_headers_;
  std::vector<Orphan> orphans_;
  // What the last header exchange used, kept for the next (their capacity): the header messages'
  // buffers (reused only when nothing else, such as an orphan, still holds them), the sends'
  // requests and their owners (exchange_headers, post_headers).
  std::shared_ptr<std::vector<std::vector<char>>> spare_header_buffers_;
  std::vector<MPI_Request> spare_requests_;
  KeepAlive spare_keep_alive_;
  // The same for a blocking send's message (send_bytes).
  std::shared_ptr<std::vector<char>> spare_send_buffer_;
  std::vector<MPI_Request> spare_send_requests_;
  KeepAlive spare_send_keep_alive_;
  // A received message's bytes, once read (recv_message, take_header): the next one's room.
  std::vector<char> spare_received_;
  // The last small collective's list of arrived messages (InlineData), emptied: its capacity.
  std::vector<InlineData::Arrived> spare_arrived_;
  // "send f32[3] (tag 0, message #2) to rank 1": read only when a wait on the send fails.
  static std::string sent_text(const Header& header, int dest);
  std::deque<PendingSend> pending_sends_;
  // Completes the pending sends at the front that have gone; no waiting.
  void reap_pending_sends();
};

namespace comm_detail {
// A tensor's bytes in host memory, for MPI: the tensor itself on the CPU, else a copy in pinned
// memory (the GPU writes it by DMA, without the driver's staging through its own buffer).
inline Tensor host_for_mpi(const Tensor& x) { return x.device().is_cpu() ? x : x.pin_memory(); }
// The same without copying a host tensor's handle (its shape: an allocation in every small
// collective): x itself on the host, else its pinned copy, kept in `copy`.
inline const Tensor& host_view_for_mpi(const Tensor& x, Tensor& copy) {
  if (x.device().is_cpu()) return x;
  copy = x.pin_memory();
  return copy;
}
// A host buffer for bytes that go on to `bound_for`: pinned when that is a GPU.
inline Tensor host_buffer(const Shape& shape, DType dtype, const Device& bound_for) {
  return bound_for.is_cpu() ? Tensor(shape, dtype) : empty_pinned(shape, dtype);
}
}  // namespace comm_detail

// A communicator over an existing MPI communicator (a duplicate of it; collective over comm).
// name: "naive" or "pure_nccl" (communicator.h).
CommunicatorPtr create_communicator(const std::string& name, MPI_Comm comm);

}  // namespace tandem
