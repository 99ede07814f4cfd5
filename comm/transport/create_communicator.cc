// create_communicator: the communicators by name. Its own target (//comm), above both the MPI
// communicator and the NCCL one, which exists only under --config=cuda (TANDEM_WITH_CUDA).
#include <algorithm>
#include <cstdlib>

#include "comm/transport/communicator.h"
#include "comm/transport/mpi_communicator.h"
#include "comm/transport/mpi_env.h"
#include "core/error.h"
#include "core/process_label.h"
#include "core/threads.h"
#include "cuda/cuda.h"
#if TANDEM_WITH_CUDA
#include "comm/transport/nccl_communicator.h"
#endif

namespace tandem {

namespace {

const char* const kValidNames = "valid names: \"naive\", \"hierarchical\", \"pure_nccl\"";

// What pure_nccl needs before any MPI call: a build with CUDA and a GPU here. (Whether the
// ranks' GPUs suit NCCL is checked collectively when it is created.)
void require_gpu() {
  if (cuda::device_count() > 0) return;
  TANDEM_FAIL("create_communicator: \"pure_nccl\" needs a CUDA GPU, and ", cuda::unavailable_reason(),
              "; \"naive\" works without one (it moves CPU tensors, and CUDA tensors through host memory)");
}

}  // namespace

CommunicatorPtr create_communicator(const std::string& name, MPI_Comm comm) {
  if (name == "naive") return MpiCommunicator::create(comm);
  if (name == "hierarchical") {
    auto hierarchical = MpiCommunicator::create(comm);
    hierarchical->make_hierarchical();
    return hierarchical;
  }
  if (name == "pure_nccl") {
    require_gpu();
#if TANDEM_WITH_CUDA
    return NcclCommunicator::create(comm);
#else
    TANDEM_FAIL("create_communicator: \"pure_nccl\" is not built into this binary (build with --config=cuda)");
#endif
  }
  TANDEM_FAIL("create_communicator: unknown communicator \"", name, "\"; ", kValidNames);
}

CommunicatorPtr create_communicator(const std::string& name) {
  // Check the name (and pure_nccl's GPU) before touching MPI, so that a typo or a machine
  // without a GPU is reported without an MPI job.
  if (name != "naive" && name != "hierarchical" && name != "pure_nccl") return create_communicator(name, MPI_COMM_NULL);
  if (name == "pure_nccl") require_gpu();
  comm_detail::ensure_mpi();
  CommunicatorPtr world = create_communicator(name, MPI_COMM_WORLD);
  set_process_label(detail::concat("rank ", world->rank(), " of ", world->size()));
  // Ranks on one host share its cores, unless the user chose a thread count: with every rank taking
  // every core, 2 ranks on 2 cores ran a CNN step many times slower than 1 rank
  // (docs/performance.md, "Threads").
  if (world->intra_size() > 1 && !std::getenv("OMP_NUM_THREADS"))
    set_max_threads(std::max(1, available_cores() / world->intra_size()));
  return world;
}

}  // namespace tandem
