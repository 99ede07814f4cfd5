// Cycles of receives are found without any timeout, and only cycles: run by `bazel test` on 2
// and 3 ranks. Every case turns the timeout off (run_mpi.sh sets one as a last resort) and
// checks that each rank of a cycle raises within a few seconds, naming the cycle; a peer that
// is merely slow, or a chain of waits that ends at a rank that computes, is never reported.
// Each case leaves no message unreceived, so the end-of-program check passes.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>

#include "comm/transport/communicator.h"
#include "autograd/functions.h"
#include "comm/functions.h"
#include "core/error.h"
#include "core/ops.h"

using namespace tandem;
using Catch::Matchers::Contains;

namespace {

Communicator& world() {
  static CommunicatorPtr comm = [] {
    CommunicatorPtr c = create_communicator("naive");
    c->set_timeout(0);  // found without a timeout, or not at all
    return c;
  }();
  return *comm;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string waits(int rank, int from, int tag, int number = 0, const std::string& op = "recv") {
  return "rank " + std::to_string(rank) + " waits in " + op + " (from rank " + std::to_string(from) + ", tag " +
         std::to_string(tag) + ") for message #" + std::to_string(number);
}

}  // namespace

TEST_CASE("deadlock: two ranks that each recv from the other both raise, naming the cycle") {
  Communicator& comm = world();
  const int rank = comm.rank();
  comm.barrier();
  if (rank <= 1) {
    const int other = 1 - rank;
    const auto start = std::chrono::steady_clock::now();
    const std::string error = error_of([&] { comm.recv(other, 3); });
    INFO(error);
    CHECK(seconds_since(start) < 5);
    CHECK_THAT(error, Contains("comm: deadlock: recv (from rank " + std::to_string(other) + ", tag 3) on rank " +
                               std::to_string(rank) + " can never complete"));
    CHECK_THAT(error, Contains(waits(0, 1, 3)) && Contains(waits(1, 0, 3)) && Contains("found without a timeout"));
  }
  // Every rank has raised (or waited here): the messages they waited for go through.
  comm.barrier();
  if (rank <= 1) {
    const int other = 1 - rank;
    comm.send(full({2}, 7.0 + rank), other, 3);
    CHECK(comm.recv(other, 3).to_vector<float>() == std::vector<float>{7.0f + other, 7.0f + other});
  }
  comm.barrier();
}

TEST_CASE("deadlock: the differentiable recv takes part, on a second communicator too") {
  Communicator& comm = world();
  const int rank = comm.rank();
  static CommunicatorPtr second = create_communicator("naive");
  second->set_timeout(0);
  comm.barrier();
  if (rank <= 1) {
    const int other = 1 - rank;
    // Rank 0 waits on the second communicator, rank 1 on the first.
    Communicator& mine = rank == 0 ? *second : comm;
    const std::string error = error_of([&] { F::recv(mine, other, Variable(), 4); });
    INFO(error);
    CHECK_THAT(error, Contains("comm: deadlock:") && Contains("(from rank " + std::to_string(other) + ", tag 4)") &&
                          Contains("communicator #"));
  }
  comm.barrier();
  if (rank <= 1) {
    F::send(Variable(full({1}, 1.0)), rank == 0 ? comm : *second, 1 - rank, 4);
    F::recv(rank == 0 ? *second : comm, 1 - rank, Variable(), 4);
  }
  comm.barrier();
}

TEST_CASE("deadlock: a cycle through three ranks raises on each of them") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  if (size < 3) return;  // needs three ranks
  comm.barrier();
  if (rank <= 2) {
    const int from = (rank + 1) % 3;  // 0 waits for 1, 1 for 2, 2 for 0
    const auto start = std::chrono::steady_clock::now();
    const std::string error = error_of([&] { comm.recv(from, 6); });
    INFO(error);
    CHECK(seconds_since(start) < 5);
    CHECK_THAT(error, Contains("comm: deadlock:") && Contains(waits(0, 1, 6)) && Contains(waits(1, 2, 6)) &&
                          Contains(waits(2, 0, 6)));
  }
  comm.barrier();
  if (rank <= 2) {
    comm.send(full({1}, rank), (rank + 2) % 3, 6);
    CHECK(comm.recv((rank + 1) % 3, 6).item() == (rank + 1) % 3);
  }
  comm.barrier();
}

TEST_CASE("deadlock: a peer that computes for 5 s before it sends is not a deadlock") {
  Communicator& comm = world();
  const int rank = comm.rank();
  comm.barrier();
  if (rank == 0) {
    const auto start = std::chrono::steady_clock::now();
    const Tensor got = comm.recv(1, 7);
    CHECK(seconds_since(start) > 4);
    CHECK(got.item() == 42.0);
    comm.send(full({1}, 43.0), 1, 7);
  } else if (rank == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(5));
    comm.send(full({1}, 42.0), 0, 7);
    CHECK(comm.recv(0, 7).item() == 43.0);
  }
  comm.barrier();
}

TEST_CASE("deadlock: a chain of waits that ends at a computing rank is not a cycle") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  if (size < 3) return;  // needs three ranks
  comm.barrier();
  // 0 waits for 1, which waits for 2, which computes, then sends to 1, which then sends to 0.
  if (rank == 0) {
    CHECK(comm.recv(1, 8).item() == 2.0);
  } else if (rank == 1) {
    const Tensor got = comm.recv(2, 8);
    comm.send(got + 1.0, 0, 8);
  } else if (rank == 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    comm.send(full({1}, 1.0), 1, 8);
  }
  comm.barrier();
}

TEST_CASE("deadlock: messages in flight around a ring are not a cycle") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  comm.barrier();
  // Every rank sends to the next, then receives from the previous: each may sit in its recv
  // while the others' probes pass, but each message has been sent, so no probe comes back.
  for (int round = 0; round < 20; ++round) {
    if (round % 5 == rank) std::this_thread::sleep_for(std::chrono::milliseconds(150));
    comm.send(full({4}, round * 10.0 + rank), (rank + 1) % size, 9);
    const Tensor got = comm.recv((rank + size - 1) % size, 9);
    CHECK(got.to_vector<float>()[0] == static_cast<float>(round * 10 + (rank + size - 1) % size));
  }
  comm.barrier();
}
