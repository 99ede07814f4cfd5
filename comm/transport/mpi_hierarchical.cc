// The "hierarchical" communicator's allreduce (mpi_communicator.h): a sum onto the first rank of
// each host, an allreduce among those ranks, a broadcast within each host.
//
// Why: with several ranks per host, a flat allreduce has every rank exchange its share with
// ranks on other hosts, so the host's network link carries the data once per rank (measured
// with 2 simulated hosts of 2 ranks on 1 Gbit/s links: README, "Across hosts"). Summing within
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

void MpiCommunicator::hierarchical_sum(const Tensor& send, Tensor& y, MPI_Datatype type, std::size_t chunk,
                                       const char* operation) {
  const std::size_t n = static_cast<std::size_t>(y.numel());
  const std::size_t element = dtype_size(y.dtype());
  const char* in = static_cast<const char*>(send.raw_data());
  char* out = static_cast<char*>(y.raw_data());
  const bool leader = leaders_comm_ != MPI_COMM_NULL;
  // The three stages run as a pipeline over pieces of kPieceBytes: while one piece crosses the
  // network between hosts, the next is summed within the host and the one before is broadcast,
  // so a large allreduce costs about its slowest stage, not the sum of the three.
  constexpr std::size_t kPieceBytes = std::size_t(4) << 20;
  const std::size_t piece = std::max<std::size_t>(1, std::min(chunk, kPieceBytes / element));
  struct Piece {
    std::size_t at;  // byte offset
    int count;
  };
  std::vector<Piece> pieces;
  for (std::size_t offset = 0; offset < n; offset += piece)
    pieces.push_back({offset * element, static_cast<int>(std::min(piece, n - offset))});
  const std::size_t m = pieces.size();
  // Every rank posts its calls on a communicator in the same order (MPI's rule for non-blocking
  // collectives): on the host's, every reduce, then every broadcast; among the first ranks,
  // every allreduce. Only the first ranks wait between stages.
  std::vector<MPI_Request> reduces(m), allreduces(m), bcasts(m);
  for (std::size_t p = 0; p < m; ++p)
    check_mpi(MPI_Ireduce(in + pieces[p].at, leader ? out + pieces[p].at : nullptr, pieces[p].count, type, MPI_SUM, 0,
                          host_comm_, &reduces[p]),
              "MPI_Ireduce (within the host)");
  if (!leader) {
    for (std::size_t p = 0; p < m; ++p)
      check_mpi(MPI_Ibcast(out + pieces[p].at, pieces[p].count, type, 0, host_comm_, &bcasts[p]),
                "MPI_Ibcast (within the host)");
    reduces.insert(reduces.end(), bcasts.begin(), bcasts.end());
    finish_collective(reduces, operation, {send.storage(), y.storage()});
    return;
  }
  // The first rank of a host: piece p goes to the other hosts once the host's sum of it is here,
  // and back to the host's ranks once the other hosts' sums have arrived.
  for (std::size_t p = 0; p < m; ++p) {
    std::vector<MPI_Request> one{reduces[p]};
    finish_collective(one, operation, {send.storage(), y.storage()}, /*closes=*/false);
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, out + pieces[p].at, pieces[p].count, type, MPI_SUM, leaders_comm_,
                             &allreduces[p]),
              "MPI_Iallreduce (among the hosts)");
  }
  for (std::size_t p = 0; p < m; ++p) {
    std::vector<MPI_Request> one{allreduces[p]};
    finish_collective(one, operation, {y.storage()}, /*closes=*/false);
    check_mpi(MPI_Ibcast(out + pieces[p].at, pieces[p].count, type, 0, host_comm_, &bcasts[p]),
              "MPI_Ibcast (within the host)");
  }
  finish_collective(bcasts, operation, {y.storage()});
}

}  // namespace tandem
