// The "hierarchical" communicator's allreduce (mpi_communicator.h): a sum onto the first rank of
// each host, an allreduce among those ranks, a broadcast within each host.
//
// Why: with several ranks per host, a flat allreduce has every rank exchange its share with
// ranks on other hosts, so the host's network link carries the data once per rank (measured
// with 2 simulated hosts of 2 ranks on 1 Gbit/s links: docs/performance.md, "Across hosts"). Summing within
// the host first (shared memory) sends each host's data over the link once.
//
// The headers have been exchanged and checked on the whole communicator before the data phase
// starts (allreduce_checked), so a disagreement is still an error on every rank; the stages
// below wait as any data phase does (a peer that failed or gave up is an error, not a hang).
#include <algorithm>

#include "comm/transport/mpi_communicator.h"
#include "comm/transport/mpi_env.h"
#include "core/error.h"

namespace tandem {

using comm_detail::check_mpi;

void MpiCommunicator::make_hierarchical() {
  if (hierarchical_) return;
  check_mpi(MPI_Comm_split(comm_, inter_rank_, intra_rank_, &host_comm_), "MPI_Comm_split (ranks of a host)");
  check_mpi(MPI_Comm_split(comm_, intra_rank_ == 0 ? 0 : MPI_UNDEFINED, inter_rank_, &leaders_comm_),
            "MPI_Comm_split (first ranks of the hosts)");
  for (MPI_Comm part : {host_comm_, leaders_comm_})
    if (part != MPI_COMM_NULL) check_mpi(MPI_Comm_set_errhandler(part, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  hierarchical_ = true;
}

// The stages over pieces of kPieceBytes: while one piece crosses the network between hosts, the
// next is summed within the host and the one before is broadcast, so a large allreduce costs
// about its slowest stage, not the sum of the three. On the host's communicator every rank posts
// every reduce, then every broadcast; among the first ranks, every allreduce. The other ranks
// post everything at once; a host's first rank posts piece p's allreduce once the host's sum of
// it is here, and its broadcast once the other hosts' sums have arrived.
class MpiCommunicator::HierarchicalSum {
 public:
  static constexpr std::size_t kPieceBytes = std::size_t(4) << 20;

  HierarchicalSum(MpiCommunicator& comm, Tensor send, Tensor y, MPI_Datatype type, std::size_t chunk,
                  const char* operation, std::int64_t sequence)
      : comm_(comm), send_(std::move(send)), y_(std::move(y)), type_(type), operation_(operation), sequence_(sequence) {
    const std::size_t n = static_cast<std::size_t>(y_.numel());
    const std::size_t element = dtype_size(y_.dtype());
    const std::size_t piece = std::max<std::size_t>(1, std::min(chunk, kPieceBytes / element));
    for (std::size_t offset = 0; offset < n; offset += piece)
      pieces_.push_back({offset * element, static_cast<int>(std::min(piece, n - offset))});
    const std::size_t m = pieces_.size();
    reduces_.assign(m, MPI_REQUEST_NULL);
    allreduces_.assign(m, MPI_REQUEST_NULL);
    bcasts_.assign(m, MPI_REQUEST_NULL);
  }

  // Set once the headers agree (the data phase may start).
  bool ready = false;

  bool leader() const { return comm_.leaders_comm_ != MPI_COMM_NULL; }

  // Posts what can be posted (blocking: all of it, waiting for each input in turn); returns
  // whether every stage is posted.
  bool post(bool blocking) {
    if (!started_) {
      started_ = true;
      post_first();
    }
    const std::size_t m = pieces_.size();
    while (next_allreduce_ < m && arrived(reduces_[next_allreduce_], blocking)) post_allreduce(next_allreduce_++);
    while (next_bcast_ < next_allreduce_ && arrived(allreduces_[next_bcast_], blocking)) post_bcast(next_bcast_++);
    return next_bcast_ == m;
  }
  bool posted() const { return started_ && next_bcast_ == pieces_.size(); }

  // Once every stage is posted: appends the requests that end the data phase to `last` (once).
  void hand_over(std::vector<MPI_Request>& last) {
    if (handed_ || !posted()) return;
    handed_ = true;
    if (!leader()) last.insert(last.end(), reduces_.begin(), reduces_.end());
    last.insert(last.end(), bcasts_.begin(), bcasts_.end());
  }

  // Requests not handed over (set aside when the collective fails or is dropped).
  std::vector<MPI_Request> stage_requests() const {
    std::vector<MPI_Request> all = allreduces_;
    if (!handed_) all.insert(all.end(), bcasts_.begin(), bcasts_.end());
    if (leader() || !handed_) all.insert(all.end(), reduces_.begin(), reduces_.end());
    return all;
  }

  KeepAlive buffers() const { return {send_.storage(), y_.storage()}; }

 private:
  struct Piece {
    std::size_t at;  // byte offset
    int count;
  };

  void post_first() {
    const char* in = static_cast<const char*>(send_.raw_data());
    char* out = static_cast<char*>(y_.raw_data());
    for (std::size_t p = 0; p < pieces_.size(); ++p)
      check_mpi(MPI_Ireduce(in + pieces_[p].at, leader() ? out + pieces_[p].at : nullptr, pieces_[p].count, type_,
                            MPI_SUM, 0, comm_.host_comm_, &reduces_[p]),
                "MPI_Ireduce (within the host)");
    if (!leader()) {
      for (std::size_t p = 0; p < pieces_.size(); ++p) post_bcast(p);
      next_allreduce_ = next_bcast_ = pieces_.size();
    }
  }
  // Whether a stage's request has completed (blocking: waits for it, as any data phase waits).
  bool arrived(MPI_Request& request, bool blocking) {
    if (blocking) {
      std::vector<MPI_Request> one{request};
      comm_.finish_collective(one, operation_, buffers(), /*closes=*/false, sequence_);
      request = MPI_REQUEST_NULL;
      return true;
    }
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    return done != 0;
  }
  void post_allreduce(std::size_t p) {
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(y_.raw_data()) + pieces_[p].at, pieces_[p].count, type_,
                             MPI_SUM, comm_.leaders_comm_, &allreduces_[p]),
              "MPI_Iallreduce (among the hosts)");
  }
  void post_bcast(std::size_t p) {
    check_mpi(MPI_Ibcast(static_cast<char*>(y_.raw_data()) + pieces_[p].at, pieces_[p].count, type_, 0,
                         comm_.host_comm_, &bcasts_[p]),
              "MPI_Ibcast (within the host)");
  }

  MpiCommunicator& comm_;
  Tensor send_, y_;
  MPI_Datatype type_;
  const char* operation_;
  std::int64_t sequence_;
  std::vector<Piece> pieces_;
  std::vector<MPI_Request> reduces_, allreduces_, bcasts_;
  std::size_t next_allreduce_ = 0, next_bcast_ = 0;
  bool started_ = false, handed_ = false;
};

void MpiCommunicator::advance_hierarchical(const HierarchicalSum* target, bool blocking) {
  while (!hierarchical_queue_.empty()) {
    const std::shared_ptr<HierarchicalSum> sum = hierarchical_queue_.front();
    if (!sum->ready || !sum->post(blocking)) return;
    hierarchical_queue_.pop_front();
    if (sum.get() == target) return;
  }
}

void MpiCommunicator::hierarchical_sum(const Tensor& send, Tensor& y, MPI_Datatype type, std::size_t chunk,
                                       const char* operation) {
  // The started sums before this one post all their stages first (their headers are complete:
  // exchange_headers saw to it).
  advance_hierarchical(nullptr, /*blocking=*/true);
  HierarchicalSum sum(*this, send, y, type, chunk, operation, collective_sequence_ - 1);
  sum.post(/*blocking=*/true);
  std::vector<MPI_Request> last;
  sum.hand_over(last);
  finish_collective(last, operation, sum.buffers());
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_hierarchical_sum(const Tensor& x, const Tensor& send,
                                                                           MPI_Datatype type, std::size_t chunk,
                                                                           Header mine, const char* operation) {
  // Never in place: a rank's broadcast may be posted while its reduce still reads its input.
  Tensor y(x.shape(), x.dtype());
  // collective_sequence_: the sequence start_collective's headers are about to take.
  auto sum = std::make_shared<HierarchicalSum>(*this, send, y, type, chunk, operation, collective_sequence_);
  hierarchical_queue_.push_back(sum);
  StartedStages stages;
  stages.advance = [this, sum](bool blocking, std::vector<MPI_Request>& requests) {
    if (!sum->posted()) advance_hierarchical(sum.get(), blocking);
    sum->hand_over(requests);
    return sum->posted();
  };
  stages.stage_requests = [sum] { return sum->stage_requests(); };
  auto post_data = [this, sum](std::vector<MPI_Request>&) {
    sum->ready = true;
    advance_hierarchical(nullptr, /*blocking=*/false);
  };
  return start_collective(mine, true, operation, post_data, sum->buffers(), y, x.device(), std::move(stages));
}

}  // namespace tandem
