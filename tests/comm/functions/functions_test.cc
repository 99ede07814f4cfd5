// The differentiable communication functions on several ranks: forward values, gradients
// against the same mathematics on one process, the distributed gradient check, and the
// behaviours where the reference (ChainerMN) hangs or swaps gradients.
#include <catch2/catch.hpp>

#include <thread>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "comm/transport/communicator.h"
#include "comm/functions.h"
#include "comm/functions/gradcheck.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;
using test_util::require_values;
using test_util::uniform;
using test_util::values;

namespace {

Communicator& world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return *comm;
}

Variable param(const Shape& shape, std::uint64_t seed, DType dtype = DType::f32) {
  return Variable(uniform(shape, seed, -1, 1, dtype), true);
}

// sum(y * c): the weights make every element's gradient distinct, so a swap shows.
Variable weighted_sum(const Variable& y, std::uint64_t seed) {
  return F::sum(F::mul(y, Variable(uniform(y.shape(), seed, 0.5, 2.0, y.dtype()))));
}

}  // namespace

// A pipeline of sigmoid(W_r h) stages, stage r on rank r, the last stage sending its output
// back to rank 0, which computes the loss. Every rank's W gradient (and rank 0's input
// gradient) must equal what one process computes for the whole chain.
TEST_CASE("pipeline of sigmoid(W x) across all ranks matches one process") {
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  const std::int64_t width = 5;
  auto W = [&](int stage) { return uniform({width, width}, 100 + stage, -1, 1, DType::f64); };
  const Tensor x0 = uniform({3, width}, 7, -1, 1, DType::f64);

  // The reference on one process.
  Variable ref_x(x0, true);
  std::vector<Variable> ref_W;
  Variable h = ref_x;
  for (int stage = 0; stage < n; ++stage) {
    ref_W.emplace_back(W(stage), true);
    h = F::sigmoid(F::matmul(h, ref_W.back()));
  }
  Variable ref_loss = weighted_sum(h, 9);
  ref_loss.backward();

  Variable Wr(W(r), true);
  if (r == 0) {
    Variable x(x0, true);
    Variable phi = F::send(F::sigmoid(F::matmul(x, Wr)), comm, 1);
    Variable y = F::recv(comm, n - 1, phi);
    Variable loss = weighted_sum(y, 9);
    loss.backward();
    REQUIRE(loss.data().item() == Approx(ref_loss.data().item()).epsilon(1e-12));
    require_values(x.grad(), values(ref_x.grad()), 1e-10);
  } else {
    Variable in = F::recv(comm, r - 1);
    Variable phi = F::send(F::sigmoid(F::matmul(in, Wr)), comm, (r + 1) % n);
    phi.backward();  // a rank with no loss of its own takes part through its delegate
  }
  require_values(Wr.grad(), values(ref_W[r].grad()), 1e-10);
}

TEST_CASE("a round trip: the peer's send backward runs from its delegate") {
  Communicator& comm = world();
  const Tensor x0 = uniform({2, 3}, 1);
  if (comm.rank() == 0) {
    Variable x(x0, true);
    Variable phi = F::send(x, comm, 1);
    Variable z = F::recv(comm, 1, phi);  // 3 x, computed on rank 1
    weighted_sum(z, 5).backward();
    std::vector<double> want = values(x0);
    for (double& v : want) v *= 3;
    require_values(z.data(), want, 1e-6);
    std::vector<double> grad = values(uniform({2, 3}, 5, 0.5, 2.0));
    for (double& v : grad) v *= 3;
    require_values(x.grad(), grad, 1e-6);
  } else if (comm.rank() == 1) {
    Variable y = F::recv(comm, 0);
    require_values(y.data(), values(x0));
    F::send(F::mul(y, 3.0), comm, 0).backward();
  }
}

// The reference leaves the second send's backward out (and the peer hangs), or hands the
// gradients to the wrong sends. Here the tape order and the per-peer sequence numbers pair
// each gradient with its send.
TEST_CASE("two sends joined by pseudo_connect, received by two recv calls, get their own gradients") {
  Communicator& comm = world();
  const Tensor a = uniform({4}, 11), b = uniform({4}, 12);
  if (comm.rank() == 0) {
    Variable x1(a, true), x2(b, true);
    Variable phi1 = F::send(x1, comm, 1);
    Variable phi2 = F::send(x2, comm, 1);
    F::pseudo_connect(phi1, phi2).backward();
    require_values(x1.grad(), values(uniform({4}, 21, 0.5, 2.0)), 1e-6);
    require_values(x2.grad(), values(uniform({4}, 22, 0.5, 2.0)), 1e-6);
  } else if (comm.rank() == 1) {
    Variable y1 = F::recv(comm, 0);
    Variable y2 = F::recv(comm, 0);
    require_values(y1.data(), values(a));
    require_values(y2.data(), values(b));
    F::add(weighted_sum(y1, 21), weighted_sum(y2, 22)).backward();
  }
}

TEST_CASE("pseudo_connect passes values and gradients through and runs the send behind the delegate") {
  Communicator& comm = world();
  if (comm.rank() == 0) {
    Variable x = param({3}, 51), h = param({2}, 52);
    Variable y = F::pseudo_connect(F::send(x, comm, 1), h);
    require_values(y.data(), values(h.data()));
    weighted_sum(y, 53).backward();
    require_values(h.grad(), values(uniform({2}, 53, 0.5, 2.0)), 1e-6);
    require_values(x.grad(), values(uniform({3}, 54, 0.5, 2.0)), 1e-6);
  } else if (comm.rank() == 1) {
    weighted_sum(F::recv(comm, 0), 54).backward();
  }
}

TEST_CASE("send and recv exchange zeros for outputs that no gradient reached") {
  Communicator& comm = world();
  if (comm.rank() == 0) {
    Variable xa = param({2}, 31), xb = param({3}, 32);
    F::send(Variables{xa, xb}, comm, 1).backward();
    require_values(xa.grad(), {0, 0});
    require_values(xb.grad(), values(uniform({3}, 33, 0.5, 2.0)), 1e-6);
  } else if (comm.rank() == 1) {
    Variables ys = F::recv_list(comm, 0);
    REQUIRE(ys.size() == 2);
    weighted_sum(ys[1], 33).backward();  // ys[0] gets no gradient: zeros go back
  }
}

TEST_CASE("every dtype and zero-size tensors travel through send and recv; only floats carry gradients") {
  Communicator& comm = world();
  const Tensor ints = test_util::iota({2, 3}, DType::i32), longs = test_util::iota({4}, DType::i64);
  const Tensor mask = from_vector<bool>({true, false, true}, {3});
  const Tensor doubles = uniform({2, 2}, 61, -1, 1, DType::f64);
  const Tensor empty({0, 3}, DType::f32);
  if (comm.rank() == 0) {
    Variable d(doubles, true), e(empty, true);
    F::send(Variables{Variable(ints), d, Variable(mask), e, Variable(longs)}, comm, 1).backward();
    require_values(d.grad(), values(uniform({2, 2}, 62, 0.5, 2.0, DType::f64)), 1e-12);
    REQUIRE(e.grad().shape() == Shape{0, 3});
  } else if (comm.rank() == 1) {
    Variables ys = F::recv_list(comm, 0);
    REQUIRE(ys.size() == 5);
    REQUIRE(ys[0].dtype() == DType::i32);
    require_values(ys[0].data(), values(ints));
    REQUIRE(ys[1].dtype() == DType::f64);
    require_values(ys[1].data(), values(doubles));
    REQUIRE(ys[2].dtype() == DType::boolean);
    require_values(ys[2].data(), {1, 0, 1});
    REQUIRE(ys[3].shape() == Shape{0, 3});
    REQUIRE(ys[4].dtype() == DType::i64);
    require_values(ys[4].data(), values(longs));
    REQUIRE_FALSE(ys[0].requires_grad());
    backward({weighted_sum(ys[1], 62), F::sum(ys[3])}, {Tensor(), Tensor()});
  }
}

TEST_CASE("send to one's own rank is an error, not a deadlock") {
  Communicator& comm = world();
  REQUIRE_THROWS_WITH(F::send(param({2}, 1), comm, comm.rank()), Contains("itself"));
  REQUIRE_THROWS_WITH(F::send(param({2}, 1), comm, comm.size()), Contains("does not exist"));
}

TEST_CASE("recv of a list asks for recv_list") {
  Communicator& comm = world();
  NoGradGuard no_grad;  // neither side owes the other a gradient
  if (comm.rank() == 0) {
    F::send(Variables{param({1}, 1), param({1}, 2)}, comm, 1);
  } else if (comm.rank() == 1) {
    REQUIRE_THROWS_WITH(F::recv(comm, 0), Contains("recv_list"));
  }
}

TEST_CASE("a rank recording the graph while its peer does not is an error") {
  Communicator& comm = world();
  if (comm.rank() == 0) {
    NoGradGuard no_grad;
    F::send(param({2}, 1), comm, 1);
  } else if (comm.rank() == 1) {
    REQUIRE_THROWS_WITH(F::recv(comm, 0), Contains("NoGradGuard") && Contains("rank 0"));
  }
}

TEST_CASE("a forward message where a gradient is due is an error naming both operations") {
  Communicator& comm = world();
  if (comm.rank() == 0) {
    Variable phi = F::send(param({3, 4}, 1), comm, 1);
    REQUIRE_THROWS_WITH(phi.backward(), Contains("send backward") && Contains("f32[3, 4]") &&
                                            Contains("f32[5]") && Contains("rank 1"));
  } else if (comm.rank() == 1) {
    Variable y = F::recv(comm, 0);
    F::send(Variable(zeros({5})), comm, 0);  // instead of running backward: a program bug
  }
}

// The reference's bcast returns nothing away from the root, which breaks this chain.
TEST_CASE("gather then bcast: non-root ranks backprop through the delegate") {
  Communicator& comm = world();
  const int n = comm.size();
  for (int root : {0, n - 1}) {
    const Tensor x0 = uniform({3}, 70 + comm.rank());
    Variable x(x0, true);
    Variable y;
    if (comm.rank() == root) {
      Variables ys = F::gather(comm, x, root);
      REQUIRE(static_cast<int>(ys.size()) == n);
      Variable z = F::mul(ys[0], 1.0);
      for (int q = 1; q < n; ++q) z = F::add(z, F::mul(ys[q], q + 1.0));
      y = F::bcast(comm, z, root);
    } else {
      Variables phi = F::gather(comm, x, root);
      REQUIRE(phi.size() == 1);
      REQUIRE(phi[0].numel() == 0);
      y = F::bcast(comm, phi[0], root);
    }
    std::vector<double> want(3, 0.0), weights(3, 0.0);
    for (int q = 0; q < n; ++q) {
      const std::vector<double> xq = values(uniform({3}, 70 + q)), cq = values(uniform({3}, 80 + q, 0.5, 2.0));
      for (int i = 0; i < 3; ++i) {
        want[i] += (q + 1) * xq[i];
        weights[i] += cq[i];
      }
    }
    require_values(y.data(), want, 1e-5);
    weighted_sum(y, 80 + comm.rank()).backward();
    for (double& w : weights) w *= comm.rank() + 1;
    require_values(x.grad(), weights, 1e-5);
  }
}

// --- the distributed gradient check of every collective ------------------------------------

namespace {

void require_gradcheck(Communicator& comm, const GradcheckFunction& fn, const std::vector<Tensor>& inputs) {
  GradcheckOptions options;
  options.atol = 1e-7;
  options.rtol = 1e-6;
  options.seed = 3;
  const GradcheckResult result = distributed_gradcheck(comm, fn, inputs, options);
  INFO(result.report);
  REQUIRE(result.ok);
}

Tensor f64(const Shape& shape, std::uint64_t seed) { return uniform(shape, seed, -1, 1, DType::f64); }

}  // namespace

TEST_CASE("distributed gradcheck: send and recv in a ring") {
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  require_gradcheck(
      comm,
      [&](const Variables& xs) -> Variables {
        // Each rank sends tanh(x) to the next; the received value is multiplied in.
        Variable phi = F::send(F::tanh(xs[0]), comm, (r + 1) % n);
        Variable got = F::recv(comm, (r + n - 1) % n, phi);
        return {F::mul(got, xs[1])};
      },
      {f64({2, 3}, 90 + r), f64({2, 3}, 95 + r)});
}

TEST_CASE("distributed gradcheck: bcast from every root") {
  Communicator& comm = world();
  for (int root = 0; root < comm.size(); ++root) {
    const bool is_root = comm.rank() == root;
    require_gradcheck(
        comm,
        [&](const Variables& xs) -> Variables {
          return {F::mul(F::bcast(comm, is_root ? xs[0] : Variable(), root), comm.rank() + 1.0)};
        },
        is_root ? std::vector<Tensor>{f64({2, 2}, 100)} : std::vector<Tensor>{});
  }
}

TEST_CASE("distributed gradcheck: gather with shapes that differ per rank") {
  Communicator& comm = world();
  const int r = comm.rank();
  for (int root : {0, comm.size() - 1}) {
    require_gradcheck(
        comm, [&](const Variables& xs) { return F::gather(comm, F::tanh(xs[0]), root); },
        {f64({r == 1 ? 0 : r + 1, 2}, 110 + r)});
  }
}

TEST_CASE("distributed gradcheck: scatter, with a zero-size piece") {
  Communicator& comm = world();
  const int n = comm.size();
  for (int root : {0, n - 1}) {
    std::vector<Tensor> pieces;
    if (comm.rank() == root)
      for (int q = 0; q < n; ++q) pieces.push_back(f64({q == 1 ? 0 : q + 2}, 120 + q));
    require_gradcheck(
        comm, [&](const Variables& xs) -> Variables { return {F::tanh(F::scatter(comm, xs, root))}; }, pieces);
  }
}

TEST_CASE("distributed gradcheck: allgather with shapes that differ per rank") {
  Communicator& comm = world();
  const int r = comm.rank();
  require_gradcheck(
      comm, [&](const Variables& xs) { return F::allgather(comm, F::tanh(xs[0])); },
      {f64({r == 1 ? 0 : r + 1}, 130 + r)});
}

TEST_CASE("distributed gradcheck: alltoall with pieces of different sizes") {
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  std::vector<Tensor> pieces;
  for (int j = 0; j < n; ++j) pieces.push_back(f64({(r + j) % 3}, 140 + 10 * r + j));
  require_gradcheck(
      comm,
      [&](const Variables& xs) {
        Variables ys = F::alltoall(comm, xs);
        for (Variable& y : ys) y = F::tanh(y);
        return ys;
      },
      pieces);
}

TEST_CASE("distributed gradcheck: allreduce, sum and mean") {
  Communicator& comm = world();
  const int r = comm.rank();
  for (AllreduceOp op : {AllreduceOp::sum, AllreduceOp::mean}) {
    require_gradcheck(
        comm, [&](const Variables& xs) -> Variables { return {F::tanh(F::allreduce(comm, xs[0], op))}; },
        {f64({2, 3}, 150 + r)});
  }
}

TEST_CASE("collective forward values") {
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  Variable y = F::allreduce(comm, Variable(full({2}, r + 1.0)));
  require_values(y.data(), {n * (n + 1) / 2.0, n * (n + 1) / 2.0});
  Variable m = F::allreduce(comm, Variable(full({1}, r + 1.0)), AllreduceOp::mean);
  require_values(m.data(), {(n + 1) / 2.0}, 1e-6);
  Variables all = F::allgather(comm, Variable(full({r + 1}, r, DType::i64)));
  REQUIRE(static_cast<int>(all.size()) == n);
  for (int q = 0; q < n; ++q) require_values(all[q].data(), std::vector<double>(q + 1, q));
  Variables pieces;
  for (int j = 0; j < n; ++j) pieces.emplace_back(full({1}, 10 * r + j, DType::i32));
  Variables got = F::alltoall(comm, pieces);
  for (int q = 0; q < n; ++q) require_values(got[q].data(), {10.0 * q + r});
  Variable s = F::scatter(comm, r == 0 ? pieces : Variables{}, 0);
  require_values(s.data(), {static_cast<double>(r)});
}

// The device argument that recv, bcast, gather and scatter share (the last one), on the CPU;
// tests/comm/functions/device_argument_test.cc places results on a stand-in GPU.
TEST_CASE("recv, bcast, gather and scatter take the device as their last argument") {
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  const Device cpu = Device::cpu();
  Variable x(full({2}, r + 1.0), true);
  Variable phi = F::send(x, comm, (r + 1) % n);
  Variable got = F::recv(comm, (r + n - 1) % n, phi, 0, cpu);
  REQUIRE(got.device() == cpu);
  require_values(got.data(), {(r + n - 1) % n + 1.0, (r + n - 1) % n + 1.0});
  Variable b = F::bcast(comm, r == 0 ? x : Variable(), 0, cpu);
  Variable s = F::scatter(comm, r == 0 ? Variables(n, x) : Variables{}, 0, cpu);
  Variables g = F::gather(comm, x, 0, cpu);
  Variable total = F::add(F::add(F::sum(got), F::sum(b)), F::sum(s));
  if (r == 0) {
    for (const Variable& gi : g) total = F::add(total, F::sum(gi));
  } else {
    total = F::pseudo_connect(g[0], total);  // gather's delegate
  }
  total.backward();
  // d/dx: b and s carry rank 0's x to every rank, g every rank's x to rank 0; got's x is the
  // next rank's.
  require_values(x.grad(), std::vector<double>(2, r == 0 ? 2.0 * n + 2 : 2.0));
  require_values(comm.bcast(r == 0 ? x.data() : Tensor(), 0, cpu), {1, 1});
  Tensor mine = comm.scatter(r == 0 ? std::vector<Tensor>(n, x.data()) : std::vector<Tensor>{}, 0, cpu);
  require_values(mine, {1, 1});
  REQUIRE(comm.gather(x.data(), 0, cpu).size() == (r == 0 ? static_cast<std::size_t>(n) : 0u));
  if (r == 0) comm.send(x.data(), 1, 9);
  if (r == 1) require_values(comm.recv(0, 9, cpu), {1, 1});
}
