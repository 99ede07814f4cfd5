#include "comm/mpi_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "autograd/check_finite.h"
#include "comm/mpi_env.h"
#include "core/error.h"
#include "core/threads.h"

namespace tandem {

using comm_detail::check_mpi;

std::shared_ptr<MpiCommunicator> MpiCommunicator::create(MPI_Comm comm) {
  comm_detail::ensure_mpi();
  TANDEM_CHECK(comm != MPI_COMM_NULL, "create_communicator: MPI_COMM_NULL is not a communicator");
  MPI_Comm owned = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(comm, &owned), "MPI_Comm_dup");
  return std::shared_ptr<MpiCommunicator>(new MpiCommunicator(owned));
}

MpiCommunicator::MpiCommunicator(MPI_Comm owned) : comm_(owned) {
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  timeout_seconds_ = comm_detail::timeout_from_environment();

  // Where each peer lives in MPI_COMM_WORLD, to notice when it has finished.
  MPI_Group group, world_group;
  MPI_Comm_group(comm_, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> ranks(size_);
  for (int i = 0; i < size_; ++i) ranks[i] = i;
  world_rank_of_.resize(size_);
  MPI_Group_translate_ranks(group, size_, ranks.data(), world_group, world_rank_of_.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);

  // Hosts by processor name: intra_* among the ranks with this rank's name, inter_* among the
  // distinct names ordered by the lowest rank that has each.
  std::vector<char> names(static_cast<std::size_t>(size_) * MPI_MAX_PROCESSOR_NAME, 0);
  char mine[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(mine, &length);
  check_mpi(
      MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm_),
      "MPI_Allgather (processor names)");
  auto name_of = [&](int r) { return std::string(names.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME); };
  std::vector<std::string> hosts;
  intra_rank_ = 0;
  intra_size_ = 0;
  for (int r = 0; r < size_; ++r) {
    const std::string host = name_of(r);
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    if (host == mine) {
      if (r < rank_) ++intra_rank_;
      ++intra_size_;
    }
  }
  inter_size_ = static_cast<int>(hosts.size());
  inter_rank_ = static_cast<int>(std::find(hosts.begin(), hosts.end(), std::string(mine)) - hosts.begin());
}

MpiCommunicator::~MpiCommunicator() {
  if (comm_ != MPI_COMM_NULL && comm_detail::mpi_active()) MPI_Comm_free(&comm_);
}

std::shared_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  TANDEM_CHECK(color >= 0, "split: color ", color, " on rank ", rank_, " must be non-negative");
  Header mine;
  mine.kind = comm_detail::OpKind::split;
  exchange_headers([&](int) { return mine; }, false);
  collective_open_ = false;
  MPI_Comm part = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(comm_, color, key, &part), "MPI_Comm_split");
  auto result = std::shared_ptr<MpiCommunicator>(new MpiCommunicator(part));
  result->timeout_seconds_ = timeout_seconds_;
  return result;
}

void MpiCommunicator::barrier() {
  // Every rank waits for every peer's header: the exchange is the barrier.
  Header mine;
  mine.kind = comm_detail::OpKind::barrier;
  exchange_headers([&](int) { return mine; }, false);
  collective_open_ = false;
}

CommunicatorPtr create_communicator(const std::string& name, MPI_Comm comm) {
  if (name == "naive") return MpiCommunicator::create(comm);
  if (name == "pure_nccl")
    TANDEM_FAIL("create_communicator: \"pure_nccl\" needs the CUDA backend, which this build does not have; "
                "valid names here: \"naive\"");
  TANDEM_FAIL("create_communicator: unknown communicator \"", name, "\"; valid names: \"naive\"");
}

CommunicatorPtr create_communicator(const std::string& name) {
  // Check the name before touching MPI, so a typo is reported without an MPI job.
  if (name != "naive") return create_communicator(name, MPI_COMM_NULL);
  comm_detail::ensure_mpi();
  CommunicatorPtr world = create_communicator(name, MPI_COMM_WORLD);
  set_check_finite_process(detail::concat("rank ", world->rank(), " of ", world->size()));
  // Ranks on one host share its cores, unless the user chose a thread count: with every rank
  // taking every core, 2 ranks on 2 cores ran a CNN step 10-20 times slower than 1 rank.
  if (world->intra_size() > 1 && !std::getenv("OMP_NUM_THREADS"))
    set_max_threads(std::max(1, available_cores() / world->intra_size()));
  return world;
}

}  // namespace tandem
