// Multi-rank tests of the Communicator ("naive", MPI): run by `bazel test` on 2 and 3 ranks
// (tests/comm/mpi_test.bzl). Every test case runs on every rank in declaration order and works
// for any size >= 2. Contributions are deterministic functions of the rank, so each rank can
// compute what every other rank sent and check values exactly.
//
// Rules that keep the ranks in step: checks use CHECK (not REQUIRE), so a failed check never
// skips a rank's remaining communication; every expected error leaves no message unreceived
// and no rank inside an operation that the others have left.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "autograd/check_finite.h"
#include "comm/data_parallel/data_parallel.h"
#include "comm/transport/communicator.h"
#include "comm/transport/mpi_communicator.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cuda/cuda.h"
#include "layers/link.h"
#include "layers/links/linear.h"

using namespace tandem;
using Catch::Matchers::Contains;

namespace {

const DType kAllDTypes[] = {DType::f32, DType::f64, DType::i32, DType::i64, DType::boolean};
const DType kSumDTypes[] = {DType::f32, DType::f64, DType::i32, DType::i64};

// One communicator over MPI_COMM_WORLD for the whole run (created collectively by the first
// test case, which every rank runs first).
Communicator& world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return *comm;
}

// The message of the tandem::Error that f throws, or "(no error)". Any other exception escapes.
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

void sleep_seconds(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// The values make() stores, as doubles (exactly representable in the dtype): a pattern that
// depends on the seed so that messages from different senders, or in different orders, differ.
std::vector<double> pattern(std::int64_t n, DType dtype, std::int64_t seed) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    double x = 0;
    switch (dtype) {
      case DType::f32: x = static_cast<float>(seed * 1000 + i / 3.0 - 2.5); break;
      case DType::f64: x = seed * 1000 + i / 3.0 - 2.5; break;
      case DType::i32: x = static_cast<double>(seed * 1000 + i - 7); break;
      case DType::i64: x = static_cast<double>(seed * 1000 + i - 7 + (std::int64_t(1) << 40)); break;
      case DType::boolean: x = (i * 7 + seed) % 3 == 0 ? 1 : 0; break;
    }
    v[static_cast<std::size_t>(i)] = x;
  }
  return v;
}

Tensor from_values(const Shape& shape, DType dtype, const std::vector<double>& v) {
  Tensor t(shape, dtype);
  REQUIRE(static_cast<std::size_t>(t.numel()) == v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    switch (dtype) {
      case DType::f32: t.data<float>()[i] = static_cast<float>(v[i]); break;
      case DType::f64: t.data<double>()[i] = v[i]; break;
      case DType::i32: t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v[i]); break;
      case DType::i64: t.data<std::int64_t>()[i] = static_cast<std::int64_t>(v[i]); break;
      case DType::boolean: t.data<bool>()[i] = v[i] != 0; break;
    }
  }
  return t;
}

Tensor make(const Shape& shape, DType dtype, std::int64_t seed) {
  return from_values(shape, dtype, pattern(shape_numel(shape), dtype, seed));
}

std::string describe(const Shape& shape, DType dtype) { return std::string(dtype_name(dtype)) + shape_str(shape); }

// Checks that t has this shape and dtype and holds `want` (within rel_tol), naming the first
// differing element.
void check_values(const Tensor& t, const Shape& shape, DType dtype, const std::vector<double>& want,
                  double rel_tol = 0) {
  REQUIRE(t.defined());
  CHECK(describe(t.shape(), t.dtype()) == describe(shape, dtype));
  if (t.shape() != shape || t.dtype() != dtype) return;
  const std::vector<double> got = t.to_vector<double>();
  std::int64_t bad = -1;
  for (std::size_t i = 0; i < got.size() && bad < 0; ++i) {
    const double tol = rel_tol * std::abs(want[i]);
    if (!(std::abs(got[i] - want[i]) <= tol)) bad = static_cast<std::int64_t>(i);
  }
  std::ostringstream where;
  where.precision(17);
  if (bad >= 0) where << "first mismatch at flat index " << bad << ": got " << got[bad] << ", want " << want[bad];
  INFO(describe(shape, dtype) << ": " << where.str());
  CHECK(bad == -1);
}

// Checks that t equals make(shape, dtype, seed).
void check_made(const Tensor& t, const Shape& shape, DType dtype, std::int64_t seed) {
  check_values(t, shape, dtype, pattern(shape_numel(shape), dtype, seed));
}

std::vector<double> scaled(std::vector<double> v, double factor) {
  for (double& x : v) x *= factor;
  return v;
}

// Integer-valued data whose sums are exact in every summable dtype.
std::vector<double> int_pattern(std::int64_t n, std::int64_t seed) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<double>(seed * 7 + (i % 100) - 20);
  return v;
}

}  // namespace

// ============================================================================================
// 1. Identity, hosts, barrier, split
// ============================================================================================

TEST_CASE("communicator: name, rank, size and host layout") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  REQUIRE(size >= 2);  // the same on every rank: either all continue or none does
  CHECK(comm.name() == "naive");
  CHECK(rank >= 0);
  CHECK(rank < size);
  // One host: intra == world, a single inter rank.
  CHECK(comm.intra_rank() == rank);
  CHECK(comm.intra_size() == size);
  CHECK(comm.inter_rank() == 0);
  CHECK(comm.inter_size() == 1);
  // Ranks are distinct and complete.
  const std::vector<Tensor> all = comm.allgather(full({}, rank, DType::i32));
  REQUIRE(static_cast<int>(all.size()) == size);
  for (int r = 0; r < size; ++r) CHECK(all[r].item() == r);
  // The default timeout comes from TANDEM_COMM_TIMEOUT (unset: 0, wait forever).
  const char* env = std::getenv("TANDEM_COMM_TIMEOUT");
  CHECK(comm.timeout() == (env && *env ? std::strtod(env, nullptr) : 0.0));
}

TEST_CASE("communicator: create_communicator makes independent communicators") {
  Communicator& comm = world();
  CommunicatorPtr other = create_communicator("naive");
  REQUIRE(other != nullptr);
  CHECK(other->rank() == comm.rank());
  CHECK(other->size() == comm.size());
  // The same tag on both communicators: each message arrives on its own communicator.
  if (comm.rank() == 0) {
    comm.send(make({2}, DType::f32, 1), 1, 3);
    other->send(make({3}, DType::f32, 2), 1, 3);
  } else if (comm.rank() == 1) {
    check_made(other->recv(0, 3), {3}, DType::f32, 2);
    check_made(comm.recv(0, 3), {2}, DType::f32, 1);
  }
  other->barrier();
  comm.barrier();
}

TEST_CASE("communicator: barrier waits for every rank") {
  Communicator& comm = world();
  comm.barrier();
  // Rank 0 arrives late: nobody may leave the barrier before it arrives.
  if (comm.rank() == 0) sleep_seconds(0.4);
  const auto start = std::chrono::steady_clock::now();
  comm.barrier();
  const double waited = seconds_since(start);
  if (comm.rank() != 0) CHECK(waited > 0.2);
  for (int i = 0; i < 5; ++i) comm.barrier();
}

TEST_CASE("communicator: split by color, ordered by key") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();

  // Two halves, each in reverse rank order (key = -rank).
  CommunicatorPtr half = comm.split(rank % 2, -rank);
  std::vector<int> members;  // world ranks of this half, in the new order (descending)
  for (int r = size - 1; r >= 0; --r)
    if (r % 2 == rank % 2) members.push_back(r);
  REQUIRE(half != nullptr);
  CHECK(half->name() == "naive");
  CHECK(half->size() == static_cast<int>(members.size()));
  int expected_rank = 0;
  while (members[expected_rank] != rank) ++expected_rank;
  CHECK(half->rank() == expected_rank);
  CHECK(half->intra_rank() == expected_rank);
  CHECK(half->intra_size() == static_cast<int>(members.size()));
  CHECK(half->inter_size() == 1);
  CHECK(half->timeout() == comm.timeout());
  // Collectives on the half: allgather lists the members' world ranks in the new order.
  const std::vector<Tensor> ranks = half->allgather(full({1}, rank, DType::i64));
  REQUIRE(ranks.size() == members.size());
  for (std::size_t i = 0; i < members.size(); ++i) CHECK(ranks[i].item() == members[i]);
  double sum = 0;
  for (int r : members) sum += r + 1;
  CHECK(half->allreduce(full({2}, rank + 1, DType::f64), AllreduceOp::sum).to_vector<double>() ==
        std::vector<double>{sum, sum});

  // One color: the whole world reversed. Point to point uses the new numbering.
  CommunicatorPtr reversed = comm.split(0, -rank);
  CHECK(reversed->size() == size);
  CHECK(reversed->rank() == size - 1 - rank);
  if (reversed->rank() == 0) reversed->send(make({4}, DType::i32, rank), 1, 2);
  if (reversed->rank() == 1) check_made(reversed->recv(0, 2), {4}, DType::i32, size - 1);
  // Equal keys keep the world order.
  CommunicatorPtr same = comm.split(3, 7);
  CHECK(same->rank() == rank);
  CHECK(same->size() == size);
  const Tensor b = same->bcast(make({2, 2}, DType::f64, 55), size - 1);
  check_made(b, {2, 2}, DType::f64, 55);
  // Splitting a split.
  CommunicatorPtr inner = reversed->split(0, 0);
  CHECK(inner->rank() == reversed->rank());
  inner->barrier();
  reversed->barrier();
  half->barrier();
}

// ============================================================================================
// 2. Point to point
// ============================================================================================

TEST_CASE("send/recv: every dtype, scalar to 4-D, and zero-size tensors") {
  Communicator& comm = world();
  const std::vector<Shape> shapes = {{}, {0}, {3, 0}, {5}, {2, 3}, {2, 3, 4}, {2, 1, 3, 2}, {0, 2, 0, 1}};
  // Rank 0 -> rank 1, then rank 1 -> rank 0; the receiver learns dtype and shape.
  for (int direction = 0; direction < 2; ++direction) {
    const int from = direction, to = 1 - direction;
    std::int64_t seed = 0;
    for (DType dtype : kAllDTypes) {
      for (const Shape& shape : shapes) {
        ++seed;
        if (comm.rank() == from) comm.send(make(shape, dtype, seed), to, direction);
        if (comm.rank() == to) {
          INFO("message " << seed << ": " << describe(shape, dtype) << " from rank " << from);
          check_made(comm.recv(from, direction), shape, dtype, seed);
        }
      }
    }
  }
  // Every other rank sends rank 0 a tensor of its own shape.
  if (comm.rank() == 0) {
    for (int r = 2; r < comm.size(); ++r) check_made(comm.recv(r, 9), {r, r + 1}, DType::f64, r);
  } else if (comm.rank() >= 2) {
    comm.send(make({comm.rank(), comm.rank() + 1}, DType::f64, comm.rank()), 0, 9);
  }
  comm.barrier();
}

TEST_CASE("send/recv: payloads at and above the inline threshold") {
  Communicator& comm = world();
  const std::int64_t inline_floats = MpiCommunicator::kInlineBytes / 4;  // exactly kInlineBytes of f32
  struct Case {
    Shape shape;
    DType dtype;
  };
  const std::vector<Case> cases = {
      {{inline_floats}, DType::f32},        // inline, at the limit
      {{inline_floats + 1}, DType::f32},    // one element over: header and payload separately
      {{1024, 1024}, DType::f32},           // 1M floats, 4 MiB
      {{3, 100000}, DType::i64},            // 2.4 MB
      {{MpiCommunicator::kInlineBytes + 1}, DType::boolean},
      {{0, 100000}, DType::f64},            // zero-size despite large extents
  };
  for (int direction = 0; direction < 2; ++direction) {
    const int from = direction, to = 1 - direction;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const std::int64_t seed = 10 * direction + static_cast<std::int64_t>(i);
      if (comm.rank() == from) comm.send(make(cases[i].shape, cases[i].dtype, seed), to, 4);
      if (comm.rank() == to) check_made(comm.recv(from, 4), cases[i].shape, cases[i].dtype, seed);
    }
  }
  comm.barrier();
}

TEST_CASE("send/recv: tags are independent streams, each in order") {
  Communicator& comm = world();
  // Rank 0 sends small (inline, so buffered) messages on interleaved tags; rank 1 receives
  // them tag by tag in another order. Objects and tensors share a tag's stream.
  const std::vector<std::pair<int, std::int64_t>> sent = {{1, 10}, {2, 20}, {1, 11}, {kMaxUserTag, 30},
                                                          {2, 21}, {0, 40}, {1, 12}};
  if (comm.rank() == 0) {
    for (auto [tag, seed] : sent) comm.send(make({seed % 4 + 1}, DType::i32, seed), 1, tag);
    comm.send_obj("after 12", 1, 1);
    comm.send(make({2}, DType::i32, 13), 1, 1);
  } else if (comm.rank() == 1) {
    for (int tag : {kMaxUserTag, 2, 0, 1}) {
      for (auto [t, seed] : sent) {
        if (t != tag) continue;
        INFO("tag " << tag << ", seed " << seed);
        check_made(comm.recv(0, tag), {seed % 4 + 1}, DType::i32, seed);
      }
    }
    CHECK(comm.recv_obj(0, 1) == "after 12");
    check_made(comm.recv(0, 1), {2}, DType::i32, 13);
  }
  // Both ways at once on the same tag: 0 -> 1 and 1 -> 0 are different streams.
  if (comm.rank() <= 1) {
    const int peer = 1 - comm.rank();
    comm.send(make({3}, DType::f32, 70 + comm.rank()), peer, 5);
    check_made(comm.recv(peer, 5), {3}, DType::f32, 70 + peer);
  }
  comm.barrier();
}

// ============================================================================================
// 3. Tensor collectives
// ============================================================================================

TEST_CASE("collectives: bcast from every root, every dtype, scalar and zero-size") {
  Communicator& comm = world();
  const int rank = comm.rank();
  for (int root = 0; root < comm.size(); ++root) {
    std::int64_t k = 0;
    for (DType dtype : kAllDTypes) {
      for (const Shape& shape : std::vector<Shape>{{root + 1, 2}, {}, {0, 3}}) {
        const std::int64_t seed = 100 * root + k++;
        // Away from the root x is ignored: undefined, or a tensor of another dtype and shape.
        Tensor x = rank == root ? make(shape, dtype, seed) : (k % 2 ? Tensor() : make({7}, DType::i64, 999));
        INFO("root " << root << ", " << describe(shape, dtype));
        check_made(comm.bcast(x, root), shape, dtype, seed);
      }
    }
  }
  // The default root is 0.
  check_made(comm.bcast(rank == 0 ? make({3}, DType::f32, 5) : Tensor()), {3}, DType::f32, 5);
}

TEST_CASE("collectives: gather of per-rank shapes at every root") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  for (int root = 0; root < size; ++root) {
    for (DType dtype : {DType::f32, DType::i64, DType::boolean}) {
      // Rank r contributes r rows (rank 0 a zero-size piece).
      const std::vector<Tensor> got = comm.gather(make({rank, 2}, dtype, 10 * root + rank), root);
      INFO("root " << root << ", " << dtype_name(dtype));
      if (rank != root) {
        CHECK(got.empty());
        continue;
      }
      REQUIRE(static_cast<int>(got.size()) == size);
      for (int r = 0; r < size; ++r) check_made(got[r], {r, 2}, dtype, 10 * root + r);
    }
    // Scalars.
    const std::vector<Tensor> scalars = comm.gather(full({}, rank * 1.5, DType::f64), root);
    if (rank == root) {
      REQUIRE(static_cast<int>(scalars.size()) == size);
      for (int r = 0; r < size; ++r) check_values(scalars[r], {}, DType::f64, {r * 1.5});
    }
  }
  // Every piece empty.
  const std::vector<Tensor> empty = comm.gather(Tensor({0}, DType::i32), 0);
  if (rank == 0) {
    REQUIRE(static_cast<int>(empty.size()) == size);
    for (const Tensor& t : empty) CHECK(describe(t.shape(), t.dtype()) == "i32[0]");
  }
}

TEST_CASE("collectives: scatter of per-rank shapes from every root") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  for (int root = 0; root < size; ++root) {
    for (DType dtype : {DType::f64, DType::i32, DType::boolean}) {
      auto shape_for = [&](int j) { return Shape{(j + root) % 3, 2}; };  // some pieces zero-size
      std::vector<Tensor> xs;
      if (rank == root)
        for (int j = 0; j < size; ++j) xs.push_back(make(shape_for(j), dtype, 100 * root + j));
      INFO("root " << root << ", " << dtype_name(dtype));
      check_made(comm.scatter(xs, root), shape_for(rank), dtype, 100 * root + rank);
    }
  }
  // Pieces of different ranks (scalar, 1-D, 3-D), default root 0.
  std::vector<Tensor> xs;
  auto shape_for = [](int j) { return j == 0 ? Shape{} : j == 1 ? Shape{4} : Shape{1, j, 2}; };
  if (rank == 0)
    for (int j = 0; j < size; ++j) xs.push_back(make(shape_for(j), DType::f32, j));
  check_made(comm.scatter(xs), shape_for(rank), DType::f32, rank);
}

TEST_CASE("collectives: allgather of equal and unequal shapes") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  // Equal sizes (MPI_Allgather).
  for (DType dtype : kAllDTypes) {
    const std::vector<Tensor> got = comm.allgather(make({2, 3}, dtype, rank));
    REQUIRE(static_cast<int>(got.size()) == size);
    for (int r = 0; r < size; ++r) check_made(got[r], {2, 3}, dtype, r);
  }
  // Unequal shapes and ranks (MPI_Allgatherv); rank 0's piece is empty.
  for (DType dtype : {DType::i64, DType::boolean, DType::f32}) {
    auto shape_for = [](int r) { return r == 1 ? Shape{3} : Shape{r, 2, 1}; };
    const std::vector<Tensor> got = comm.allgather(make(shape_for(rank), dtype, 20 + rank));
    REQUIRE(static_cast<int>(got.size()) == size);
    for (int r = 0; r < size; ++r) check_made(got[r], shape_for(r), dtype, 20 + r);
  }
  // Scalars, and all-empty.
  const std::vector<Tensor> scalars = comm.allgather(full({}, -rank, DType::f64));
  REQUIRE(static_cast<int>(scalars.size()) == size);
  for (int r = 0; r < size; ++r) check_values(scalars[r], {}, DType::f64, {-static_cast<double>(r)});
  const std::vector<Tensor> empty = comm.allgather(Tensor({0, 5}, DType::i32));
  REQUIRE(static_cast<int>(empty.size()) == size);
  for (const Tensor& t : empty) CHECK(describe(t.shape(), t.dtype()) == "i32[0, 5]");
}

TEST_CASE("collectives: alltoall of per-pair shapes") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  // Rank r sends rank j a piece of (r + j) % 3 rows (some empty) made with seed 10 r + j.
  auto shape_for = [](int from, int to) { return Shape{(from + to) % 3, 2}; };
  for (DType dtype : {DType::f32, DType::i64, DType::boolean}) {
    std::vector<Tensor> xs;
    for (int j = 0; j < size; ++j) xs.push_back(make(shape_for(rank, j), dtype, 10 * rank + j));
    const std::vector<Tensor> got = comm.alltoall(xs);
    REQUIRE(static_cast<int>(got.size()) == size);
    for (int r = 0; r < size; ++r) {
      INFO("from rank " << r << ", " << dtype_name(dtype));
      check_made(got[r], shape_for(r, rank), dtype, 10 * r + rank);
    }
  }
  // Scalars.
  std::vector<Tensor> xs;
  for (int j = 0; j < size; ++j) xs.push_back(full({}, 100 * rank + j, DType::i32));
  const std::vector<Tensor> got = comm.alltoall(xs);
  REQUIRE(static_cast<int>(got.size()) == size);
  for (int r = 0; r < size; ++r) check_values(got[r], {}, DType::i32, {100.0 * r + rank});
}

TEST_CASE("collectives: allreduce sum and mean") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  for (const Shape& shape : std::vector<Shape>{{}, {0}, {3, 2}, {2, 0, 3}, {100000}}) {
    const std::int64_t n = shape_numel(shape);
    std::vector<double> sum(static_cast<std::size_t>(n), 0);
    for (int r = 0; r < size; ++r) {
      const std::vector<double> v = int_pattern(n, r);
      for (std::int64_t i = 0; i < n; ++i) sum[i] += v[i];
    }
    for (DType dtype : kSumDTypes) {
      INFO("sum of " << describe(shape, dtype));
      const Tensor x = from_values(shape, dtype, int_pattern(n, rank));
      check_values(comm.allreduce(x, AllreduceOp::sum), shape, dtype, sum);
      // The input is left alone.
      check_values(x, shape, dtype, int_pattern(n, rank));
    }
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO("mean of " << describe(shape, dtype));
      const Tensor x = from_values(shape, dtype, int_pattern(n, rank));
      check_values(comm.allreduce(x, AllreduceOp::mean), shape, dtype, scaled(sum, 1.0 / size),
                   dtype == DType::f32 ? 1e-6 : 1e-15);
    }
  }
  // The default op is sum; fractional values.
  const Tensor y = comm.allreduce(full({2}, 0.25 * (rank + 1), DType::f64));
  const double want = 0.25 * size * (size + 1) / 2;
  check_values(y, {2}, DType::f64, {want, want});
}

TEST_CASE("collectives: tensors of up to 4 KB inside the headers, larger ones after them, and both in one collective") {
  // MpiCommunicator::kInlineCollectiveBytes: 1024 f32 travel inside the headers (no data phase),
  // 1025 after them (MPI's collectives, or the eager pieces); a collective whose ranks pass
  // both kinds takes the second path on every rank. Run again with TANDEM_INLINE_COLLECTIVES=0
  // (communicator_test_mpi_collectives), where everything goes the second way.
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  for (const std::int64_t n : {std::int64_t(1024), std::int64_t(1025)}) {
    INFO(n << " elements");
    std::vector<double> sum(static_cast<std::size_t>(n), 0);
    for (int r = 0; r < size; ++r) {
      const std::vector<double> v = int_pattern(n, r);
      for (std::int64_t i = 0; i < n; ++i) sum[i] += v[i];
    }
    check_values(comm.allreduce(from_values({n}, DType::f32, int_pattern(n, rank))), {n}, DType::f32, sum);
    check_values(comm.allreduce(from_values({n / 2}, DType::i64, int_pattern(n / 2, rank))), {n / 2}, DType::i64,
                 std::vector<double>(sum.begin(), sum.begin() + n / 2));
    for (int root = 0; root < size; ++root)
      check_made(comm.bcast(rank == root ? make({n}, DType::f32, root) : Tensor(), root), {n}, DType::f32, root);
    const std::vector<Tensor> gathered = comm.allgather(make({n}, DType::f32, 30 + rank));
    REQUIRE(static_cast<int>(gathered.size()) == size);
    for (int r = 0; r < size; ++r) check_made(gathered[r], {n}, DType::f32, 30 + r);
  }
  // Mixed: rank r passes 1024 + r % 2 elements, so some ranks' tensors ride in their headers and
  // some do not.
  auto length = [](int r) { return std::int64_t(1024 + r % 2); };
  const std::vector<Tensor> gathered = comm.allgather(make({length(rank)}, DType::f32, 40 + rank));
  REQUIRE(static_cast<int>(gathered.size()) == size);
  for (int r = 0; r < size; ++r) check_made(gathered[r], {length(r)}, DType::f32, 40 + r);
  // alltoall: the pieces for some peers inside the headers, the others beside them.
  auto piece = [](int from, int to) { return Shape{(from + to) % 2 ? 1025 : 1024}; };
  std::vector<Tensor> xs;
  for (int j = 0; j < size; ++j) xs.push_back(make(piece(rank, j), DType::f32, 50 + 10 * rank + j));
  const std::vector<Tensor> got = comm.alltoall(xs);
  REQUIRE(static_cast<int>(got.size()) == size);
  for (int r = 0; r < size; ++r) check_made(got[r], piece(r, rank), DType::f32, 50 + 10 * r + rank);
  // A disagreement between headers that carry tensors fails everywhere and leaves nothing behind.
  CHECK_THAT(error_of([&] { comm.allreduce(full({rank == 0 ? 4 : 5}, 1.0)); }), Contains("shapes differ"));
  check_values(comm.allreduce(full({3}, 1.0 + rank)), {3}, DType::f32,
               std::vector<double>(3, size * (size + 1) / 2.0));
}

TEST_CASE("collectives: allreduce and allgather exchanging whole tensors beside their headers; their errors leave nothing behind") {
  // Up to MpiCommunicator::kDirectRanks ranks, allgather and allreduce (up to 4 MB) send each
  // rank's tensor to every peer beside its header (inside it when small); the MPI path runs
  // under TANDEM_EAGER_DATA=0 (communicator_test_mpi_collectives) and beyond 3 ranks.
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  // Sizes past MPI's eager limit, unequal per rank for allgather.
  const std::int64_t n = 70000;
  std::vector<double> sum(static_cast<std::size_t>(n), 0);
  for (int r = 0; r < size; ++r) {
    const std::vector<double> v = int_pattern(n, r);
    for (std::int64_t i = 0; i < n; ++i) sum[i] += v[i];
  }
  for (DType dtype : kSumDTypes)
    check_values(comm.allreduce(from_values({n}, dtype, int_pattern(n, rank))), {n}, dtype, sum);
  check_values(comm.allreduce(from_values({n}, DType::f64, int_pattern(n, rank)), AllreduceOp::mean), {n}, DType::f64,
               scaled(sum, 1.0 / size), 1e-15);
  auto rows = [](int r) { return std::int64_t(3000 * (r + 1)); };
  const std::vector<Tensor> gathered = comm.allgather(make({rows(rank), 7}, DType::f32, 70 + rank));
  REQUIRE(static_cast<int>(gathered.size()) == size);
  for (int r = 0; r < size; ++r) check_made(gathered[r], {rows(r), 7}, DType::f32, 70 + r);
  // Disagreements, each followed by a collective that must see only its own data: shapes (both
  // tensors beside the headers), one tensor inside its header and the other beside it, and the
  // reduction asked for.
  CHECK_THAT(error_of([&] { comm.allreduce(full({rank == 0 ? 20000 : 20001}, 1.0)); }), Contains("shapes differ"));
  check_values(comm.allreduce(full({20000}, 2.0)), {20000}, DType::f32, std::vector<double>(20000, 2.0 * size));
  CHECK_THAT(error_of([&] { comm.allreduce(full({rank == 0 ? 3 : 20000}, 1.0)); }), Contains("shapes differ"));
  check_values(comm.allreduce(full({3}, 3.0)), {3}, DType::f32, std::vector<double>(3, 3.0 * size));
  CHECK_THAT(error_of([&] {
               comm.allreduce(full({20000}, 1.0, DType::f64), rank == 0 ? AllreduceOp::sum : AllreduceOp::mean);
             }),
             Contains("different reductions"));
  check_values(comm.allreduce(full({20000}, 4.0)), {20000}, DType::f32, std::vector<double>(20000, 4.0 * size));
  CHECK_THAT(error_of([&] { comm.allgather(full({20000}, 1.0, rank == 0 ? DType::f32 : DType::f64)); }),
             Contains("dtypes differ"));
  const std::vector<Tensor> after = comm.allgather(full({20000}, 5.0 + rank));
  REQUIRE(static_cast<int>(after.size()) == size);
  for (int r = 0; r < size; ++r) check_values(after[r], {20000}, DType::f32, std::vector<double>(20000, 5.0 + r));
}

TEST_CASE("collectives: large tensors read straight from the sender's memory, beside MPI messages in one collective") {
  // From MpiCommunicator::kDirectReadMinBytes (64 KB) on, a piece or bcast payload for a peer on
  // this host stays in the sender's memory and the peer reads it there (direct_read.h); smaller
  // ones go in MPI messages. communicator_test_mpi_messages runs this with TANDEM_DIRECT_READ=0,
  // communicator_test_mpi_collectives with no eager data at all: everything through MPI.
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  auto setting_off = [](const char* name) {
    const char* text = std::getenv(name);
    return text && std::string(text) == "0";
  };
  // The test's ranks share one host, where Linux lets a process read its peers' memory.
  const bool reads = !setting_off("TANDEM_DIRECT_READ") && !setting_off("TANDEM_EAGER_DATA");
  auto& mpi = dynamic_cast<MpiCommunicator&>(comm);
  for (int peer = 0; peer < size; ++peer) CHECK(mpi.reads_memory_of(peer) == (reads && peer != rank));

  const std::int64_t below = 16383, at = 16384;  // f32 elements: 4 bytes under 64 KB, and 64 KB
  for (const std::int64_t n : {below, at, std::int64_t(1) << 18}) {
    INFO(n << " elements");
    for (int root = 0; root < size; ++root) {
      // The root's tensor is a view that starts 3 rows into its storage; the root overwrites it
      // as soon as bcast returns, which must be after every peer has read it.
      Tensor storage = make({n + 3}, DType::f32, 0);
      Tensor x = storage.slice_rows(3, n + 3);
      if (rank == root) {
        const Tensor want = make({n}, DType::f32, 80 + root);
        std::memcpy(x.raw_data(), want.raw_data(), want.nbytes());
      }
      const Tensor y = comm.bcast(rank == root ? x : Tensor(), root);
      if (rank == root) std::memset(storage.raw_data(), 0, storage.nbytes());  // y is x there
      else check_made(y, {n}, DType::f32, 80 + root);
      comm.barrier();  // the overwrite must not reach a peer through a later collective
    }
  }
  // alltoall: rank i's piece for rank j is read (64 KB) where i < j and sent (just under) where
  // i > j, three times over so that each collective's read-done words pair with its own reads.
  auto piece = [&](int from, int to) { return Shape{from < to ? at : below}; };
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    std::vector<Tensor> xs;
    for (int j = 0; j < size; ++j) xs.push_back(make(piece(rank, j), DType::f32, 100 * round + 10 * rank + j));
    const std::vector<Tensor> got = comm.alltoall(xs);
    for (Tensor& x : xs) std::memset(x.raw_data(), 0xff, x.nbytes());  // read by now, or never
    REQUIRE(static_cast<int>(got.size()) == size);
    for (int r = 0; r < size; ++r) check_made(got[r], piece(r, rank), DType::f32, 100 * round + 10 * r + rank);
  }
  // allgather and allreduce of 1 MB: every peer's whole tensor read.
  const std::int64_t n = std::int64_t(1) << 18;
  const std::vector<Tensor> gathered = comm.allgather(make({n}, DType::f32, 200 + rank));
  REQUIRE(static_cast<int>(gathered.size()) == size);
  for (int r = 0; r < size; ++r) check_made(gathered[r], {n}, DType::f32, 200 + r);
  std::vector<double> sum(static_cast<std::size_t>(n), 0);
  for (int r = 0; r < size; ++r) {
    const std::vector<double> v = int_pattern(n, r);
    for (std::int64_t i = 0; i < n; ++i) sum[i] += v[i];
  }
  check_values(comm.allreduce(from_values({n}, DType::f32, int_pattern(n, rank))), {n}, DType::f32, sum);
  // A disagreement where the tensors stay in memory: no rank reads, and nothing is left behind.
  CHECK_THAT(error_of([&] { comm.bcast(full({at}, 1.0), rank == 0 ? 0 : 1); }), Contains("different roots"));
  CHECK_THAT(error_of([&] { comm.allgather(full({at}, 1.0, rank == 0 ? DType::f32 : DType::i32)); }),
             Contains("dtypes differ"));
  const std::vector<Tensor> after = comm.allgather(full({at}, 6.0 + rank));
  for (int r = 0; r < size; ++r) check_values(after[r], {at}, DType::f32, std::vector<double>(at, 6.0 + r));
}

TEST_CASE("errors: recv while the peer is in a small allreduce fails at once; the allreduce still gets the data its header carried") {
  // Rank 0's diagnosis takes rank 1's header (with rank 1's tensor inside it) early; the
  // allreduce rank 0 then enters must use that tensor.
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  comm.barrier();
  const Tensor x = full({5}, 1.0 + rank, DType::f64);
  const std::vector<double> want(5, size * (size + 1) / 2.0);
  if (rank == 0) {
    comm.send(make({2}, DType::f32, 63), 1, 8);
    CHECK_THAT(error_of([&] { comm.recv(1, 8); }),
               Contains("recv (from rank 1, tag 8) on rank 0") && Contains("has entered allreduce f64[5]"));
    check_values(comm.allreduce(x), {5}, DType::f64, want);
  } else {
    check_values(comm.allreduce(x), {5}, DType::f64, want);
    if (rank == 1) check_made(comm.recv(0, 8), {2}, DType::f32, 63);
  }
  comm.barrier();
}

TEST_CASE("collectives: reduce at every root") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  for (int root = 0; root < size; ++root) {
    for (DType dtype : kSumDTypes) {
      for (const Shape& shape : std::vector<Shape>{{2, 3}, {}, {0}}) {
        const std::int64_t n = shape_numel(shape);
        std::vector<double> sum(static_cast<std::size_t>(n), 0);
        for (int r = 0; r < size; ++r) {
          const std::vector<double> v = int_pattern(n, r + root);
          for (std::int64_t i = 0; i < n; ++i) sum[i] += v[i];
        }
        const Tensor y = comm.reduce(from_values(shape, dtype, int_pattern(n, rank + root)), root);
        INFO("root " << root << ", " << describe(shape, dtype));
        if (rank == root) {
          check_values(y, shape, dtype, sum);
        } else {
          CHECK(!y.defined());
        }
      }
    }
  }
}

TEST_CASE("collectives: reduce_scatter of per-rank pieces") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  // Piece i (the same shape on every rank) goes to rank i; rank 0's piece is empty.
  auto shape_for = [](int i) { return Shape{i, 2}; };
  for (DType dtype : kSumDTypes) {
    std::vector<Tensor> xs;
    for (int i = 0; i < size; ++i)
      xs.push_back(from_values(shape_for(i), dtype, int_pattern(shape_numel(shape_for(i)), 10 * rank + i)));
    std::vector<double> want(static_cast<std::size_t>(shape_numel(shape_for(rank))), 0);
    for (int r = 0; r < size; ++r) {
      const std::vector<double> v = int_pattern(static_cast<std::int64_t>(want.size()), 10 * r + rank);
      for (std::size_t k = 0; k < want.size(); ++k) want[k] += v[k];
    }
    INFO(dtype_name(dtype));
    check_values(comm.reduce_scatter(xs), shape_for(rank), dtype, want);
  }
  // Scalar pieces.
  std::vector<Tensor> xs;
  for (int i = 0; i < size; ++i) xs.push_back(full({}, rank + 10 * i, DType::f64));
  check_values(comm.reduce_scatter(xs), {}, DType::f64, {size * (size - 1) / 2.0 + 10.0 * rank * size});
}

// ============================================================================================
// 4. Objects
// ============================================================================================

namespace {

// Binary strings: NULs, high bytes, and one longer than the inline threshold.
std::vector<std::string> object_cases(int seed) {
  std::string binary("a\0b\xff\x80\0", 6);
  binary += std::to_string(seed);
  std::string big(MpiCommunicator::kInlineBytes + 100, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 31 + seed) % 256);
  return {"", "hello " + std::to_string(seed), binary, std::string(1, '\0'), big};
}

}  // namespace

TEST_CASE("objects: send_obj and recv_obj, both ways") {
  Communicator& comm = world();
  for (int direction = 0; direction < 2; ++direction) {
    const int from = direction, to = 1 - direction;
    const std::vector<std::string> cases = object_cases(direction);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      if (comm.rank() == from) comm.send_obj(cases[i], to, static_cast<int>(i));
    }
    if (comm.rank() == to) {
      // Received in reverse tag order.
      for (std::size_t i = cases.size(); i-- > 0;) {
        const std::string got = comm.recv_obj(from, static_cast<int>(i));
        INFO("case " << i << " from rank " << from);
        CHECK(got.size() == cases[i].size());
        CHECK(got == cases[i]);
      }
    }
  }
  comm.barrier();
}

TEST_CASE("objects: bcast_obj from every root") {
  Communicator& comm = world();
  for (int root = 0; root < comm.size(); ++root) {
    for (const std::string& bytes : object_cases(root)) {
      // Away from the root the argument is ignored.
      const std::string got = comm.bcast_obj(comm.rank() == root ? bytes : std::string("ignored"), root);
      CHECK(got.size() == bytes.size());
      CHECK(got == bytes);
    }
  }
  CHECK(comm.bcast_obj(comm.rank() == 0 ? std::string("zero\0", 5) : std::string()) == std::string("zero\0", 5));
}

TEST_CASE("objects: gather_obj at every root") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  // Rank 0 contributes an empty string; the others binary bytes of their own length.
  auto bytes_of = [](int r, int root) {
    std::string s(static_cast<std::size_t>(r * 3), '\0');
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i % 2 ? 0 : 200 + r + root);
    return s;
  };
  for (int root = 0; root < size; ++root) {
    const std::vector<std::string> got = comm.gather_obj(bytes_of(rank, root), root);
    if (rank != root) {
      CHECK(got.empty());
      continue;
    }
    REQUIRE(static_cast<int>(got.size()) == size);
    for (int r = 0; r < size; ++r) CHECK(got[r] == bytes_of(r, root));
  }
  const std::vector<std::string> empty = comm.gather_obj("", 0);
  if (rank == 0) CHECK(empty == std::vector<std::string>(size));
}

// ============================================================================================
// 5. Data parallelism
// ============================================================================================

namespace {

// l1: Linear(3, 4) f32, l2: Linear(4, 2) f64, lazy: Linear(-1, 2) whose W is not initialised.
std::shared_ptr<Chain> make_model(std::int64_t l1_out = 4) {
  auto model = std::make_shared<Chain>();
  model->add_link("l1", std::make_shared<Linear>(3, l1_out));
  LinearOptions f64;
  f64.dtype = DType::f64;
  model->add_link("l2", std::make_shared<Linear>(l1_out, 2, f64));
  model->add_link("lazy", std::make_shared<Linear>(-1, 2));
  return model;
}

// Overwrites every initialised parameter with make(shape, dtype, seed_base + its index).
void fill_params(Link& link, std::int64_t seed_base) {
  std::int64_t k = 0;
  for (auto& [name, p] : link.namedparams()) {
    Tensor data = p.data();
    data.copy_(make(p.shape(), p.dtype(), seed_base + k++));
  }
}

}  // namespace

TEST_CASE("data parallel: bcast_data gives every rank rank 0's parameters") {
  Communicator& comm = world();
  auto model = make_model();
  const auto params = model->namedparams();
  REQUIRE(params.size() == 5);  // l1/W l1/b l2/W l2/b lazy/b
  fill_params(*model, 1000 * (comm.rank() + 1));
  bcast_data(comm, *model);
  std::int64_t k = 0;
  for (auto& [name, p] : model->namedparams()) {
    INFO("parameter " << name);
    check_made(p.data(), p.shape(), p.dtype(), 1000 + k++);
  }
  // The uninitialised parameter was skipped (on every rank alike) and stays so.
  CHECK(model->namedparams(true).size() == 6);
  CHECK(model->namedparams().size() == 5);
}

TEST_CASE("data parallel: multi_node_mean_grad averages every gradient") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  auto model = make_model();
  fill_params(*model, 7);
  std::int64_t k = 0;
  for (auto& [name, p] : model->namedparams())
    p.set_grad(from_values(p.shape(), p.dtype(), int_pattern(p.numel(), 10 * rank + k++)));
  multi_node_mean_grad(comm, *model);
  k = 0;
  for (auto& [name, p] : model->namedparams()) {
    std::vector<double> mean(static_cast<std::size_t>(p.numel()), 0);
    for (int r = 0; r < size; ++r) {
      const std::vector<double> v = int_pattern(p.numel(), 10 * r + k);
      for (std::size_t i = 0; i < mean.size(); ++i) mean[i] += v[i] / size;
    }
    INFO("gradient of " << name);
    check_values(p.grad(), p.shape(), p.dtype(), mean, p.dtype() == DType::f32 ? 1e-6 : 1e-12);
    // The parameters themselves are untouched.
    check_made(p.data(), p.shape(), p.dtype(), 7 + k);
    ++k;
  }
}

namespace {

// How the errors list one or two ranks: "rank 1", "ranks 0 and 2" (longer lists write runs of
// three or more as ranges, "ranks 0-2 and 4"; the tests compare lists of at most two).
std::string ranks_text(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
  return "ranks " + std::to_string(ranks[0]) + " and " + std::to_string(ranks[1]);
}

// Rank 0's text, on every rank: to check that every rank says the same.
std::string rank0s(Communicator& comm, const std::string& text) { return comm.bcast_obj(text, 0); }

// Checks that every initialised parameter of `model` has the gradient `value` everywhere.
void check_grads(Link& model, double value) {
  for (auto& [name, p] : model.namedparams()) {
    INFO("gradient of " << name);
    CHECK(p.grad().defined());
    if (p.grad().defined())
      check_values(p.grad(), p.shape(), p.dtype(), std::vector<double>(static_cast<std::size_t>(p.numel()), value),
                   1e-6);
  }
}

}  // namespace

TEST_CASE("data parallel: a gradient missing on some ranks only is an error on every rank, naming them") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  auto model = make_model();
  auto set_all = [&] {
    for (auto& [name, p] : model->namedparams()) p.set_grad(full(p.shape(), rank + 1, p.dtype()));
  };
  std::vector<int> all_but_1, ranks_from_1;
  for (int r = 0; r < size; ++r) {
    if (r != 1) all_but_1.push_back(r);
    if (r >= 1) ranks_from_1.push_back(r);
  }

  // Only rank 1 lacks l2/W's gradient: every rank's error names the parameter and rank 1, in the
  // same words, and no gradient changed (the ranks decided before any moved).
  set_all();
  if (rank == 1) model->get<Linear>("l2")->W().cleargrad();
  std::string error = error_of([&] { multi_node_mean_grad(comm, *model); });
  CHECK_THAT(error, Contains("multi_node_mean_grad: the ranks disagree on which parameters have a gradient: "
                             "'l2/W' (f64[2, 4]) has none on rank 1 but one on ") &&
                        Contains("zero_fill = true"));
  if (size <= 3) CHECK_THAT(error, Contains("has none on rank 1 but one on " + ranks_text(all_but_1) + "."));
  CHECK(error == rank0s(comm, error));
  CHECK(!model->get<Linear>("l2")->W().grad().defined() == (rank == 1));
  model->get<Linear>("l2")->W().set_grad(full({2, 4}, rank + 1, DType::f64));
  check_grads(*model, rank + 1);

  // Ranks 1 to size - 1 lack l1/b's (f32) and l2/b's (f64) gradients: on 3 ranks, "ranks 1 and 2";
  // parameters of both dtypes are listed together.
  set_all();
  if (rank >= 1) {
    model->get<Linear>("l1")->b().cleargrad();
    model->get<Linear>("l2")->b().cleargrad();
  }
  error = error_of([&] { multi_node_mean_grad(comm, *model); });
  CHECK_THAT(error, Contains("'l1/b' (f32[4]) has none on ") && Contains("; 'l2/b' (f64[2]) has none on ") &&
                        Contains("but one on rank 0") && Contains("zero_fill"));
  if (size <= 3)
    CHECK_THAT(error, Contains("'l1/b' (f32[4]) has none on " + ranks_text(ranks_from_1) + " but one on rank 0;"));
  CHECK(error == rank0s(comm, error));

  // Every parameter missing on rank 1: the first three are named, and how many in all.
  set_all();
  if (rank == 1) model->cleargrads();
  error = error_of([&] { multi_node_mean_grad(comm, *model); });
  CHECK_THAT(error, Contains("'l1/W' (f32[4, 3]) has none on rank 1") && Contains("'l2/W' (f64[2, 4]) has none") &&
                        Contains("; and 2 more (5 parameters in all)"));
  CHECK_THAT(error, !Contains("'l2/b'") && !Contains("'lazy/b'"));
  CHECK(error == rank0s(comm, error));
}

TEST_CASE("data parallel: a gradient missing on every rank is skipped, or zeros with zero_fill") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  auto model = make_model();
  auto set_all = [&] {
    for (auto& [name, p] : model->namedparams()) p.set_grad(full(p.shape(), rank + 1, p.dtype()));
  };
  const double all_mean = (size + 1) / 2.0;  // mean of 1..size

  // No rank has the gradients of l2/W (f64) and lazy/b (f32): they stay without one, and the
  // others of both dtypes are averaged.
  set_all();
  model->get<Linear>("l2")->W().cleargrad();
  model->get<Linear>("lazy")->b().cleargrad();
  CHECK(error_of([&] { multi_node_mean_grad(comm, *model); }) == "(no error)");
  for (auto& [name, p] : model->namedparams()) {
    INFO("gradient of " << name);
    const bool skipped = name == "l2/W" || name == "lazy/b";
    CHECK(p.grad().defined() == !skipped);
    if (!skipped && p.grad().defined())
      check_values(p.grad(), p.shape(), p.dtype(), std::vector<double>(static_cast<std::size_t>(p.numel()), all_mean),
                   1e-6);
  }

  // The same with zero_fill: zeros for those, the mean for the others.
  set_all();
  model->get<Linear>("l2")->W().cleargrad();
  model->get<Linear>("lazy")->b().cleargrad();
  multi_node_mean_grad(comm, *model, /*zero_fill=*/true);
  for (auto& [name, p] : model->namedparams()) {
    INFO("gradient of " << name);
    const bool filled = name == "l2/W" || name == "lazy/b";
    CHECK(p.grad().defined());
    if (p.grad().defined())
      check_values(p.grad(), p.shape(), p.dtype(),
                   std::vector<double>(static_cast<std::size_t>(p.numel()), filled ? 0 : all_mean), 1e-6);
  }

  // zero_fill: only rank 0 lacks l2's gradients; they count as zeros there.
  set_all();
  if (rank == 0) {
    model->get<Linear>("l2")->W().cleargrad();
    model->get<Linear>("l2")->b().cleargrad();
  }
  multi_node_mean_grad(comm, *model, true);
  const double zero_mean = (size * (size + 1) / 2.0 - 1) / size;  // rank 0's 1 replaced by 0
  for (auto& [name, p] : model->namedparams()) {
    INFO("gradient of " << name);
    const bool l2 = name.rfind("l2/", 0) == 0;
    CHECK(p.grad().defined());
    if (p.grad().defined())
      check_values(p.grad(), p.shape(), p.dtype(),
                   std::vector<double>(static_cast<std::size_t>(p.numel()), l2 ? zero_mean : all_mean), 1e-6);
  }

  // No gradient anywhere: nothing to do without zero_fill, zeros with it.
  model->cleargrads();
  CHECK(error_of([&] { multi_node_mean_grad(comm, *model); }) == "(no error)");
  for (auto& [name, p] : model->namedparams()) CHECK(!p.grad().defined());
  multi_node_mean_grad(comm, *model, true);
  check_grads(*model, 0);
}

TEST_CASE("data parallel: models that differ between ranks are an error on every rank") {
  Communicator& comm = world();
  // Rank 0's l1 has 5 outputs, the others' 4: same dtypes, different parameter lists.
  auto model = make_model(comm.rank() == 0 ? 5 : 4);
  CHECK_THAT(error_of([&] { bcast_data(comm, *model); }),
             Contains("disagree") && Contains("lists of tensors differ") && Contains("bcast"));
  for (auto& [name, p] : model->namedparams()) p.set_grad(full(p.shape(), 1, p.dtype()));
  CHECK_THAT(error_of([&] { multi_node_mean_grad(comm, *model); }),
             Contains("disagree") && Contains("lists of tensors differ") && Contains("allreduce"));
  // Also where a gradient is missing somewhere: the models' difference is the error.
  if (comm.rank() == 1) model->get<Linear>("l2")->W().cleargrad();
  CHECK_THAT(error_of([&] { multi_node_mean_grad(comm, *model); }),
             Contains("disagree") && Contains("lists of tensors differ") && Contains("allreduce"));
  comm.barrier();
}

TEST_CASE("data parallel: a NaN gradient under check_finite is an error on every rank, naming its rank") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  const int last = size - 1;
  auto model = make_model();
  auto set_all = [&] {
    for (auto& [name, p] : model->namedparams()) p.set_grad(full(p.shape(), rank + 1, p.dtype()));
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  set_check_finite(true);

  // The last rank's l1/b holds a NaN: it names the element, the others name its rank and the
  // parameter, and no gradient was averaged (the NaN did not spread).
  set_all();
  if (rank == last) model->get<Linear>("l1")->b().set_grad(from_values({4}, DType::f32, {1, nan, 1, 1}));
  std::string error = error_of([&] { multi_node_mean_grad(comm, *model); });
  CHECK_THAT(error, Contains("check_finite: multi_node_mean_grad: "));
  if (rank == last) {
    CHECK_THAT(error, Contains("on rank " + std::to_string(last) +
                               " the gradient of parameter 'l1/b' holds NaN at [1] of f32[4] before the allreduce"));
  } else {
    CHECK_THAT(error,
               Contains("rank " + std::to_string(last) + " has a NaN/Inf gradient in parameter 'l1/b' (f32[4])"));
  }
  CHECK(model->get<Linear>("l1")->W().grad().to_vector<double>() == std::vector<double>(12, rank + 1));

  // Ranks 0 and the last, in different parameters: every rank names both.
  set_all();
  const double inf = std::numeric_limits<double>::infinity();
  if (rank == 0) model->get<Linear>("l2")->W().set_grad(full({2, 4}, inf, DType::f64));
  if (rank == last) model->get<Linear>("l1")->b().set_grad(from_values({4}, DType::f32, {1, nan, 1, 1}));
  error = error_of([&] { multi_node_mean_grad(comm, *model); });
  CHECK_THAT(error, Contains(rank == 0 ? "on rank 0 the gradient of parameter 'l2/W' holds"
                                       : "rank 0 has a NaN/Inf gradient in parameter 'l2/W' (f64[2, 4])"));
  const std::string l = std::to_string(last);
  CHECK_THAT(error, Contains(rank == last ? "on rank " + l + " the gradient of parameter 'l1/b' holds NaN"
                                          : "rank " + l + " has a NaN/Inf gradient in parameter 'l1/b'"));

  // Finite gradients go through.
  set_all();
  CHECK(error_of([&] { multi_node_mean_grad(comm, *model); }) == "(no error)");
  check_grads(*model, (size + 1) / 2.0);
  set_check_finite(false);
}

// ============================================================================================
// 6. Errors
// ============================================================================================

TEST_CASE("errors: unknown communicator names list the valid ones") {
  CHECK_THAT(error_of([] { create_communicator("nonsense"); }),
             Contains("unknown communicator \"nonsense\"") && Contains("\"naive\"") && Contains("\"pure_nccl\""));
}

// Where there is a GPU, tests/comm/gpu_communicator_test.cc covers pure_nccl instead.
TEST_CASE("errors: pure_nccl without CUDA or without a GPU says why, before any MPI call") {
  if (cuda::device_count() > 0) return;
  const std::string reason = cuda::unavailable_reason();
  REQUIRE(!reason.empty());
  if (!cuda::built_with_cuda()) CHECK_THAT(reason, Contains("--config=cuda"));
  for (const std::string& error : {error_of([] { create_communicator("pure_nccl"); }),
                                   error_of([] { create_communicator("pure_nccl", MPI_COMM_WORLD); }),
                                   error_of([] { create_communicator("pure_nccl", MPI_COMM_NULL); })}) {
    CHECK_THAT(error, Contains("\"pure_nccl\" needs a CUDA GPU") && Contains(reason) && Contains("\"naive\""));
  }
  // Nothing collective started: the world communicator still works.
  world().barrier();
}

TEST_CASE("errors: bad peers, tags and roots are rejected before any traffic") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  const std::string me = std::to_string(rank), n = std::to_string(size);
  const Tensor x = make({2}, DType::f32, 1);
  const int peer = rank == 0 ? 1 : 0;

  CHECK_THAT(error_of([&] { comm.send(x, rank); }), Contains("send") && Contains("rank " + me + " cannot communicate with itself"));
  CHECK_THAT(error_of([&] { comm.recv(rank); }), Contains("recv") && Contains("itself"));
  CHECK_THAT(error_of([&] { comm.send_obj("x", rank); }), Contains("send_obj") && Contains("itself"));
  CHECK_THAT(error_of([&] { comm.recv_obj(rank); }), Contains("recv_obj") && Contains("itself"));
  CHECK_THAT(error_of([&] { comm.send(x, size); }),
             Contains("send: rank " + n + " does not exist (communicator of size " + n + ", this is rank " + me));
  CHECK_THAT(error_of([&] { comm.recv(size + 5); }), Contains("recv") && Contains("does not exist"));
  CHECK_THAT(error_of([&] { comm.send(x, -1); }), Contains("rank -1 does not exist"));
  CHECK_THAT(error_of([&] { comm.recv_obj(-1); }), Contains("recv_obj") && Contains("rank -1 does not exist"));
  CHECK_THAT(error_of([&] { comm.send(x, peer, -1); }), Contains("send: tag -1 on rank " + me) && Contains("outside [0, 32766]"));
  CHECK_THAT(error_of([&] { comm.send(x, peer, kMaxUserTag + 1); }), Contains("tag 32767") && Contains("outside"));
  CHECK_THAT(error_of([&] { comm.recv(peer, kMaxUserTag + 1); }), Contains("recv") && Contains("tag 32767"));
  CHECK_THAT(error_of([&] { comm.send_obj("x", peer, -5); }), Contains("send_obj") && Contains("tag -5"));
  CHECK_THAT(error_of([&] { comm.send(Tensor(), peer); }), Contains("send: undefined tensor on rank " + me));

  // Collective arguments every rank gets wrong alike: each throws before the header exchange.
  CHECK_THAT(error_of([&] { comm.bcast(x, size); }), Contains("bcast: root " + n + " does not exist"));
  CHECK_THAT(error_of([&] { comm.gather(x, -1); }), Contains("gather: root -1 does not exist"));
  CHECK_THAT(error_of([&] { comm.reduce(x, size); }), Contains("reduce: root " + n));
  CHECK_THAT(error_of([&] { comm.scatter({}, size); }), Contains("scatter: root " + n));
  CHECK_THAT(error_of([&] { comm.bcast_obj("", size); }), Contains("bcast_obj: root"));
  CHECK_THAT(error_of([&] { comm.gather_obj("", -2); }), Contains("gather_obj: root -2"));
  CHECK_THAT(error_of([&] { comm.allgather(Tensor()); }), Contains("allgather: undefined tensor"));
  CHECK_THAT(error_of([&] { comm.allreduce(make({2}, DType::boolean, 0)); }),
             Contains("allreduce: cannot sum bool"));
  CHECK_THAT(error_of([&] { comm.allreduce(make({2}, DType::i32, 0), AllreduceOp::mean); }),
             Contains("allreduce: the mean of i32[2] needs a floating dtype"));
  CHECK_THAT(error_of([&] { comm.alltoall({x}); }),
             Contains("alltoall: rank " + me + " passed 1 tensors for " + n + " ranks"));
  std::vector<Tensor> mixed(size, x);
  mixed.back() = make({2}, DType::f64, 1);
  CHECK_THAT(error_of([&] { comm.alltoall(mixed); }), Contains("alltoall") && Contains("mix dtypes"));
  CHECK_THAT(error_of([&] { comm.reduce_scatter({x}); }), Contains("reduce_scatter: rank " + me + " passed 1 tensors"));
  CHECK_THAT(error_of([&] { comm.split(-1, 0); }), Contains("split: color -1 on rank " + me));

  // No stray message was sent: the next message on each tag used above is the right one.
  if (rank == 0) {
    for (int tag : {0, kMaxUserTag}) comm.send(make({1}, DType::i64, tag), 1, tag);
  } else if (rank == 1) {
    for (int tag : {0, kMaxUserTag}) check_made(comm.recv(0, tag), {1}, DType::i64, tag);
  }
  // And the collectives are still in step.
  check_values(comm.allreduce(full({1}, 1, DType::i32)), {1}, DType::i32, {static_cast<double>(size)});
}

TEST_CASE("errors: a local error at the root of scatter; the corrected call completes") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  // The root passes too few tensors and throws before the header exchange; the other ranks
  // wait inside the scatter until the root calls it again correctly.
  const int root = size - 1;
  std::vector<Tensor> xs;
  if (rank == root) {
    CHECK_THAT(error_of([&] { comm.scatter({make({1}, DType::f32, 0)}, root); }),
               Contains("scatter: the root (rank " + std::to_string(root) + ") passed 1 tensors for " +
                        std::to_string(size) + " ranks"));
    std::vector<Tensor> mixed;
    for (int j = 0; j < size; ++j) mixed.push_back(make({1}, j == 0 ? DType::f64 : DType::f32, j));
    CHECK_THAT(error_of([&] { comm.scatter(mixed, root); }), Contains("scatter: the root's tensors mix dtypes"));
    for (int j = 0; j < size; ++j) xs.push_back(make({j + 1}, DType::f32, 50 + j));
  }
  check_made(comm.scatter(xs, root), {rank + 1}, DType::f32, 50 + rank);
}

TEST_CASE("errors: different collectives on different ranks fail on every rank") {
  Communicator& comm = world();
  const int rank = comm.rank();
  const Tensor x = make({2, 3}, DType::f32, rank);
  // Rank 0 calls allreduce, the others gather at root 0.
  const std::string error = error_of([&] {
    if (rank == 0) comm.allreduce(x);
    else comm.gather(x, 0);
  });
  CHECK_THAT(error, Contains("disagree") && Contains("different operations") && Contains("rank 0 is in allreduce") &&
                        Contains("rank 1 is in gather f32[2, 3] root 0"));
  // Different roots.
  CHECK_THAT(error_of([&] { comm.bcast(x, rank == 0 ? 0 : 1); }),
             Contains("they name different roots") && Contains("root 0") && Contains("root 1"));
  // bcast_obj against gather_obj.
  CHECK_THAT(error_of([&] {
               if (rank == 1) comm.bcast_obj("a", 0);
               else comm.gather_obj("b", 0);
             }),
             Contains("rank 1 is in bcast_obj") && Contains("rank 0 is in gather_obj"));
  // barrier against split.
  CHECK_THAT(error_of([&] {
               if (rank == 0) comm.barrier();
               else comm.split(0, 0);
             }),
             Contains("rank 0 is in barrier") && Contains("rank 1 is in split"));
  // In step again.
  check_values(comm.allreduce(full({1}, 2, DType::i64)), {1}, DType::i64, {2.0 * comm.size()});
}

TEST_CASE("errors: dtype and shape mismatches fail on every rank") {
  Communicator& comm = world();
  const int rank = comm.rank();
  CHECK_THAT(error_of([&] { comm.allreduce(make({3}, rank == 0 ? DType::f32 : DType::f64, 0)); }),
             Contains("their dtypes differ") && Contains("rank 0 is in allreduce f32[3]") &&
                 Contains("rank 1 is in allreduce f64[3]"));
  CHECK_THAT(error_of([&] { comm.allreduce(make({rank == 0 ? 3 : 4}, DType::f32, 0)); }),
             Contains("their shapes differ") && Contains("rank 0 is in allreduce f32[3]") &&
                 Contains("rank 1 is in allreduce f32[4]"));
  CHECK_THAT(error_of([&] { comm.allreduce(make({3}, DType::f32, 0), rank == 0 ? AllreduceOp::mean : AllreduceOp::sum); }),
             Contains("different reductions"));
  CHECK_THAT(error_of([&] { comm.reduce(make({rank == 0 ? 2 : 1}, DType::i32, 0), 0); }),
             Contains("their shapes differ") && Contains("reduce"));
  CHECK_THAT(error_of([&] { comm.gather(make({2}, rank == 0 ? DType::i32 : DType::i64, 0), 0); }),
             Contains("their dtypes differ") && Contains("gather"));
  CHECK_THAT(error_of([&] { comm.allgather(make({2}, rank == 1 ? DType::boolean : DType::f32, 0)); }),
             Contains("their dtypes differ") && Contains("rank 1 is in allgather bool[2]"));
  // reduce_scatter: the list of piece shapes must agree.
  CHECK_THAT(error_of([&] {
               std::vector<Tensor> xs;
               for (int i = 0; i < comm.size(); ++i) xs.push_back(make({rank == 0 && i == 1 ? 2 : 1}, DType::f32, 0));
               comm.reduce_scatter(xs);
             }),
             Contains("lists of tensors differ") && Contains("reduce_scatter"));
  check_values(comm.allreduce(full({1}, 3, DType::f32)), {1}, DType::f32, {3.0 * comm.size()});
}

TEST_CASE("errors: recv while the peer is in barrier fails at once; the barrier and the message still go through") {
  Communicator& comm = world();
  const int rank = comm.rank();
  comm.barrier();
  if (rank == 0) {
    comm.send(make({3, 4}, DType::f32, 61), 1, 6);
    const auto start = std::chrono::steady_clock::now();
    const std::string error = error_of([&] { comm.recv(1, 6); });
    const double waited = seconds_since(start);
    CHECK_THAT(error, Contains("recv (from rank 1, tag 6) on rank 0 waits for rank 1") &&
                          Contains("has entered barrier") && Contains("certain deadlock"));
    CHECK_THAT(error, !Contains("timed out"));
    CHECK(waited < 5);
    // Asking again gives the same verdict at once.
    CHECK_THAT(error_of([&] { comm.recv(1, 6); }), Contains("has entered barrier"));
    comm.barrier();  // the header received early is used
  } else {
    comm.barrier();
    if (rank == 1) check_made(comm.recv(0, 6), {3, 4}, DType::f32, 61);
  }
  comm.barrier();
}

TEST_CASE("errors: recv while the peer is in gather fails at once; the gather and the message still go through") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  comm.barrier();
  const Tensor x = make({rank + 1}, DType::i64, rank);
  std::vector<Tensor> got;
  if (rank == 0) {
    comm.send(make({3, 4}, DType::f32, 62), 1, 7);
    CHECK_THAT(error_of([&] { comm.recv(1, 7); }),
               Contains("recv (from rank 1, tag 7) on rank 0") && Contains("has entered gather i64[2] root 0"));
    got = comm.gather(x, 0);
    REQUIRE(static_cast<int>(got.size()) == size);
    for (int r = 0; r < size; ++r) check_made(got[r], {r + 1}, DType::i64, r);
  } else {
    got = comm.gather(x, 0);
    CHECK(got.empty());
    if (rank == 1) check_made(comm.recv(0, 7), {3, 4}, DType::f32, 62);
  }
  comm.barrier();
}

TEST_CASE("errors: recv_obj on the last rank while rank 0 is in bcast_obj") {
  Communicator& comm = world();
  const int rank = comm.rank(), last = comm.size() - 1;
  comm.barrier();
  std::string got;
  if (rank == last) {
    CHECK_THAT(error_of([&] { comm.recv_obj(0, 3); }),
               Contains("recv_obj (from rank 0, tag 3) on rank " + std::to_string(last)) &&
                   Contains("has entered bcast_obj of 5 bytes root 0"));
    got = comm.bcast_obj("", 0);
  } else {
    got = comm.bcast_obj(rank == 0 ? std::string("ab\0cd", 5) : std::string(), 0);
  }
  CHECK(got == std::string("ab\0cd", 5));
  if (rank == 0) comm.send_obj("later", last, 3);
  if (rank == last) CHECK(comm.recv_obj(0, 3) == "later");
  comm.barrier();
}

TEST_CASE("errors: a large send to a peer in a collective fails at once; the message is delivered afterwards") {
  Communicator& comm = world();
  const int rank = comm.rank();
  comm.barrier();
  // Above the inline threshold the sender waits for the receiver, which is in barrier.
  const Tensor big = make({100000}, DType::f64, 63);  // kept alive until it has been received
  if (rank == 0) {
    CHECK_THAT(error_of([&] { comm.send(big, 1, 8); }),
               Contains("send f64[100000] (tag 8, message #") && Contains("to rank 1 on rank 0") &&
                   Contains("has entered barrier"));
    comm.barrier();
  } else {
    comm.barrier();
    if (rank == 1) check_made(comm.recv(0, 8), {100000}, DType::f64, 63);
  }
  comm.barrier();
}

// KNOWN BUG (comm/transport/mpi_point_to_point.cc, send_bytes): when the wait of a large send throws, the
// payload's MPI_Isend is abandoned still pointing into the caller's tensor, so the message
// carries whatever that memory holds when the receiver finally receives it (and a freed
// temporary makes the receiving rank read unmapped memory and abort the job). A send that has
// returned, normally or by an exception, must no longer read the caller's tensor.
// A send whose wait fails leaves its payload in flight: the communicator keeps the memory
// alive until it completes, so a temporary tensor's message still arrives intact (before this
// was fixed, the receiver read freed memory and the job aborted in process_vm_readv).
TEST_CASE("errors: a failed large send of a temporary still delivers intact data") {
  Communicator& comm = world();
  const int rank = comm.rank();
  comm.barrier();
  if (rank == 0) {
    CHECK_THAT(error_of([&] { comm.send(make({100000}, DType::f64, 65), 1, 9); }), Contains("has entered barrier"));
    comm.barrier();
  } else {
    comm.barrier();
    if (rank == 1) check_made(comm.recv(0, 9), {100000}, DType::f64, 65);
  }
  comm.barrier();
}

TEST_CASE("errors: a wait on a silent peer times out") {
  Communicator& comm = world();
  const int rank = comm.rank();
  const double original = comm.timeout();
  comm.barrier();
  comm.set_timeout(0.5);
  CHECK(comm.timeout() == 0.5);
  if (rank == 0) {
    // Rank 1 has sent on tag 12, not tag 11: the error says so.
    auto start = std::chrono::steady_clock::now();
    std::string error = error_of([&] { comm.recv(1, 11); });
    double waited = seconds_since(start);
    CHECK_THAT(error, Contains("recv (from rank 1, tag 11) on rank 0 waited") && Contains("s for rank 1 and timed out") &&
                          Contains("TANDEM_COMM_TIMEOUT=0.5") &&
                          Contains("a message from rank 1 on tag 12") && Contains("waiting here unreceived"));
    CHECK(waited >= 0.5);
    CHECK(waited < 1.4);
    check_made(comm.recv(1, 12), {2}, DType::f32, 64);
    // Nothing at all from rank 1 now (it sleeps).
    start = std::chrono::steady_clock::now();
    error = error_of([&] { comm.recv(1, 11); });
    waited = seconds_since(start);
    CHECK_THAT(error, Contains("timed out") && Contains("rank 1") && Contains("nothing from rank 1 is waiting here"));
    CHECK(waited >= 0.5);
  } else if (rank == 1) {
    comm.send(make({2}, DType::f32, 64), 0, 12);
    sleep_seconds(2.0);
  }
  // Restored before the barrier, which waits for rank 1's sleep.
  comm.set_timeout(original);
  CHECK(comm.timeout() == original);
  comm.barrier();
}

TEST_CASE("errors: receiving the wrong kind of message consumes it") {
  Communicator& comm = world();
  const int rank = comm.rank();
  if (rank == 0) {
    comm.send(make({3, 4}, DType::f32, 1), 1, 5);
    comm.send(make({3000}, DType::f64, 2), 1, 5);  // above the inline threshold
    comm.send_obj(std::string("obj\0ect", 7), 1, 5);
    comm.send_obj(std::string(MpiCommunicator::kInlineBytes + 1, 'z'), 1, 5);
    comm.send(make({2}, DType::i32, 3), 1, 5);
    comm.send_obj("last", 1, 5);
  } else if (rank == 1) {
    CHECK_THAT(error_of([&] { comm.recv_obj(0, 5); }),
               Contains("recv_obj on rank 1 received send f32[3, 4] (tag 5, message #") &&
                   Contains("from rank 0, but it expects a message from send_obj"));
    CHECK_THAT(error_of([&] { comm.recv_obj(0, 5); }), Contains("recv_obj") && Contains("received send f64[3000]"));
    CHECK_THAT(error_of([&] { comm.recv(0, 5); }),
               Contains("recv on rank 1 received send_obj of 7 bytes") && Contains("expects a message from send"));
    CHECK_THAT(error_of([&] { comm.recv(0, 5); }), Contains("received send_obj of 8193 bytes"));
    // The stream is intact: the next two messages are received normally.
    check_made(comm.recv(0, 5), {2}, DType::i32, 3);
    CHECK(comm.recv_obj(0, 5) == "last");
  }
  comm.barrier();
}

// ============================================================================================
// 7. Stress
// ============================================================================================

TEST_CASE("isend: a ring of large messages, every rank sending before it receives") {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  comm.barrier();
  // 800 KB each: a blocking send would wait for its receiver, which is itself sending.
  const int next = (rank + 1) % size, previous = (rank + size - 1) % size;
  for (int round = 0; round < 3; ++round) {
    comm.isend(make({100000}, DType::f64, 70 + rank + round), next, 13);
    comm.isend(make({3}, DType::i32, 80 + rank + round), next, 13);  // after it on the same tag
    check_made(comm.recv(previous, 13), {100000}, DType::f64, 70 + previous + round);
    check_made(comm.recv(previous, 13), {3}, DType::i32, 80 + previous + round);
  }
  comm.wait_sends();
  CHECK(comm.pending_sends() == 0);
  comm.barrier();
}

TEST_CASE("isend: waiting for a send to a peer in a collective fails at once; the message arrives later") {
  Communicator& comm = world();
  const int rank = comm.rank();
  comm.barrier();
  if (rank == 0) {
    comm.isend(make({100000}, DType::f64, 66), 1, 14);  // returns at once
    CHECK_THAT(error_of([&] { comm.wait_sends(); }),
               Contains("wait_sends: send f64[100000] (tag 14, message #") && Contains("to rank 1") &&
                   Contains("has entered barrier"));
    CHECK(comm.pending_sends() == 0);
    comm.barrier();
  } else {
    comm.barrier();
    if (rank == 1) check_made(comm.recv(0, 14), {100000}, DType::f64, 66);
  }
  comm.barrier();
}

TEST_CASE("isend: a receiver waiting for the payload of a message isent before the sender entered a collective") {
  // The header is small and arrives at once; the 64 MB payload (MPI's rendezvous) flows while
  // the sender waits in the barrier. The receiver must wait for it, not take the sender's
  // collective for a deadlock (the pipeline's ranks isend activations and then exchange).
  Communicator& comm = world();
  const int rank = comm.rank();
  comm.barrier();
  for (int round = 0; round < 3; ++round) {
    if (rank == 1) {
      comm.isend(make({8000000}, DType::f64, 90 + round), 0, 15);
      comm.barrier();
      comm.wait_sends();
    } else if (rank == 0) {
      check_made(comm.recv(1, 15), {8000000}, DType::f64, 90 + round);
      comm.barrier();
    } else {
      comm.barrier();
    }
  }
  comm.barrier();
}

TEST_CASE("stress: 200 alternating messages of random sizes between ranks 0 and 1") {
  // A fresh communicator, so that every (sender, tag) stream's sequence numbers start at 0.
  CommunicatorPtr fresh = create_communicator("naive");
  Communicator& comm = *fresh;
  const int rank = comm.rank();
  std::mt19937 rng(20240607);  // the same draws on every rank
  std::map<std::pair<int, int>, std::int64_t> next_sequence;  // (sender, tag) -> sequence number
  MessageExpectation expect;  // a plain tensor send
  for (int i = 0; i < 200; ++i) {
    const int from = i % 2, to = 1 - from;
    const int tag = static_cast<int>(rng() % 3) * 1000;
    const DType dtype = kAllDTypes[rng() % 5];
    const std::uint32_t kind = rng() % 10;
    std::int64_t n = kind < 3 ? rng() % 4 : kind < 9 ? rng() % 3000 : 3000 + rng() % 60000;
    const Shape shape = n % 2 == 0 && n > 0 ? Shape{2, n / 2} : Shape{n};
    if (rank == from) comm.send(make(shape, dtype, i), to, tag);
    if (rank == to) {
      const ReceivedMessage m = comm.recv_message(from, tag, expect);
      INFO("message " << i << " on tag " << tag);
      CHECK(m.header.sequence == next_sequence[{from, tag}]);
      CHECK(m.header.tag == tag);
      check_made(m.tensor, shape, dtype, i);
    }
    ++next_sequence[{from, tag}];
  }
  comm.barrier();
}

// A rank that times out in a collective's header exchange has already told its peers it
// entered; a late peer then passes the header check and starts the data transfer. It must not
// wait forever: the first rank's next collective says it gave the previous one up, and the
// late peer fails at once. Its communicator is then unusable for collectives (an MPI
// collective request stays posted), which a later collective reports instead of mispairing.
// (8 MB: up to 4 MB, a tensor travels inside its headers or beside them, where the late ranks
// find it whole and have no transfer to wait for: the next case.)
TEST_CASE("errors: a collective given up by one rank fails on the late ranks instead of hanging") {
  Communicator& comm = world();
  const int rank = comm.rank();
  CommunicatorPtr scratch = comm.split(0, rank);  // this test breaks it on purpose
  scratch->set_timeout(0.5);
  if (rank == 0) {
    CHECK_THAT(error_of([&] { scratch->allreduce(full({1 << 21}, 1.0)); }), Contains("timed out"));
    // Long enough for the late ranks' headers of the allreduce to arrive: the barrier takes
    // them (no message stays behind for a later communicator) and fails, naming both.
    scratch->set_timeout(30);
    CHECK_THAT(error_of([&] { scratch->barrier(); }),
               Contains("different") && Contains("rank 1 is in allreduce f32[2097152]") && Contains("rank 0 is in barrier"));
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    const auto start = std::chrono::steady_clock::now();
    CHECK_THAT(error_of([&] { scratch->allreduce(full({1 << 21}, 1.0)); }),
               Contains("cannot complete") && Contains("rank 0 gave it up"));
    CHECK(seconds_since(start) < 0.45);  // the diagnosis, not this rank's own timeout
    CHECK_THAT(error_of([&] { scratch->barrier(); }), Contains("can run no more collectives"));
  }
  comm.barrier();
}

// The same where the tensors go beside the headers (1 MB, up to 3 ranks): left in the senders'
// memory for the peers to read, or in MPI messages under TANDEM_DIRECT_READ=0. The late ranks
// take rank 0's tensor (which rank 0 keeps for them after giving up) and complete the allreduce,
// correctly, once rank 0's next collective has found their headers, failed naming both, and let
// go of their data: the drained message, or word that their memory need not be read. Nobody
// hangs, and no rank computes a wrong number.
TEST_CASE("errors: a large collective given up by one rank, its tensor sent at once, still completes on the late ranks") {
  const char* eager = std::getenv("TANDEM_EAGER_DATA");
  if (eager && std::string(eager) == "0") return;  // MPI's allreduce: the case above
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  if (size > 3) return;  // MPI's allreduce beyond MpiCommunicator::kDirectRanks
  CommunicatorPtr scratch = comm.split(0, rank);  // this test leaves rank 0 out of step on purpose
  scratch->set_timeout(0.5);
  const std::int64_t n = std::int64_t(1) << 18;
  if (rank == 0) {
    CHECK_THAT(error_of([&] { scratch->allreduce(full({n}, 1.0)); }), Contains("timed out"));
    scratch->set_timeout(30);  // until the late ranks' headers come
    CHECK_THAT(error_of([&] { scratch->barrier(); }),
               Contains("different") && Contains("rank 1 is in allreduce f32[262144]") && Contains("rank 0 is in barrier"));
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    // Unless the wait sees rank 0's next header (which says it gave the allreduce up) before
    // rank 0 has let go of this rank's data: then the error says so (more likely with more ranks
    // than cores).
    Tensor y;
    const std::string error = error_of([&] { y = scratch->allreduce(full({n}, 1.0)); });
    if (error == "(no error)") check_values(y, {n}, DType::f32, std::vector<double>(n, double(size)));
    else CHECK_THAT(error, Contains("cannot complete") && Contains("rank 0 gave it up"));
  }
  comm.barrier();
}

// The same with a tensor that travels inside the headers (or beside them): rank 0 sent its data
// with its header, so
// the late ranks have everything the allreduce needs and complete it, with the right sum, while
// rank 0 has raised its timeout. Nobody hangs and no rank computes a wrong number; rank 0's
// next collective finds the late ranks' headers of the one it gave up and fails, naming both.
TEST_CASE("errors: a small collective given up by one rank still completes, correctly, on the late ranks") {
  const char* inline_setting = std::getenv("TANDEM_INLINE_COLLECTIVES");
  if (inline_setting && std::string(inline_setting) == "0") return;  // the case above, then
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  CommunicatorPtr scratch = comm.split(0, rank);  // this test leaves rank 0 out of step on purpose
  scratch->set_timeout(0.5);
  if (rank == 0) {
    CHECK_THAT(error_of([&] { scratch->allreduce(full({2}, 1.0)); }), Contains("timed out"));
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    check_values(scratch->allreduce(full({2}, 1.0)), {2}, DType::f32, {double(size), double(size)});
  }
  comm.barrier();
  if (rank == 0) {
    CHECK_THAT(error_of([&] { scratch->barrier(); }),
               Contains("different") && Contains("rank 1 is in allreduce f32[2]") && Contains("rank 0 is in barrier"));
  }
  comm.barrier();
}
