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
  // Posts one call per piece of at most `chunk` elements (MPI counts are ints).
  auto stage = [&](auto&& post) {
    std::vector<MPI_Request> requests;
    for (std::size_t offset = 0; offset < n; offset += chunk) {
      requests.emplace_back();
      post(offset * element, static_cast<int>(std::min(chunk, n - offset)), &requests.back());
    }
    return requests;
  };
  // 1. The host's sum onto its first rank (into y there).
  std::vector<MPI_Request> requests = stage([&](std::size_t at, int count, MPI_Request* request) {
    check_mpi(MPI_Ireduce(in + at, leader ? out + at : nullptr, count, type, MPI_SUM, 0, host_comm_, request),
              "MPI_Ireduce (within the host)");
  });
  finish_collective(requests, operation, {send.storage(), y.storage()}, /*closes=*/false);
  // 2. The hosts' sums added up among their first ranks.
  if (leader) {
    requests = stage([&](std::size_t at, int count, MPI_Request* request) {
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, out + at, count, type, MPI_SUM, leaders_comm_, request),
                "MPI_Iallreduce (among the hosts)");
    });
    finish_collective(requests, operation, {y.storage()}, /*closes=*/false);
  }
  // 3. The total from each host's first rank to the others.
  requests = stage([&](std::size_t at, int count, MPI_Request* request) {
    check_mpi(MPI_Ibcast(out + at, count, type, 0, host_comm_, request), "MPI_Ibcast (within the host)");
  });
  finish_collective(requests, operation, {y.storage()});
}

}  // namespace tandem
