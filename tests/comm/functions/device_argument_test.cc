// Where a receive or collective puts its results, given one way everywhere: the last argument,
// `std::optional<Device> device`, of recv, bcast, gather and scatter, both the differentiable
// functions and the plain Communicator calls. Run on the stand-in CUDA device in host memory
// (gpu_fake_device.h; builds without CUDA), with "naive", which otherwise puts CPU data on the
// CPU: every result must land on the requested device with the sent values, and every gradient
// on the device of its input.
#include <catch2/catch.hpp>

#include "autograd/functions.h"
#include "comm/transport/communicator.h"
#include "comm/functions.h"
#include "tests/comm/transport/gpu_fake_device.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using test_util::require_values;
using test_util::uniform;
using test_util::values;

namespace {

const bool kStandInInstalled = fake_device::install();

Communicator& world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return *comm;
}

const Device kGpu = Device::cuda(0);  // the stand-in: host memory behind a CUDA device
const Device kCpu = Device::cpu();

Tensor piece(int rank) { return uniform({2, rank + 1}, 10 + rank); }

void require_on(const Tensor& t, const Device& device, const Tensor& want) {
  INFO(t.description() << " on " << t.device().str() << ", expected on " << device.str());
  REQUIRE(t.device() == device);
  require_values(t, values(want));
}

}  // namespace

TEST_CASE("Communicator::recv, bcast, gather, scatter: the last argument places the result") {
  REQUIRE(kStandInInstalled);
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  const Tensor x = uniform({3}, 1);
  for (const std::optional<Device>& device : {std::optional<Device>(), std::optional<Device>(kGpu)}) {
    const Device want = device ? *device : kCpu;  // naive: CPU data lands on the CPU
    if (r == 0) comm.send(x, 1, 3);
    if (r == 1) require_on(comm.recv(0, 3, device), want, x);

    require_on(comm.bcast(r == 0 ? x : Tensor(), 0, device), want, x);

    std::vector<Tensor> pieces;
    if (r == 0)
      for (int q = 0; q < n; ++q) pieces.push_back(piece(q));
    require_on(comm.scatter(pieces, 0, device), want, piece(r));

    std::vector<Tensor> gathered = comm.gather(piece(r), 0, device);
    REQUIRE(gathered.size() == (r == 0 ? static_cast<std::size_t>(n) : 0u));
    for (int q = 0; q < static_cast<int>(gathered.size()); ++q) require_on(gathered[q], want, piece(q));
  }
  // The two-argument calls are the communicator's own, as before.
  require_on(comm.bcast(r == 0 ? x : Tensor(), 0), kCpu, x);
}

TEST_CASE("F::recv: the result on the requested device, the gradient on the sender's") {
  Communicator& comm = world();
  if (comm.rank() == 0) {
    Variable x(uniform({2, 3}, 2), true);
    F::send(x, comm, 1).backward();
    REQUIRE(x.grad().device() == kCpu);
    require_values(x.grad(), values(uniform({2, 3}, 3, 0.5, 2.0)), 1e-6);
  } else if (comm.rank() == 1) {
    Variable y = F::recv(comm, 0, Variable(), 0, kGpu);
    require_on(y.data(), kGpu, uniform({2, 3}, 2));
    F::sum(F::mul(y, Variable(uniform({2, 3}, 3, 0.5, 2.0).to(kGpu)))).backward();
  }
}

TEST_CASE("F::bcast, F::scatter, F::gather take the device the same way") {
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  const bool root = r == 0;

  // bcast: away from the root there is no input; with the device argument every rank's result is there.
  Variable x(uniform({3}, 4), true);
  Variable y = F::bcast(comm, root ? x : Variable(), 0, kGpu);
  require_on(y.data(), kGpu, uniform({3}, 4));
  F::sum(F::mul(y, static_cast<double>(r + 1))).backward();
  if (root) {
    REQUIRE(x.grad().device() == kCpu);
    require_values(x.grad(), std::vector<double>(3, n * (n + 1) / 2.0), 1e-6);
  }

  // scatter.
  Variables pieces;
  if (root)
    for (int q = 0; q < n; ++q) pieces.emplace_back(piece(q), true);
  Variable mine = F::scatter(comm, pieces, 0, kGpu);
  require_on(mine.data(), kGpu, piece(r));
  F::sum(mine).backward();
  for (const Variable& p : pieces) {
    REQUIRE(p.grad().device() == kCpu);
    require_values(p.grad(), std::vector<double>(static_cast<std::size_t>(p.numel()), 1.0));
  }

  // gather: the root's variables on the device; the delegate elsewhere stays on x's.
  Variable g(piece(r), true);
  Variables gathered = F::gather(comm, g, 0, kGpu);
  if (root) {
    REQUIRE(static_cast<int>(gathered.size()) == n);
    Variable total = F::sum(gathered[0]);
    for (int q = 0; q < n; ++q) require_on(gathered[q].data(), kGpu, piece(q));
    for (int q = 1; q < n; ++q) total = F::add(total, F::mul(F::sum(gathered[q]), q + 1.0));
    total.backward();
  } else {
    REQUIRE(gathered.size() == 1);
    REQUIRE(gathered[0].device() == kCpu);
    gathered[0].backward();
  }
  REQUIRE(g.grad().device() == kCpu);
  require_values(g.grad(), std::vector<double>(static_cast<std::size_t>(g.numel()), r + 1.0));
}

TEST_CASE("without the device argument, a rank with a delegate gets its result on the delegate's device") {
  Communicator& comm = world();
  const int r = comm.rank();
  Variables phi = F::gather(comm, Variable(piece(r).to(kGpu), true), 0);
  Variable y = F::bcast(comm, r == 0 ? F::sum(phi[0]) : phi[0], 0);
  REQUIRE(y.device() == kGpu);
  y.backward();
}
