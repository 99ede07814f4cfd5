// The "hierarchical" communicator's allreduce (mpi_communicator.h): the headers are the flat
// communicator's; the data phase runs on the host structure of comm_detail::HostHierarchy
// (mpi_host_hierarchy.h).
#include "comm/transport/mpi_communicator.h"
#include "comm/transport/mpi_env.h"
#include "comm/transport/mpi_host_hierarchy.h"

namespace tandem {

void MpiCommunicator::make_hierarchical() {
  if (hierarchy_) return;
  hierarchy_ = std::make_unique<comm_detail::HostHierarchy>(
      comm_, inter_rank_, intra_rank_,
      [this](std::vector<MPI_Request>& requests, const char* operation, KeepAlive buffers, std::int64_t sequence) {
        finish_collective(requests, operation, std::move(buffers), /*closes=*/false, sequence);
      });
}

void MpiCommunicator::hierarchical_sum(const Tensor& send, Tensor& y, MPI_Datatype type, std::size_t chunk,
                                       const char* operation) {
  auto sum = hierarchy_->make_sum(send, y, type, chunk, operation, collective_sequence_ - 1);
  std::vector<MPI_Request> last;
  KeepAlive buffers;
  hierarchy_->run(*sum, last, buffers);
  finish_collective(last, operation, std::move(buffers));
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_hierarchical_sum(const Tensor& x, const Tensor& send,
                                                                           MPI_Datatype type, std::size_t chunk,
                                                                           Header mine, const char* operation) {
  using comm_detail::HostHierarchy;
  // Never in place: a rank's broadcast may be posted while its reduce still reads its input.
  Tensor y(x.shape(), x.dtype());
  // collective_sequence_: the sequence start_collective's headers are about to take.
  std::shared_ptr<HostHierarchy::Sum> sum = hierarchy_->make_sum(send, y, type, chunk, operation, collective_sequence_);
  hierarchy_->start(sum);
  HostHierarchy* hierarchy = hierarchy_.get();
  StartedStages stages;
  stages.advance = [hierarchy, sum](bool blocking, std::vector<MPI_Request>& requests) {
    return hierarchy->advance_to(*sum, blocking, requests);
  };
  stages.stage_requests = [sum] { return HostHierarchy::stage_requests(*sum); };
  auto post_data = [hierarchy, sum](std::vector<MPI_Request>&) {
    HostHierarchy::set_ready(*sum);
    hierarchy->advance(nullptr, /*blocking=*/false);
  };
  return start_collective(mine, true, operation, post_data, HostHierarchy::buffers(*sum), y, x.device(),
                          std::move(stages));
}

}  // namespace tandem
