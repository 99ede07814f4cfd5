// A 2-rank program that fails on purpose, for job_failure_test.sh. Its first argument picks
// how rank 1 fails while rank 0 waits for it (with no timeout set):
//   throw: rank 1 throws an exception that escapes main -> the whole job aborts
//   exit:  rank 1 returns from main without sending -> rank 0's wait is an error (the peer
//          has finished), which escapes main on rank 0 and aborts the job
#include <cstdio>
#include <stdexcept>
#include <string>

#include "comm/transport/communicator.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  auto comm = tandem::create_communicator("naive");
  comm->set_timeout(0);  // the failure must be noticed without a timeout
  if (comm->rank() == 0) {
    tandem::Tensor x = comm->recv(1, 0);
    std::printf("rank 0 received %s: unexpected\n", x.description().c_str());
    return 0;
  }
  if (mode == "throw") throw std::runtime_error("rank 1 fails on purpose");
  return 0;
}
