// The "hierarchical" communicator (comm/transport/mpi_hierarchical.cc, mpi_host_hierarchy.h) on 2-4 ranks of one
// machine, grouped into hosts by TANDEM_HOST_NAME: hosts of uneven sizes, and ranks of a host
// that are not consecutive. Its allreduce (blocking, started, differentiable, inside the
// data-parallel optimizer) against the flat one's; intra/inter ranks; errors on every rank.
// The same binary runs across simulated hosts (scripts/sim_hosts.sh) in tests/comm/hosts.
#include <mpi.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdlib>

#include "autograd/functions.h"
#include "comm/functions.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "comm/transport/mpi_env.h"
#include "comm/transport/communicator.h"
#include "layers/links/linear.h"
#include "layers/optimizers/sgd.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;
using test_util::require_values;
using test_util::uniform;

namespace {

// Under scripts/sim_hosts.sh (SIM_HOSTS_PREFIX set) the hosts are real: SIM_HOSTS_PER_HOST
// consecutive ranks each, as mpiexec places them. Elsewhere TANDEM_HOST_NAME groups the ranks:
// "even" and "odd" ranks (ranks 0 and 2 on one host, 1 and 3 on another; with 3 ranks the
// hosts hold 2 and 1), so that a host's ranks are not consecutive.
bool real_hosts() { return std::getenv("SIM_HOSTS_PREFIX") != nullptr; }
int per_host() { return real_hosts() ? std::atoi(std::getenv("SIM_HOSTS_PER_HOST")) : 0; }
int expected_inter_rank(int r) { return real_hosts() ? r / per_host() : r % 2; }
int expected_intra_rank(int r) { return real_hosts() ? r % per_host() : r / 2; }
int expected_hosts(int n) { return real_hosts() ? (n + per_host() - 1) / per_host() : (n == 1 ? 1 : 2); }
int expected_intra_size(int r, int n) {
  if (real_hosts()) return std::min(per_host(), n - expected_inter_rank(r) * per_host());
  return (n - r % 2 + 1) / 2;
}

struct Pair {
  CommunicatorPtr flat, hierarchical;
};

Pair& comms() {
  static Pair pair = [] {
    comm_detail::ensure_mpi();
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (!real_hosts()) setenv("TANDEM_HOST_NAME", rank % 2 == 0 ? "even" : "odd", 1);
    return Pair{create_communicator("naive"), create_communicator("hierarchical")};
  }();
  return pair;
}

}  // namespace

TEST_CASE("hierarchical: the hosts come from TANDEM_HOST_NAME, and its name says what it is") {
  Communicator& h = *comms().hierarchical;
  const int n = h.size(), r = h.rank();
  REQUIRE(h.name() == "hierarchical");
  REQUIRE(comms().flat->name() == "naive");
  REQUIRE(h.inter_size() == expected_hosts(n));
  REQUIRE(h.inter_rank() == expected_inter_rank(r));
  REQUIRE(h.intra_rank() == expected_intra_rank(r));
  REQUIRE(h.intra_size() == expected_intra_size(r, n));
  // A split keeps the hierarchy: the ranks 1..n-1 (rank 0's host loses its first rank).
  CommunicatorPtr part = h.split(r == 0 ? 0 : 1, r);
  REQUIRE(part->name() == "hierarchical");
  if (r > 0 && n > 2) {
    Tensor sum = part->allreduce(full({5}, double(r), DType::f64));
    require_values(sum, std::vector<double>(5, n * (n - 1) / 2.0), 0, 0);
  }
}

TEST_CASE("hierarchical allreduce equals the flat one: sum and mean, every dtype, empty and large") {
  Pair& p = comms();
  const int r = p.flat->rank();
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    INFO(dtype);
    const Tensor x = uniform({7, 3}, 10 + r, -8, 8, DType::f64).to(DType::i64).to(dtype);
    const Tensor want = p.flat->allreduce(x);
    const Tensor got = p.hierarchical->allreduce(x);
    REQUIRE(got.dtype() == dtype);
    REQUIRE(got.shape() == Shape{7, 3});
    // Small integers: every order of summation gives the same value.
    require_values(got, want.to_vector<double>(), 0, 0);
    if (is_floating(dtype)) {
      require_values(p.hierarchical->allreduce(x, AllreduceOp::mean),
                     p.flat->allreduce(x, AllreduceOp::mean).to_vector<double>(), 0, 0);
    }
  }
  // Any values: equal to rounding (the sums run in a different order).
  // 9.6 MB: three pieces of the pipeline (mpi_host_hierarchy.cc), the last one short.
  const Tensor big = uniform({1200000}, 77 + r, -1, 1, DType::f64);
  require_values(p.hierarchical->allreduce(big), p.flat->allreduce(big).to_vector<double>(), 1e-12, 1e-12);
  const Tensor empty({0, 4}, DType::f32);
  REQUIRE(p.hierarchical->allreduce(empty).shape() == Shape{0, 4});
}

TEST_CASE("hierarchical: started allreduce and the checked one") {
  Pair& p = comms();
  const int r = p.flat->rank();
  const Tensor x = uniform({1000}, 5 + r, -1, 1, DType::f64);
  std::unique_ptr<PendingCollective> pending = p.hierarchical->start_allreduce_sum(x, 42, "bucket 0");
  const Tensor started = pending->wait();
  require_values(started, p.flat->allreduce(x).to_vector<double>(), 1e-12, 1e-12);
  require_values(p.hierarchical->allreduce_checked(x, AllreduceOp::mean, 9, "gradients"),
                p.flat->allreduce(x, AllreduceOp::mean).to_vector<double>(), 1e-12, 1e-12);
}

TEST_CASE("hierarchical: started allreduces overlap, in stages, in the order started") {
  // Several started at once (as the data-parallel buckets are), of several pieces each, moved on
  // by test() on some ranks only, then a blocking allreduce while they are in flight: every
  // rank must still post its stages in the same order on every communicator.
  Pair& p = comms();
  const int r = p.flat->rank();
  const std::vector<std::int64_t> sizes = {1200000, 10, 700000, 0, 3};
  std::vector<Tensor> xs;
  std::vector<std::unique_ptr<PendingCollective>> pending;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    xs.push_back(uniform({sizes[i]}, 300 + 10 * i + r, -1, 1, DType::f64));
    pending.push_back(p.hierarchical->start_allreduce_sum(xs[i], 1000 + i, "bucket"));
    if (r % 2 == 1) pending.front()->test();  // only some ranks move the first one on now
  }
  for (int round = 0; round < 20 && r == 0; ++round)
    for (auto& one : pending) one->test();
  const Tensor between = p.hierarchical->allreduce(full({4}, 1.0, DType::f64));
  require_values(between, std::vector<double>(4, p.flat->size()), 0, 0);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    INFO("bucket " << i);
    const Tensor got = pending[i]->wait();
    require_values(got, p.flat->allreduce(xs[i]).to_vector<double>(), 1e-12, 1e-12);
  }
}

TEST_CASE("hierarchical: differentiable allreduce, values and gradients as the flat one's") {
  Pair& p = comms();
  const int r = p.flat->rank();
  auto run = [&](Communicator& comm) {
    Variable x(uniform({4, 3}, 30 + r, -1, 1, DType::f64), true);
    Variable y = F::allreduce(comm, F::tanh(x));
    F::sum(y * Variable(uniform({4, 3}, 60 + r, 0.5, 2, DType::f64))).backward();
    return std::make_pair(y.data(), x.grad());
  };
  auto [flat_y, flat_grad] = run(*p.flat);
  auto [y, grad] = run(*p.hierarchical);
  require_values(y, flat_y.to_vector<double>(), 1e-13, 1e-13);
  require_values(grad, flat_grad.to_vector<double>(), 1e-13, 1e-13);
}

TEST_CASE("hierarchical: the data-parallel optimizer ends where the flat one does") {
  Pair& p = comms();
  const int r = p.flat->rank();
  auto train = [&](CommunicatorPtr comm) {
    manual_seed(3);
    LinearOptions options;
    options.dtype = DType::f64;
    auto model = std::make_shared<Linear>(6, 4, options);
    auto optimizer = create_multi_node_optimizer(std::make_shared<SGD>(0.1), comm);
    optimizer->setup(model);
    for (int step = 0; step < 3; ++step) {
      model->cleargrads();
      Variable x(uniform({5, 6}, 100 * step + r, -1, 1, DType::f64));
      F::sum(F::tanh((*model)(x))).backward();
      optimizer->update();
    }
    return model->W().data();
  };
  const Tensor flat = train(p.flat);
  const Tensor hierarchical = train(p.hierarchical);
  require_values(hierarchical, flat.to_vector<double>(), 1e-13, 1e-13);
}

TEST_CASE("hierarchical: ranks that disagree fail on every rank, before any data moves") {
  Communicator& h = *comms().hierarchical;
  const int r = h.rank();
  if (h.size() < 2) return;
  // The last rank (alone on its host with 3 ranks) passes another shape.
  const bool odd_one = r == h.size() - 1;
  const Tensor x = full({odd_one ? 4 : 3}, 1.0);
  REQUIRE_THROWS_WITH(h.allreduce(x), Contains("disagree") && Contains("[4]") && Contains("[3]"));
  // Still usable afterwards: the failure happened before the data phase.
  require_values(h.allreduce(full({2}, 1.0, DType::f64)), std::vector<double>(2, h.size()), 0, 0);
}
