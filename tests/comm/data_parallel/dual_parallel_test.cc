// Dual parallelism on an even number of ranks (run on 4): the ranks form pairs {0,1}, {2,3}
// that split an MLP between them (model parallelism, MultiNodeChainList), and the same half of
// every pair forms a data-parallel group (multi-node optimizer), each pair on its own
// minibatch. After a few SGD steps every pair must have the losses and the parameters of the
// same MLP trained on one process on the concatenated minibatches.
#include <catch2/catch.hpp>

#include "autograd/functions.h"
#include "comm/multi_node_links/multi_node_chain_list.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "layers/links/linear.h"
#include "layers/optimizers/sgd.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using test_util::require_values;
using test_util::uniform;
using test_util::values;

namespace {

constexpr std::int64_t kIn = 6, kUnits = 5, kClasses = 3, kBatch = 4;  // kBatch: per pair
constexpr double kLr = 0.5;
constexpr int kSteps = 3;

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

// The whole MLP on one process: 6-5-5-3, ReLU between layers.
struct Reference : Chain {
  Reference() {
    l1 = add_link("l1", std::make_shared<Linear>(kIn, kUnits));
    l2 = add_link("l2", std::make_shared<Linear>(kUnits, kUnits));
    l3 = add_link("l3", std::make_shared<Linear>(kUnits, kClasses));
  }
  Variable forward(const Variable& x) override { return (*l3)(F::relu((*l2)(F::relu((*l1)(x))))); }
  std::shared_ptr<Linear> l1, l2, l3;
};

// Pair-rank 0's part (l1 + ReLU) and pair-rank 1's (l2 + ReLU -> l3).
struct First : Chain {
  First() { l1 = add_link("l1", std::make_shared<Linear>(kIn, kUnits)); }
  Variable forward(const Variable& x) override { return F::relu((*l1)(x)); }
  std::shared_ptr<Linear> l1;
};
struct Last : Chain {
  Last() {
    l2 = add_link("l2", std::make_shared<Linear>(kUnits, kUnits));
    l3 = add_link("l3", std::make_shared<Linear>(kUnits, kClasses));
  }
  Variable forward(const Variable& h) override { return (*l3)(F::relu((*l2)(h))); }
  std::shared_ptr<Linear> l2, l3;
};
struct Identity : Link {
  Variable forward(const Variable& y) override { return y; }
};

void copy_params(Linear& to, Linear& from) {
  to.W().set_data(from.W().data().clone());
  to.b().set_data(from.b().data().clone());
}

void require_same_params(Linear& got, Linear& want) {
  require_values(got.W().data(), values(want.W().data()), 1e-5, 1e-6);
  require_values(got.b().data(), values(want.b().data()), 1e-5, 1e-6);
}

// Pair p's minibatch at step s: rows [p * kBatch, (p + 1) * kBatch) of the step's whole batch.
Tensor whole_x(int step, int pairs) { return uniform({kBatch * pairs, kIn}, 1000 + step, -2.0, 2.0); }
Tensor whole_t(int step, int pairs) {
  std::vector<std::int32_t> labels;
  for (std::int64_t i = 0; i < kBatch * pairs; ++i)
    labels.push_back(static_cast<std::int32_t>((i * 7 + step) % kClasses));
  return from_vector(labels);
}
Tensor rows_of_pair(const Tensor& x, int pair) { return slice(x, 0, pair * kBatch, (pair + 1) * kBatch); }

}  // namespace

TEST_CASE("dual parallel MLP: pairs split the model, the pairs split the batch; as one process on the whole batch") {
  auto comm = world();
  REQUIRE(comm->size() % 2 == 0);
  const int rank = comm->rank();
  CommunicatorPtr model_comm = comm->split(rank / 2, rank);  // this rank's pair
  CommunicatorPtr data_comm = comm->split(rank % 2, rank);   // the same half of every pair
  REQUIRE(model_comm->size() == 2);
  REQUIRE(model_comm->rank() == rank % 2);
  REQUIRE(data_comm->rank() == rank / 2);
  const bool first_half = model_comm->rank() == 0;
  const int pair = data_comm->rank(), pairs = data_comm->size();

  manual_seed(7);  // the same reference weights on every rank
  auto reference = std::make_shared<Reference>();
  SGD reference_sgd(kLr);
  reference_sgd.setup(reference);

  // The dual model: pair 0 starts from the reference's weights, the other pairs from their
  // own (the multi-node optimizer's first update must broadcast pair 0's).
  manual_seed(100 + rank);
  auto first = std::make_shared<First>();
  auto last = std::make_shared<Last>();
  if (pair == 0) {
    copy_params(*first->l1, *reference->l1);
    copy_params(*last->l2, *reference->l2);
    copy_params(*last->l3, *reference->l3);
  } else {
    REQUIRE(values(first->l1->W().data()) != values(reference->l1->W().data()));
  }
  auto chain = std::make_shared<MultiNodeChainList>(model_comm);
  if (first_half) {
    chain->add_link(first, {}, 1);
    chain->add_link(std::make_shared<Identity>(), 1, {});
  } else {
    chain->add_link(last, 0, 0);
  }
  auto optimizer = create_multi_node_optimizer(std::make_shared<SGD>(kLr), data_comm);
  optimizer->setup(chain);

  double pair_loss = 0;
  auto step_loss = [&](int step) {
    if (!first_half) return chain->forward_many({})[0];  // the delegate: backward runs the exchange
    const Variable loss = F::softmax_cross_entropy(chain->forward(Variable(rows_of_pair(whole_x(step, pairs), pair))),
                                                   Variable(rows_of_pair(whole_t(step, pairs), pair)));
    pair_loss = loss.data().item();
    return loss;
  };
  auto require_reference_params = [&] {
    if (first_half) {
      require_same_params(*first->l1, *reference->l1);
    } else {
      require_same_params(*last->l2, *reference->l2);
      require_same_params(*last->l3, *reference->l3);
    }
  };

  // Step 0: forward and backward run, but the update only broadcasts pair 0's parameters.
  optimizer->update([&] { return step_loss(0); });
  REQUIRE(optimizer->t() == 0);
  require_reference_params();

  for (int step = 1; step <= kSteps; ++step) {
    INFO("step " << step << ", rank " << rank);
    const Tensor x = whole_x(step, pairs), t = whole_t(step, pairs);
    double want_pair_loss = 0;
    {
      NoGradGuard no_grad;
      want_pair_loss = F::softmax_cross_entropy((*reference)(Variable(rows_of_pair(x, pair))),
                                                Variable(rows_of_pair(t, pair))).data().item();
    }
    reference->cleargrads();
    const Variable want_loss = F::softmax_cross_entropy((*reference)(Variable(x)), Variable(t));
    want_loss.backward();
    reference_sgd.update();

    optimizer->update([&] { return step_loss(step); });
    REQUIRE(optimizer->t() == step);
    if (first_half) {
      // Each pair's loss is the reference's on its rows; their mean is the whole batch's.
      REQUIRE(pair_loss == Approx(want_pair_loss).epsilon(1e-5));
      const double mean = data_comm->allreduce(full({}, pair_loss, DType::f64), AllreduceOp::mean).item();
      REQUIRE(mean == Approx(want_loss.data().item()).epsilon(1e-5));
    }
    require_reference_params();
  }
  // The training moved the weights (a no-op optimizer would have passed the checks above only
  // if the reference had not moved either).
  manual_seed(7);
  Reference initial;
  REQUIRE(values(reference->l1->W().data()) != values(initial.l1->W().data()));
  REQUIRE(values(reference->l3->W().data()) != values(initial.l3->W().data()));
}
