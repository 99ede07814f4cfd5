// A collective started on one communicator moves on while its rank blocks on another.
//
// The started collectives' data phases are posted once every peer's header has arrived; a rank
// that started one before its peers' headers came and then blocked in a collective of another
// communicator must still post it, or a peer waiting for it can never reach that collective
// (the data-parallel optimizer at zero = 3: buckets' reduce-scatters on one communicator,
// parameter gathers on another). Rank 0 starts late on purpose, so that the others have started
// without its header. Before the fix this hung (a timeout after 20 s); now the values are
// checked against blocking collectives (allreduce, reduce-scatter, allgather).
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "comm/transport/communicator.h"
#include "tests/core/test_util.h"

using namespace tandem;
using test_util::require_values;
using test_util::uniform;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

// Two communicators over the same ranks, as the data-parallel optimizer makes them.
struct Two {
  CommunicatorPtr a, b;
};
Two two() {
  Two t{world()->split(0, world()->rank()), world()->split(0, world()->rank())};
  t.a->set_timeout(20);
  t.b->set_timeout(20);
  return t;
}

void late_on_rank_0(int rank) {
  if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

}  // namespace

TEST_CASE("started collectives: an allreduce started on one communicator completes while the rank blocks on another") {
  Two t = two();
  const int r = t.a->rank();
  const Tensor x = uniform({1000}, 10 + r, -1, 1, DType::f64);
  const Tensor y = uniform({7}, 20 + r, -1, 1, DType::f64);
  late_on_rank_0(r);
  std::unique_ptr<PendingCollective> pending = t.a->start_allreduce_sum(x, 1, "bucket");
  Tensor sum, between;
  if (r == 0) {
    // Waits for the others' data phase, posted while they wait in b's allreduce.
    sum = pending->wait();
    between = t.b->allreduce(y);
  } else {
    between = t.b->allreduce(y);
    sum = pending->wait();
  }
  require_values(sum, world()->allreduce(x).to_vector<double>(), 1e-12, 1e-12);
  require_values(between, world()->allreduce(y).to_vector<double>(), 1e-12, 1e-12);
}

TEST_CASE("started collectives: reduce-scatters in flight while the ranks gather on another communicator") {
  // zero = 3's pattern: two buckets' reduce-scatters started, gathers of parameters on the other
  // communicator in between, the first bucket awaited by rank 0 before its gather.
  Two t = two();
  const int r = t.a->rank(), n = t.a->size();
  std::vector<Tensor> buckets;
  for (int k = 0; k < 2; ++k) buckets.push_back(uniform({6 * n}, 30 + 10 * k + r, -1, 1, DType::f64));
  std::vector<std::unique_ptr<PendingCollective>> pending;
  pending.push_back(t.a->start_reduce_scatter_sum(buckets[0], 7, "bucket 0"));
  late_on_rank_0(r);
  pending.push_back(t.a->start_reduce_scatter_sum(buckets[1], 8, "bucket 1"));
  const Tensor mine = full({3}, double(r), DType::f64);
  std::vector<Tensor> gathered;
  std::vector<Tensor> stripes(2);
  if (r == 0) stripes[1] = pending[1]->wait();
  gathered = t.b->allgather(mine);
  for (int k = 0; k < 2; ++k)
    if (!stripes[k].defined()) stripes[k] = pending[k]->wait();
  for (int k = 0; k < 2; ++k) {
    INFO("bucket " << k);
    const Tensor whole = world()->allreduce(buckets[k]);
    require_values(stripes[k], test_util::values(whole.slice_rows(6 * r, 6 * r + 6)), 1e-12, 1e-12);
  }
  REQUIRE(gathered.size() == static_cast<std::size_t>(n));
  for (int s = 0; s < n; ++s) require_values(gathered[s], std::vector<double>(3, double(s)), 0, 0);
}

TEST_CASE("started collectives: start_allgather gives every rank's piece in rank order") {
  // Started before the others' headers arrive (rank 0 late), awaited after a blocking allreduce
  // on the other communicator: the values equal the blocking allgather's.
  Two t = two();
  const int r = t.a->rank(), n = t.a->size();
  const Tensor mine = uniform({5}, 40 + r, -1, 1, DType::f64);
  late_on_rank_0(r);
  std::unique_ptr<PendingCollective> pending = t.a->start_allgather(mine, 3, "gather");
  const Tensor between = t.b->allreduce(full({2}, 1.0, DType::f64));
  require_values(between, std::vector<double>(2, double(n)), 0, 0);
  const Tensor got = pending->wait();
  std::vector<double> want;
  for (const Tensor& piece : world()->allgather(mine)) {
    const std::vector<double> v = test_util::values(piece);
    want.insert(want.end(), v.begin(), v.end());
  }
  require_values(got, want, 0, 0);
}
