// alltoallv (communicator.h) and its differentiable form (comm/functions/collectives.h) on 2-4
// ranks: rows of uneven, random lengths (zero included) in every dtype; gradients against the
// same sums computed by one process, and the distributed gradient check; errors on every rank.
#include <catch2/catch.hpp>

#include "autograd/functions.h"
#include "comm/functions.h"
#include "comm/functions/gradcheck.h"
#include "comm/transport/communicator.h"
#include "core/random.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;
using test_util::require_values;
using test_util::uniform;

namespace {

Communicator& world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return *comm;
}

// How many rows rank `from` sends to rank `to` in round `round`: 0 to 4, drawn from one
// generator every rank seeds alike, so every rank knows every count. Round 0 sends nothing to
// or from rank 0 (every piece of it empty).
std::int64_t count(int round, int from, int to, int n) {
  if (round == 0 && (from == 0 || to == 0)) return 0;
  Generator generator(1000 + round);
  std::vector<std::int64_t> all;
  for (int k = 0; k < n * n; ++k) all.push_back(static_cast<std::int64_t>(generator.next() % 5));
  return all[static_cast<std::size_t>(from * n + to)];
}

// What rank `from` sends in round `round`: its rows, [sum of its counts, 3], seeded by the rank.
Tensor rows_of(int round, int from, int n, DType dtype) {
  std::int64_t total = 0;
  for (int to = 0; to < n; ++to) total += count(round, from, to, n);
  return uniform({total, 3}, 50 * round + from, -4, 4, DType::f64).to(dtype);
}

std::vector<std::int64_t> send_counts(int round, int from, int n) {
  std::vector<std::int64_t> counts;
  for (int to = 0; to < n; ++to) counts.push_back(count(round, from, to, n));
  return counts;
}

// The rows rank `to` must receive: from each rank in order, the piece that rank cut for it.
std::vector<double> expected_rows(int round, int to, int n, DType dtype) {
  std::vector<double> want;
  for (int from = 0; from < n; ++from) {
    const std::vector<double> rows = rows_of(round, from, n, dtype).to_vector<double>();
    std::int64_t begin = 0;
    for (int q = 0; q < to; ++q) begin += count(round, from, q, n);
    want.insert(want.end(), rows.begin() + begin * 3, rows.begin() + (begin + count(round, from, to, n)) * 3);
  }
  return want;
}

}  // namespace

TEST_CASE("alltoallv delivers rows of uneven lengths, zero included, in every dtype") {
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  for (int round = 0; round < 4; ++round) {
    for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
      INFO("round " << round << ", " << dtype);
      const AlltoallvResult got = comm.alltoallv(rows_of(round, r, n, dtype), send_counts(round, r, n));
      std::int64_t total = 0;
      for (int from = 0; from < n; ++from) {
        REQUIRE(got.recv_counts[static_cast<std::size_t>(from)] == count(round, from, r, n));
        total += count(round, from, r, n);
      }
      REQUIRE(got.y.dtype() == dtype);
      REQUIRE(got.y.shape() == Shape{total, 3});
      require_values(got.y, expected_rows(round, r, n, dtype));
    }
  }
  // Rows of any shape: [k] (scalars per row) and [k, 2, 2].
  const AlltoallvResult flat = comm.alltoallv(full({n}, r, DType::i64), std::vector<std::int64_t>(n, 1));
  std::vector<double> ranks;
  for (int q = 0; q < n; ++q) ranks.push_back(q);
  require_values(flat.y, ranks);
  const AlltoallvResult blocks = comm.alltoallv(full({2 * n, 2, 2}, r), std::vector<std::int64_t>(n, 2));
  REQUIRE(blocks.y.shape() == Shape{2 * n, 2, 2});
}

TEST_CASE("differentiable alltoallv: gradients go back along the same routes") {
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  const int round = 2;
  Variable x(rows_of(round, r, n, DType::f64), true);
  std::vector<std::int64_t> received;
  Variable y = F::alltoallv(comm, x, send_counts(round, r, n), &received);
  for (int from = 0; from < n; ++from) REQUIRE(received[static_cast<std::size_t>(from)] == count(round, from, r, n));
  // Loss: sum(y * w_r) with w_r seeded by the receiving rank. One process's answer: the
  // gradient of the rows x sent to rank q is the block of w_q that those rows landed on.
  auto weights = [&](int to) {
    std::int64_t rows = 0;
    for (int from = 0; from < n; ++from) rows += count(round, from, to, n);
    return uniform({rows, 3}, 900 + to, 0.5, 2, DType::f64);
  };
  F::sum(y * Variable(weights(r))).backward();
  std::vector<double> want;
  for (int to = 0; to < n; ++to) {
    const std::vector<double> w = weights(to).to_vector<double>();
    std::int64_t begin = 0;  // where this rank's rows start among those rank `to` received
    for (int from = 0; from < r; ++from) begin += count(round, from, to, n);
    want.insert(want.end(), w.begin() + begin * 3, w.begin() + (begin + count(round, r, to, n)) * 3);
  }
  require_values(x.grad(), want);

  GradcheckOptions options;
  options.atol = 1e-7;
  options.rtol = 1e-6;
  const GradcheckResult check = distributed_gradcheck(
      comm,
      [&](const Variables& xs) -> Variables { return {F::tanh(F::alltoallv(comm, F::tanh(xs[0]), send_counts(3, r, n)))}; },
      {rows_of(3, r, n, DType::f64)}, options);
  INFO(check.report);
  REQUIRE(check.ok);
}

TEST_CASE("alltoallv errors: rows of different shapes fail on every rank, before any data moves") {
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  // Rank 1 sends rows of 4 values, the others rows of 3.
  const Tensor x = full({n, r == 1 ? 4 : 3}, 1.0);
  REQUIRE_THROWS_WITH(comm.alltoallv(x, std::vector<std::int64_t>(n, 1)),
                      Contains("alltoallv: the ranks' rows differ") && Contains("rank 1 sends rows of [4] f32") &&
                          Contains("rank 0 sends rows of [3] f32"));
  // Dtypes too (the header exchange's own check, on every rank).
  const Tensor y = full({n, 3}, 1.0, r == 1 ? DType::f64 : DType::f32);
  REQUIRE_THROWS_WITH(comm.alltoallv(y, std::vector<std::int64_t>(n, 1)), Contains("their dtypes differ"));
  // alltoall on one rank and alltoallv on the others.
  if (r == 0) {
    std::vector<Tensor> pieces(n, full({1}, 1.0));
    REQUIRE_THROWS_WITH(comm.alltoall(pieces), Contains("different operations"));
  } else {
    REQUIRE_THROWS_WITH(comm.alltoallv(full({n}, 1.0), std::vector<std::int64_t>(n, 1)),
                        Contains("different operations"));
  }
  // The communicator still works, and no piece of the failed exchanges lands in this one.
  const AlltoallvResult ok = comm.alltoallv(full({n, 2}, r), std::vector<std::int64_t>(n, 1));
  REQUIRE(ok.recv_counts == std::vector<std::int64_t>(n, 1));
  std::vector<double> want;
  for (int q = 0; q < n; ++q) want.insert(want.end(), {double(q), double(q)});
  require_values(ok.y, want, 0, 0);
}

TEST_CASE("alltoallv errors: large pieces already on their way when the headers disagree are discarded") {
  // The pieces travel with the headers (unless TANDEM_EAGER_DATA=0): pieces of 800 kB (past
  // MPI's eager limit) sent to a rank that is in another collective are received and dropped on
  // every rank, so the next exchange gets its own rows only.
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  const std::int64_t rows = 200, width = 1000;
  if (r == 0) {
    REQUIRE_THROWS_WITH(comm.allreduce(full({5}, 1.0)), Contains("different operations"));
  } else {
    REQUIRE_THROWS_WITH(comm.alltoallv(full({rows * n, width}, -1.0), std::vector<std::int64_t>(n, rows)),
                        Contains("different operations"));
  }
  // Rank r sends rank q rows of value 100 r + q.
  std::vector<Tensor> pieces;
  for (int q = 0; q < n; ++q) pieces.push_back(full({rows, width}, 100.0 * r + q));
  const AlltoallvResult got = comm.alltoallv(concat(pieces, 0), std::vector<std::int64_t>(n, rows));
  REQUIRE(got.recv_counts == std::vector<std::int64_t>(n, rows));
  std::vector<double> want;
  for (int q = 0; q < n; ++q) want.insert(want.end(), static_cast<std::size_t>(rows * width), 100.0 * q + r);
  require_values(got.y, want, 0, 0);
}

TEST_CASE("alltoallv errors: counts that do not fit x, on the rank that passed them") {
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  REQUIRE_THROWS_WITH(comm.alltoallv(full({3, 2}, 1.0), std::vector<std::int64_t>(n, 5)),
                      Contains("alltoallv: rank " + std::to_string(r) + "'s send counts add up to " +
                               std::to_string(5 * n) + " rows but") &&
                          Contains("has 3"));
  REQUIRE_THROWS_WITH(comm.alltoallv(full({3, 2}, 1.0), {3}),
                      Contains("passed 1 send counts for " + std::to_string(n) + " ranks"));
  std::vector<std::int64_t> negative(n, 0);
  negative[0] = -1;
  negative[1] = 4;
  REQUIRE_THROWS_WITH(comm.alltoallv(full({3, 2}, 1.0), negative), Contains("send count for rank 0 is -1"));
  REQUIRE_THROWS_WITH(comm.alltoallv(full({}, 1.0), std::vector<std::int64_t>(n, 0)),
                      Contains("needs at least one axis"));
  // Nothing was exchanged: the next alltoallv works.
  REQUIRE(comm.alltoallv(full({0, 2}, 1.0), std::vector<std::int64_t>(n, 0)).y.shape() == Shape{0, 2});
}
