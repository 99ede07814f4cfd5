// A program with one seeded communication fault, named on its command line, for
// seeded_faults_test.sh: every rank must exit non-zero, and rank 0's flight-recorder report
// must name the ranks, the operations and the lines below (found by their FAULT markers).
//
//   mpiexec -n N seeded_faults missing_recv|tag_mismatch|shape_mismatch|skipped_allreduce|exception|dtype_mismatch|hang
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include "comm/transport/communicator.h"
#include "core/ops.h"

using namespace tandem;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: seeded_faults FAULT\n");
    return 2;
  }
  const std::string fault = argv[1];
  auto comm = create_communicator("naive");
  const int rank = comm->rank();
  const Tensor x = full({4}, 1.0, DType::f32);
  comm->allreduce(x);  // history before the fault: collective #0 on every rank

  if (fault == "missing_recv") {
    if (rank == 0) comm->send(x, 1, 0);  // FAULT:missing_recv:send
    comm->barrier();
  } else if (fault == "tag_mismatch") {
    if (rank == 0) comm->send(x, 1, 1);  // FAULT:tag_mismatch:send
    if (rank == 1) comm->recv(0, 2);     // FAULT:tag_mismatch:recv
  } else if (fault == "shape_mismatch") {
    const Tensor mine = full({rank == 1 ? 5 : 4}, 1.0, DType::f32);
    comm->allreduce(mine);  // FAULT:shape_mismatch:allreduce
  } else if (fault == "skipped_allreduce") {
    if (rank != 1) comm->allreduce(x);  // FAULT:skipped_allreduce:allreduce
    comm->bcast(x, 0);                  // FAULT:skipped_allreduce:bcast
  } else if (fault == "exception") {
    if (rank == 1) throw std::runtime_error("seeded failure on rank 1");  // FAULT:exception:throw
    comm->allreduce(x);  // FAULT:exception:allreduce
  } else if (fault == "dtype_mismatch") {
    const Tensor mine = full({4}, 1.0, rank == 1 ? DType::f64 : DType::f32);
    comm->allreduce(mine);  // FAULT:dtype_mismatch:allreduce
  } else if (fault == "hang") {
    // No timeout and no error: the user sends SIGUSR1 to see what the ranks are doing.
    if (rank == 0) std::this_thread::sleep_for(std::chrono::seconds(60));
    if (rank == 1) comm->recv(0, 0);  // FAULT:hang:recv
  } else {
    std::fprintf(stderr, "seeded_faults: unknown fault %s\n", fault.c_str());
    return 2;
  }
  return 0;
}
