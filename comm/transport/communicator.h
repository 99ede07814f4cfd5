// Communicators: tensor and object traffic between the processes of an MPI job.
//
// create_communicator("naive") wraps MPI (MPICH); create_communicator("pure_nccl") moves CUDA
// tensors with NCCL and everything else with MPI. A communicator is created collectively (every
// rank of the MPI communicator it wraps calls create_communicator in the same order), and every
// collective member below must be called by all of its ranks in the same order, as in MPI.
//
// Tensors may be on any device, and ranks may differ (a CPU rank may send to a GPU rank: the
// bytes are the same). "naive" stages CUDA tensors through host memory for MPI; "pure_nccl"
// moves them on the GPU, in the order of the kernels queued on their device, and needs every
// rank of a collective to pass tensors of the same kind (all CUDA or all CPU).
// Where results land:
// - on the device of the tensor this rank passed (for a list, of its first tensor): allreduce,
//   allgather, alltoall, reduce, reduce_scatter, gather at the root;
// - where this rank passes none (recv, and bcast or scatter away from the root): on the CPU when
//   the sender's tensor was on the CPU, otherwise on device(): this rank's GPU for "pure_nccl",
//   the CPU for "naive" unless set_device chose a GPU. The differentiable functions refine this
//   (comm/functions): a received variable lands on the device of the delegate passed with it,
//   or of recv's `device` argument (as ChainerMN's recv(..., device)).
//
// Nothing here can hang silently or deliver garbage: every message carries a header (the
// operation, dtype, shape and a sequence number per peer and tag; see message.h), so a
// receiver never needs to know what it receives and a mismatch is an error naming both
// operations. A wait that cannot end (the peer entered a collective this rank has not,
// finished or failed, or the ranks form a cycle of receives: comm/transport/deadlock.h) is an error as
// soon as it is certain; TANDEM_COMM_TIMEOUT=<seconds> (or set_timeout) bounds every other wait.
// A message that nobody receives fails the job at MPI_Finalize, both ranks naming it
// (comm/transport/traffic_ledger.h). An exception that escapes main() on one rank tells the other ranks
// and aborts the whole job (MPI_Abort) with its message on stderr.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/transport/message.h"
#include "core/call_site.h"
#include "core/tensor.h"

namespace tandem {

enum class AllreduceOp { sum, mean };

// The largest tag a user may pass (tags above it are reserved for collectives).
inline constexpr int kMaxUserTag = 32766;

// What a layer built on the transport adds to a point-to-point message (message.h): its kind
// (layer_message for a layer's own protocol), the layer's name for it and its own bits, and the
// message's place in a list of tensors.
struct MessageOptions {
  comm_detail::OpKind kind = comm_detail::OpKind::tensor_send;
  std::string label;              // layer_message: what the layer calls it ("activation")
  std::uint8_t layer_flags = 0;   // layer_message: the layer's bits, carried as they are
  std::uint8_t flags = 0;         // transport flags: kFlagList
  std::uint32_t list_index = 0;
  std::uint32_t list_size = 1;
  // false: return once the message is posted, without waiting for the receiver (isend).
  bool blocking = true;
  // Carried in the header's aux field for the receiver (a layer's number, e.g. a microbatch).
  std::int64_t aux = -1;
  // The sending operation's name, for the flight recorder and errors ("send", "recv backward").
  const char* operation = "send";
};

// What a receive expects, checked against the header that arrives.
struct MessageExpectation {
  comm_detail::OpKind kind = comm_detail::OpKind::tensor_send;
  std::string operation;      // the receiving operation, for errors: "send backward"
  // layer_message: what the receiver expects, for errors ("an activation"); the layer checks
  // the label and layer flags of what arrives itself.
  std::string expects;
  bool check_tensor = false;  // whether dtype and shape below must match
  DType dtype = DType::f32;
  Shape shape;
  std::uint32_t list_index = 0;  // checked when check_list
  bool check_list = false;
};

// What alltoallv returns: the rows every rank sent here, concatenated in rank order, and how
// many came from each rank.
struct AlltoallvResult {
  Tensor y;
  std::vector<std::int64_t> recv_counts;
};

struct ReceivedMessage {
  comm_detail::MessageHeader header;
  Tensor tensor;
};

// A collective whose data moves while this rank computes (the data-parallel buckets of
// comm/data_parallel): Communicator::start_* exchange and check the headers as every
// collective does, then post the data movement and return. test() moves it on without blocking
// (MPI progresses only inside MPI calls, so a caller that computes calls it now and then);
// wait() completes it, with the same diagnosis as any wait, and returns the result. Dropping
// one unfinished is safe (its buffers stay alive until MPI is done with them) but leaves its
// result unread.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual bool test() = 0;
  virtual Tensor wait() = 0;
};

class Communicator : public std::enable_shared_from_this<Communicator> {
 public:
  virtual ~Communicator() = default;

  // "naive", "hierarchical" or "pure_nccl".
  virtual std::string name() const = 0;
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ranks on this host (same processor name, or TANDEM_HOST_NAME where set) and hosts:
  // intra_rank is this process's index among the ranks on its host, inter_rank its host's
  // index among the hosts (ordered by their lowest rank).
  int intra_rank() const { return intra_rank_; }
  int intra_size() const { return intra_size_; }
  int inter_rank() const { return inter_rank_; }
  int inter_size() const { return inter_size_; }

  // Where CUDA tensors sent to a rank that passes no tensor of its own land (see the top of this
  // file): "pure_nccl": its GPU, cuda:(intra_rank() % number of GPUs), as in ChainerMN; "naive":
  // the CPU until set. A CUDA device that is not the one pure_nccl communicates on costs a copy.
  const Device& device() const { return device_; }
  void set_device(const Device& device) { device_ = device; }

  // Waits longer than this many seconds become errors; 0 waits forever. Defaults to
  // TANDEM_COMM_TIMEOUT (unset: forever).
  void set_timeout(double seconds) { timeout_seconds_ = seconds; }
  double timeout() const { return timeout_seconds_; }

  // A new communicator of the ranks that pass the same color, ordered by key (then by rank).
  virtual std::shared_ptr<Communicator> split(int color, int key, CallSite site = CallSite::current()) = 0;
  virtual void barrier(CallSite site = CallSite::current()) = 0;

  // --- tensors: any dtype; the receiver learns dtype and shape from the message -------------
  // recv, bcast, gather and scatter take where their results land as the last argument, as the
  // differentiable functions do: `device` (nullopt: where the top of this file says).
  void send(const Tensor& x, int dest, int tag = 0, CallSite site = CallSite::current()) { send_message(x, dest, tag, MessageOptions{}, site); }
  // A send that never waits for the receiver (send may, for a large message until the receiver
  // takes it): it returns once the message is posted. Messages to one (dest, tag) still arrive
  // in the order they were sent, isend or send. x's memory is kept alive until the message has
  // gone; changing x in place before then may change what arrives (as with MPI_Isend).
  // Posted sends complete in order as this rank goes on communicating; wait_sends() waits for
  // all of them (with the same diagnosis as any wait). Exception: with "pure_nccl", a CUDA
  // tensor of kDevicePayloadBytes or more still waits until the receiver matches its header.
  void isend(const Tensor& x, int dest, int tag = 0, CallSite site = CallSite::current()) {
    MessageOptions options;
    options.blocking = false;
    send_message(x, dest, tag, options, site);
  }
  virtual void wait_sends(CallSite site = CallSite::current()) = 0;
  // Sends posted by isend that have not completed yet.
  virtual std::size_t pending_sends() = 0;
  Tensor recv(int source, int tag = 0, std::optional<Device> device = std::nullopt, CallSite site = CallSite::current());
  // root's x to every rank (x is ignored, and may be undefined, elsewhere).
  virtual Tensor bcast(const Tensor& x, int root = 0, CallSite site = CallSite::current()) = 0;
  Tensor bcast(const Tensor& x, int root, std::optional<Device> device, CallSite site = CallSite::current());
  // At the root, one tensor per rank (shapes may differ, dtypes must match); empty elsewhere.
  virtual std::vector<Tensor> gather(const Tensor& x, int root = 0, CallSite site = CallSite::current()) = 0;
  std::vector<Tensor> gather(const Tensor& x, int root, std::optional<Device> device, CallSite site = CallSite::current());
  // The root passes one tensor per rank; every rank gets its own. Other ranks pass {}.
  virtual Tensor scatter(const std::vector<Tensor>& xs, int root = 0, CallSite site = CallSite::current()) = 0;
  Tensor scatter(const std::vector<Tensor>& xs, int root, std::optional<Device> device, CallSite site = CallSite::current());
  // Every rank gets every rank's x, in rank order.
  virtual std::vector<Tensor> allgather(const Tensor& x, CallSite site = CallSite::current()) = 0;
  // xs[j] goes to rank j; returns, in rank order, what every rank sent to this one.
  virtual std::vector<Tensor> alltoall(const std::vector<Tensor>& xs, CallSite site = CallSite::current()) = 0;
  // alltoall of row ranges of one tensor, of lengths that differ per destination (MPI_Alltoallv):
  // x's rows [c_0 + ... + c_{j-1}, c_0 + ... + c_j) go to rank j, where c = send_counts (one
  // per rank, summing to x's first extent; zero is fine). The receive counts travel in the
  // headers, so no rank declares them. Every rank's rows must have the same shape and dtype
  // (x.shape() past the first axis): otherwise an error on every rank listing each rank's rows.
  virtual AlltoallvResult alltoallv(const Tensor& x, const std::vector<std::int64_t>& send_counts, CallSite site = CallSite::current()) = 0;
  // Element-wise sum (or mean) over ranks; shapes and dtypes must match.
  virtual Tensor allreduce(const Tensor& x, AllreduceOp op = AllreduceOp::sum, CallSite site = CallSite::current()) = 0;
  // Element-wise sum at the root (undefined elsewhere).
  virtual Tensor reduce(const Tensor& x, int root = 0, CallSite site = CallSite::current()) = 0;
  // Each rank passes one piece per rank (piece i has the same shape everywhere); rank i gets
  // the sum over ranks of piece i. The mirror of allgather.
  virtual Tensor reduce_scatter(const std::vector<Tensor>& xs, CallSite site = CallSite::current()) = 0;

  // --- collectives that overlap computation (PendingCollective above) -----------------------
  // Element-wise sum over ranks of x, whose header carries `digest` as allreduce_checked's does.
  // in_place: the sum may be written into x (the caller's own buffer; saves its copy). Started
  // collectives complete in the order started. The default runs it at once (a communicator
  // without non-blocking collectives).
  virtual std::unique_ptr<PendingCollective> start_allreduce_sum(const Tensor& x, std::uint64_t digest,
                                                                 const char* operation, bool in_place = false, CallSite site = CallSite::current());
  // x (1-D, size() * n elements) as size() stripes of n: rank r receives the sum over ranks of
  // stripe r (reduce_scatter of equal pieces, MPI_Reduce_scatter_block).
  virtual std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const Tensor& x, std::uint64_t digest,
                                                                      const char* operation, CallSite site = CallSite::current());
  // Every rank's x (one shape on every rank, checked), back to back in rank order as one 1-D
  // tensor of size() * x.numel() elements: allgather of equal pieces, started now (ZeRO-3 fetches
  // the next link's parameters so while the current one computes).
  virtual std::unique_ptr<PendingCollective> start_allgather(const Tensor& x, std::uint64_t digest,
                                                             const char* operation, CallSite site = CallSite::current());

  // --- objects: small control data as bytes -------------------------------------------------
  virtual void send_obj(const std::string& bytes, int dest, int tag = 0, CallSite site = CallSite::current()) = 0;
  virtual std::string recv_obj(int source, int tag = 0, CallSite site = CallSite::current()) = 0;
  virtual std::string bcast_obj(const std::string& bytes, int root = 0, CallSite site = CallSite::current()) = 0;
  virtual std::vector<std::string> gather_obj(const std::string& bytes, int root = 0, CallSite site = CallSite::current()) = 0;

  // --- collectives whose ranks must also agree on a digest ------------------------------------
  // bcast and allreduce whose header carries `digest` (e.g. of a parameter list): ranks that pass
  // different digests get the collective's disagreement error on every rank, naming `operation`.
  // The data-parallel functions (comm/data_parallel) are built on them.
  virtual Tensor bcast_checked(const Tensor& x, int root, std::uint64_t digest, const char* operation, CallSite site = CallSite::current()) = 0;
  virtual Tensor allreduce_checked(const Tensor& x, AllreduceOp op, std::uint64_t digest, const char* operation, CallSite site = CallSite::current()) = 0;

  // --- for the layers that build their own protocol on the transport (comm/protocol) ----------
  virtual void send_message(const Tensor& x, int dest, int tag, const MessageOptions& options, CallSite site = CallSite::current()) = 0;
  virtual ReceivedMessage recv_message(int source, int tag, const MessageExpectation& expect, CallSite site = CallSite::current()) = 0;

 protected:
  Communicator() = default;

  int rank_ = 0, size_ = 1;
  int intra_rank_ = 0, intra_size_ = 1, inter_rank_ = 0, inter_size_ = 1;
  double timeout_seconds_ = 0;
  Device device_ = Device::cpu();
};

using CommunicatorPtr = std::shared_ptr<Communicator>;

namespace comm_detail {
// start_reduce_scatter_sum's stripes of x (checked: 1-D, size() equal parts), as views.
std::vector<Tensor> reduce_scatter_stripes(const Tensor& x, int size, const char* operation);
}  // namespace comm_detail

// A communicator over MPI_COMM_WORLD (MPI is initialised on first use and finalised at exit).
// To wrap an existing MPI communicator, see comm/transport/mpi_communicator.h.
// Names: "naive" (MPI; CUDA tensors through host memory), "hierarchical" (the same, whose
// allreduce sums within each host first and sends one sum per host between hosts: for data
// parallelism over several hosts; mpi_communicator.h) and "pure_nccl" (NCCL for CUDA tensors,
// MPI for CPU tensors, objects and the headers; one GPU per rank). An unknown name is an error
// listing the valid ones; "pure_nccl" in a build without CUDA or on a machine without a GPU is
// an error saying why (before any MPI call), and ranks that would share a GPU an error on every
// rank.
// Unless OMP_NUM_THREADS is set, it also divides the host's cores among the ranks on the host
// (core/threads.h): each rank's CPU kernels then use cores / intra_size() threads.
CommunicatorPtr create_communicator(const std::string& name = "naive");

// The call-site check, a debugging aid of the send-order check's family (comm/functions/
// pseudo_connect.h): with it on (TANDEM_CHECK_COLLECTIVE_SITES=1 at the first use, or
// set_check_collective_sites(true) on every rank), a collective's header also carries the user's
// call site ("file:line (function)"), and ranks that reach a collective from different lines
// fail there, every rank naming every rank's operation and line. A rank that skipped a
// collective is then caught at the skipped call, where otherwise MPI would pair its next
// collective of the same shape with it and the error would come one collective later. Off by
// default: it adds the site's text to every collective header, and a program whose ranks call
// one collective from two lines (an `if (rank == root)` with a call in each branch) must leave
// it off.
bool check_collective_sites_enabled();
void set_check_collective_sites(bool on);

// Labels the collectives called in its scope: their headers carry `label` (a literal), so that
// errors name it: "allreduce (in backward)". The layer above says what the scope is (the
// differentiable functions label their backward); the transport only carries the text. Scopes
// nest; the innermost label wins.
class CommLabelScope {
 public:
  explicit CommLabelScope(const char* label);
  ~CommLabelScope();
  CommLabelScope(const CommLabelScope&) = delete;
  CommLabelScope& operator=(const CommLabelScope&) = delete;
  // The innermost scope's label on this thread, or nullptr.
  static const char* current();

 private:
  const char* previous_;
};

}  // namespace tandem
