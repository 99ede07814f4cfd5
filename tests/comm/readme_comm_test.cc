// The communication snippet of docs/communication.md, compiled and run on 2 ranks, so it cannot
// rot; the model-parallel MLP's gradients are checked against the same MLP on one process.
#include <catch2/catch.hpp>

#include "autograd/functions.h"
#include "comm/data_parallel/data_parallel.h"
#include "comm/transport/communicator.h"
#include "comm/functions.h"
#include "layers/links/linear.h"
#include "tests/core/test_util.h"

using namespace tandem;

TEST_CASE("the README communication snippet runs and matches one process", "[readme]") {
  auto comm = create_communicator("naive");
  int rank = comm->rank(), size = comm->size();
  REQUIRE(size >= 2);
  auto pair = comm->split(rank / 2, rank);
  REQUIRE(pair->size() == std::min(2, size - rank / 2 * 2));

  Tensor x = test_util::uniform({4, 6}, 1);
  if (rank == 0) comm->send(x, /*dest=*/1, /*tag=*/0);
  if (rank == 1) {
    Tensor got = comm->recv(/*source=*/0, /*tag=*/0);
    test_util::require_values(got, test_util::values(x));
  }
  Tensor total = comm->allreduce(x);
  test_util::require_values(total, test_util::values(x * static_cast<double>(size)), 1e-6);
  std::vector<Tensor> all = comm->allgather(x);
  REQUIRE(static_cast<int>(all.size()) == size);
  std::string text = comm->bcast_obj(rank == 0 ? std::string("hello") : std::string(), 0);
  REQUIRE(text == "hello");

  // The same seeds on every rank: rank 0's copy of l2/l3 is the single-process reference.
  Generator gen(5);
  auto make = [&](std::int64_t in, std::int64_t out) {
    auto link = std::make_shared<Linear>(in, out);
    for (auto& [name, p] : link->namedparams()) p.set_data(randn(p.shape(), gen, 0, 0.3));
    return link;
  };
  auto l1 = make(6, 8), l2 = make(8, 8), l3 = make(8, 3);
  Variable t(from_vector<std::int64_t>({0, 1, 2, 1}));
  if (rank == 0) {
    Variable phi = functions::send(functions::relu((*l1)(Variable(x))), *comm, 1);
    Variable y = functions::recv(*comm, 1, phi);
    functions::softmax_cross_entropy(y, t).backward();
    // The reference: the whole MLP here.
    auto r1 = make(6, 8);
    r1->copyparams(*l1);
    Variable ref = functions::softmax_cross_entropy((*l3)(functions::relu((*l2)(functions::relu((*r1)(Variable(x)))))), t);
    REQUIRE(y.data().shape() == Shape{4, 3});
    ref.backward();
    test_util::require_values(l1->W().grad(), test_util::values(r1->W().grad()), 1e-5);
    // l2/l3 here hold the reference gradients: rank 1's must equal them.
    comm->send(l2->W().grad(), 1, 1);
  } else if (rank == 1) {
    Variable h = functions::recv(*comm, 0);
    functions::send((*l3)(functions::relu((*l2)(h))), *comm, 0).backward();
    Tensor want = comm->recv(0, 1);
    test_util::require_values(l2->W().grad(), test_util::values(want), 1e-5);
  }
  multi_node_mean_grad(*comm, *l1, /*zero_fill=*/true);
  bcast_data(*comm, *l3);
}
