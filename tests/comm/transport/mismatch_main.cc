// Programs whose ranks communicate in ways that do not match, for mismatch_test.sh. Each ends
// (or fails) quietly wrong without tandem's checks: a send that returns at once because MPI
// buffered it, a receive that nobody serves, a message nobody receives. The first argument
// picks the mismatch; the script checks that the job fails and what every rank says.
//   send:OP      rank 0 sends f32[3] on tag 5 to rank 1 and finishes; every other rank calls OP
//   recv:OP      rank 0 receives from rank 1 on tag 5; every other rank calls OP
//   unreceived   rank 0 sends f32[2, 3] on tag 4 to rank 1, which never receives it
//   partial      rank 0 sends three messages on tag 4; rank 1 receives the first only
//   split        rank 0 sends i64[5] to rank 1 on a split communicator, destroyed before the end,
//                which rank 1 never receives
//   differentiable  rank 0's F::send of f64[4] on tag 2, never received
//   cycle        every rank receives from the next (rank 0 from 1, ..., the last from 0): a deadlock
//   matched      every message is received: the job succeeds
//   skip         with the call-site check on (communicator.h), rank 1 skips an allreduce that the
//                others call, then every rank calls another allreduce of the same shape; prints
//                "lines A B", the lines of the two calls
// OP: barrier bcast gather0 gather1 scatter allgather alltoall allreduce reduce reduce_scatter
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "comm/transport/communicator.h"
#include "comm/functions.h"
#include "core/ops.h"

using namespace tandem;

namespace {

void collective(Communicator& comm, const std::string& op) {
  const Tensor x = full({2}, 1.0);
  std::vector<Tensor> per_rank(static_cast<std::size_t>(comm.size()), x);
  if (op == "barrier") comm.barrier();
  else if (op == "bcast") comm.bcast(x, 1);
  else if (op == "gather0") comm.gather(x, 0);
  else if (op == "gather1") comm.gather(x, 1);
  else if (op == "scatter") comm.scatter(comm.rank() == 1 ? per_rank : std::vector<Tensor>{}, 1);
  else if (op == "allgather") comm.allgather(x);
  else if (op == "alltoall") comm.alltoall(per_rank);
  else if (op == "allreduce") comm.allreduce(x);
  else if (op == "reduce") comm.reduce(x, 1);
  else if (op == "reduce_scatter") comm.reduce_scatter(per_rank);
  else std::fprintf(stderr, "unknown operation %s\n", op.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  auto comm = create_communicator("naive");
  comm->set_timeout(0);  // every failure must be found without a timeout
  const int rank = comm->rank();
  const std::string op = mode.find(':') == std::string::npos ? "" : mode.substr(mode.find(':') + 1);

  if (mode.rfind("send:", 0) == 0) {
    if (rank == 0) comm->send(full({3}, 2.0), 1, 5);
    else collective(*comm, op);
  } else if (mode.rfind("recv:", 0) == 0) {
    if (rank == 0) comm->recv(1, 5);
    else collective(*comm, op);
  } else if (mode == "unreceived") {
    if (rank == 0) comm->send(full({2, 3}, 1.0), 1, 4);
  } else if (mode == "partial") {
    if (rank == 0)
      for (int i = 0; i < 3; ++i) comm->send(full({i + 1}, i), 1, 4);
    if (rank == 1) comm->recv(0, 4);
  } else if (mode == "split") {
    auto pair = comm->split(rank < 2 ? 0 : 1, rank);
    if (rank == 0) pair->send(full({5}, 3.0, DType::i64), 1, 1);
  } else if (mode == "differentiable") {
    if (rank == 0) F::send(Variable(full({4}, 1.0, DType::f64)), *comm, 1, 2);
  } else if (mode == "cycle") {
    comm->recv((rank + 1) % comm->size(), 0);
  } else if (mode == "skip") {
    set_check_collective_sites(true);
    const Tensor x = full({2}, 1.0);
    const int skipped = __LINE__ + 2, next = __LINE__ + 3;
    std::printf("lines %d %d\n", skipped, next);
    if (rank != 1) comm->allreduce(x);
    comm->allreduce(x);
  } else if (mode == "matched") {
    if (rank == 0) comm->send(full({3}, 2.0), 1, 5);
    if (rank == 1) comm->recv(0, 5);
    comm->barrier();
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  std::printf("rank %d returned from main\n", rank);
  return 0;
}
