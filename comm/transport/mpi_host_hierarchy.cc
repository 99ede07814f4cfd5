// The hierarchical allreduce's stages (mpi_host_hierarchy.h).
#include "comm/transport/mpi_host_hierarchy.h"

#include <algorithm>

#include "comm/transport/mpi_collective_util.h"
#include "comm/transport/mpi_world.h"

namespace tandem::comm_detail {

HostHierarchy::HostHierarchy(MPI_Comm comm, int inter_rank, int intra_rank, WaitStage wait) : wait_(std::move(wait)) {
  check_mpi(MPI_Comm_split(comm, inter_rank, intra_rank, &host_), "MPI_Comm_split (ranks of a host)");
  check_mpi(MPI_Comm_split(comm, intra_rank == 0 ? 0 : MPI_UNDEFINED, inter_rank, &leaders_),
            "MPI_Comm_split (first ranks of the hosts)");
  for (MPI_Comm part : {host_, leaders_})
    if (part != MPI_COMM_NULL) check_mpi(MPI_Comm_set_errhandler(part, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
}

HostHierarchy::~HostHierarchy() {
  if (!mpi_active()) return;
  for (MPI_Comm* owned : {&host_, &leaders_})
    if (*owned != MPI_COMM_NULL) MPI_Comm_free(owned);
}

// The stages over pieces of kPieceBytes: while one piece crosses the network between hosts, the
// next is summed within the host and the one before is broadcast, so a large allreduce costs
// about its slowest stage, not the sum of the three. On the host's communicator every rank posts
// every reduce, then every broadcast; among the first ranks, every allreduce. The other ranks
// post everything at once; a host's first rank posts piece p's allreduce once the host's sum of
// it is here, and its broadcast once the other hosts' sums have arrived.
class HostHierarchy::Sum {
 public:
  static constexpr std::size_t kPieceBytes = std::size_t(4) << 20;

  Sum(HostHierarchy& hierarchy, Tensor send, Tensor y, MPI_Datatype type, std::size_t chunk, const char* operation,
      std::int64_t sequence)
      : h_(hierarchy), send_(std::move(send)), y_(std::move(y)), type_(type), operation_(operation), sequence_(sequence) {
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
    if (!h_.leader()) last.insert(last.end(), reduces_.begin(), reduces_.end());
    last.insert(last.end(), bcasts_.begin(), bcasts_.end());
  }

  // Requests not handed over (set aside when the collective fails or is dropped).
  std::vector<MPI_Request> stage_requests() const {
    std::vector<MPI_Request> all = allreduces_;
    if (!handed_) all.insert(all.end(), bcasts_.begin(), bcasts_.end());
    if (h_.leader() || !handed_) all.insert(all.end(), reduces_.begin(), reduces_.end());
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
      check_mpi(MPI_Ireduce(in + pieces_[p].at, h_.leader() ? out + pieces_[p].at : nullptr, pieces_[p].count, type_,
                            collective_util::mpi_sum(y_.dtype()), 0, h_.host_, &reduces_[p]),
                "MPI_Ireduce (within the host)");
    if (!h_.leader()) {
      for (std::size_t p = 0; p < pieces_.size(); ++p) post_bcast(p);
      next_allreduce_ = next_bcast_ = pieces_.size();
    }
  }
  // Whether a stage's request has completed (blocking: waits for it, as any data phase waits).
  bool arrived(MPI_Request& request, bool blocking) {
    if (blocking) {
      std::vector<MPI_Request> one{request};
      h_.wait_(one, operation_, buffers(), sequence_);
      request = MPI_REQUEST_NULL;
      return true;
    }
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    return done != 0;
  }
  void post_allreduce(std::size_t p) {
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(y_.raw_data()) + pieces_[p].at, pieces_[p].count, type_,
                             collective_util::mpi_sum(y_.dtype()), h_.leaders_, &allreduces_[p]),
              "MPI_Iallreduce (among the hosts)");
  }
  void post_bcast(std::size_t p) {
    check_mpi(MPI_Ibcast(static_cast<char*>(y_.raw_data()) + pieces_[p].at, pieces_[p].count, type_, 0, h_.host_,
                         &bcasts_[p]),
              "MPI_Ibcast (within the host)");
  }

  HostHierarchy& h_;
  Tensor send_, y_;
  MPI_Datatype type_;
  const char* operation_;
  std::int64_t sequence_;
  std::vector<Piece> pieces_;
  std::vector<MPI_Request> reduces_, allreduces_, bcasts_;
  std::size_t next_allreduce_ = 0, next_bcast_ = 0;
  bool started_ = false, handed_ = false;
};

std::shared_ptr<HostHierarchy::Sum> HostHierarchy::make_sum(Tensor send, Tensor y, MPI_Datatype type,
                                                            std::size_t chunk, const char* operation,
                                                            std::int64_t sequence) {
  return std::make_shared<Sum>(*this, std::move(send), std::move(y), type, chunk, operation, sequence);
}

void HostHierarchy::advance(const Sum* target, bool blocking) {
  while (!queue_.empty()) {
    const std::shared_ptr<Sum> sum = queue_.front();
    if (!sum->ready || !sum->post(blocking)) return;
    queue_.pop_front();
    if (sum.get() == target) return;
  }
}

void HostHierarchy::run(Sum& sum, std::vector<MPI_Request>& last, KeepAlive& buffers) {
  // The started sums before this one post all their stages first (their headers are complete:
  // the owner's header exchange saw to it).
  advance(nullptr, /*blocking=*/true);
  sum.post(/*blocking=*/true);
  sum.hand_over(last);
  buffers = sum.buffers();
}

void HostHierarchy::start(const std::shared_ptr<Sum>& sum) { queue_.push_back(sum); }

void HostHierarchy::set_ready(Sum& sum) { sum.ready = true; }

bool HostHierarchy::advance_to(Sum& sum, bool blocking, std::vector<MPI_Request>& requests) {
  if (!sum.posted()) advance(&sum, blocking);
  sum.hand_over(requests);
  return sum.posted();
}

std::vector<MPI_Request> HostHierarchy::stage_requests(const Sum& sum) { return sum.stage_requests(); }

KeepAlive HostHierarchy::buffers(const Sum& sum) { return sum.buffers(); }

}  // namespace tandem::comm_detail
