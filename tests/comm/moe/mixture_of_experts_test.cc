// MixtureOfExperts (comm/moe/mixture_of_experts.h) split over 2 and 4 ranks against the same
// layer in one process, in f64: the output, every gradient, the dropped tokens and the
// parameters after one step of the grouped multi-node optimizer agree to 1e-10, for k = 1 and
// 2, dropless and with a capacity, with a router that spreads tokens and one that sends every
// token to expert 0 (the worst imbalance), and with a rank that has no tokens. Misuse: errors on
// every rank.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/functions.h"
#include "comm/moe/mixture_of_experts.h"
#include "layers/links/transformer.h"
#include "layers/optimizers/sgd.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;
using test_util::uniform;
using test_util::values;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

constexpr std::int64_t kDim = 6, kHidden = 10, kExperts = 4;

std::shared_ptr<MixtureOfExperts> make_moe(CommunicatorPtr comm, const MoEOptions& options, bool skewed) {
  auto moe = std::make_shared<MixtureOfExperts>(comm, kDim, options, [](std::int64_t e) -> LinkPtr {
    LinearOptions linear;
    linear.dtype = DType::f64;
    linear.initialW = initializers::seeded(100 + e, initializers::lecun_normal());
    linear.initial_bias = initializers::seeded(200 + e, initializers::normal(0.1));
    return std::make_shared<TransformerMLP>(kDim, kHidden, linear);
  });
  if (skewed) {  // positive inputs and a large first row: every token's first choice is expert 0
    Tensor W = moe->get<Linear>("router")->param("W").data();
    Tensor skew = uniform({kExperts, kDim}, 5, -0.2, 0.2, DType::f64);
    for (std::int64_t d = 0; d < kDim; ++d) skew.data<double>()[d] = 3.0;
    W.copy_(skew);
  }
  return moe;
}

MoEOptions options_for(int k, double capacity) {
  MoEOptions options;
  options.experts = kExperts;
  options.top_k = k;
  options.capacity_factor = capacity;
  options.load_balance_coef = 0.01;
  options.z_loss_coef = 0.001;
  options.router.dtype = DType::f64;
  options.router.initialW = initializers::seeded(9, initializers::normal(1.0));
  return options;
}

std::int64_t tokens_of(int rank, bool empty_rank) { return empty_rank && rank == 1 ? 0 : 5 + 2 * rank; }

Tensor input_of(int rank, bool skewed, bool empty_rank) {
  return uniform({tokens_of(rank, empty_rank), kDim}, 300 + rank, skewed ? 0.5 : -1, 1.5, DType::f64);
}

Tensor weights_of(int rank, bool empty_rank) {
  return uniform({tokens_of(rank, empty_rank), kDim}, 400 + rank, -1, 1, DType::f64);
}

void require_close(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> a = values(got), b = values(want);
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("element " << i << ": " << a[i] << " vs " << b[i]);
    REQUIRE(std::abs(a[i] - b[i]) <= 1e-10 * (1 + std::abs(b[i])));
  }
}

Tensor param_of(const Link& link, const std::string& path, bool grad) {
  for (const auto& [name, p] : link.namedparams())
    if (name == path) return grad ? p.grad() : p.data();
  FAIL("no parameter " << path);
  return Tensor();
}

// One configuration: forward, backward, one optimizer step, each compared with one process.
// ep: the ranks of each expert-parallel group (the world: ep = R; fewer: data parallelism over
// groups of ep ranks, each holding every expert once).
void check_against_one_process(int k, double capacity, bool skewed, bool empty_rank, int ep) {
  CommunicatorPtr comm = world();
  const int R = comm->size(), me = comm->rank();
  const ExpertLayout layout = make_expert_layout(comm, ep);
  INFO("expert-parallel groups of " << ep << ", k " << k << ", capacity " << capacity << ", " << (skewed ? "skewed" : "balanced") << " routing"
            << (empty_rank ? ", rank 1 without tokens" : ""));
  // Each layer gets its own options: copies of a seeded initialiser share one generator.
  // This rank's share of the split layer; the loss is this rank's own (its mean-free sum).
  auto moe = make_moe(layout.expert_parallel, options_for(k, capacity), skewed);
  REQUIRE(moe->local_experts() == kExperts / ep);
  const Variable y = (*moe)(Variable(input_of(me, skewed, empty_rank)));
  Variable loss = F::sum(F::mul(y, Variable(weights_of(me, empty_rank))));
  if (moe->aux_loss().defined()) loss = F::add(loss, moe->aux_loss());
  loss.backward();

  // The whole layer in one process, over every rank's tokens; its loss is the mean over ranks.
  auto ref = make_moe(nullptr, options_for(k, capacity), skewed);
  Variable total;
  Tensor my_output;
  double my_dropped = -1;
  for (int r = 0; r < R; ++r) {
    const Variable out = (*ref)(Variable(input_of(r, skewed, empty_rank)));
    Variable part = F::sum(F::mul(out, Variable(weights_of(r, empty_rank))));
    if (ref->aux_loss().defined()) part = F::add(part, ref->aux_loss());
    total = total.defined() ? F::add(total, part) : part;
    if (r == me) {
      my_output = out.data();
      my_dropped = ref->observation().at("moe/dropped");
    }
  }
  F::mul(total, 1.0 / R).backward();

  require_close(y.data(), my_output, "output");
  REQUIRE(moe->observation().at("moe/dropped") == my_dropped);
  if (capacity > 0 && skewed && !empty_rank) REQUIRE(my_dropped > 0);  // the capacity really bit
  if (capacity == 0) REQUIRE(my_dropped == 0);

  // Expert gradients: each expert's sums what every rank sent it (R times the mean's), when
  // its group is the world.
  for (std::int64_t e = moe->first_local_expert(); e < moe->first_local_expert() + moe->local_experts(); ++e) {
    for (const char* leaf : {"fc1/W", "fc1/b", "fc2/W", "fc2/b"}) {
      const std::string path = "experts/" + std::to_string(e) + "/" + leaf;
      const Tensor got = param_of(*moe, path, true), want = param_of(*ref, path, true);
      if (ep < R) break;
      if (!want.defined()) {  // an expert nobody routed to (skewed, k = 1)
        REQUIRE_FALSE(got.defined());
        continue;
      }
      require_close(got, mul(want, static_cast<double>(R)), path + " gradient");
    }
  }
  // The router's: the sum over ranks of each rank's (R times the mean's).
  const Tensor router_sum = comm->allreduce(param_of(*moe, "router/W", true));
  require_close(router_sum, mul(param_of(*ref, "router/W", true), static_cast<double>(R)), "router/W gradient");

  // One step of the grouped multi-node optimizer equals one SGD step of the one-process layer.
  auto optimizer = create_multi_node_optimizer(std::make_shared<SGD>(0.1), moe_parameter_groups(*moe, comm, layout));
  optimizer->setup(moe);
  optimizer->update();
  auto ref_optimizer = std::make_shared<SGD>(0.1);
  ref_optimizer->setup(ref);
  ref_optimizer->update();
  for (const auto& [path, p] : moe->namedparams()) require_close(p.data(), param_of(*ref, path, false), path + " after one step");
}

}  // namespace

TEST_CASE("MixtureOfExperts over the ranks equals one process: dropless and capacity, k = 1 and 2") {
  for (int k : {1, 2})
    for (double capacity : {0.0, 1.0})
      for (bool skewed : {false, true}) check_against_one_process(k, capacity, skewed, false, world()->size());
}

TEST_CASE("MixtureOfExperts inside data parallelism: groups of half the ranks, experts averaged per replica") {
  const int ep = world()->size() / 2;  // 2 ranks: every rank holds every expert; 4: 2 groups of 2
  for (int k : {1, 2}) check_against_one_process(k, 1.0, false, false, ep);
  check_against_one_process(1, 0.0, true, false, ep);
}

TEST_CASE("MixtureOfExperts with a rank that has no tokens") {
  for (int k : {1, 2}) check_against_one_process(k, 0.0, false, true, world()->size());
}

TEST_CASE("MixtureOfExperts reports load and auxiliary losses") {
  CommunicatorPtr comm = world();
  auto moe = make_moe(comm, options_for(1, 0.0), true);
  (*moe)(Variable(input_of(comm->rank(), true, false)));
  const auto seen = moe->observation();
  // Every token's first choice is expert 0: the busiest expert takes all of them (E times the mean).
  REQUIRE(seen.at("moe/max_load") == Approx(kExperts));
  REQUIRE(seen.at("moe/load_balance") > 1.0);  // 1 when perfectly balanced
  REQUIRE(seen.at("moe/z_loss") > 0.0);
  REQUIRE(moe_aux_loss(*moe).defined());
  REQUIRE(moe_observation(*moe).at("moe/dropped") == 0.0);
}

TEST_CASE("MixtureOfExperts misuse: clear errors on every rank") {
  CommunicatorPtr comm = world();
  const int R = comm->size(), me = comm->rank();
  auto expert = [](std::int64_t) -> LinkPtr { return std::make_shared<TransformerMLP>(kDim, kHidden); };
  MoEOptions uneven;
  uneven.experts = R + 1;
  REQUIRE_THROWS_WITH(MixtureOfExperts(comm, kDim, uneven, expert),
                      Contains(std::to_string(R + 1) + " experts do not split evenly over the " + std::to_string(R) +
                               " ranks"));
  // Ranks that disagree on E or k: every rank gets the same list.
  MoEOptions differ;
  differ.experts = 2 * R;
  differ.top_k = me == 1 ? 2 : 1;
  REQUIRE_THROWS_WITH(MixtureOfExperts(comm, kDim, differ, expert),
                      Contains("disagree on the layer") && Contains("rank 1 has experts " + std::to_string(2 * R) +
                                                                    ", top_k 2"));
  // A router that gives the wrong shape on rank 0 only: rank 0 names it, every other rank names rank 0.
  MoEOptions bad_router;
  bad_router.experts = R;
  bad_router.router_link = std::make_shared<Linear>(kDim, me == 0 ? R + 1 : R);
  MixtureOfExperts moe(comm, kDim, bad_router, expert);
  const Variable x(uniform({3, kDim}, 1));
  if (me == 0) {
    REQUIRE_THROWS_WITH(moe(x), Contains("the router must map [tokens, dim] to logits [tokens, experts] = [3, " +
                                         std::to_string(R) + "], got") &&
                                    Contains("(on rank 0; every rank of the group stops here)"));
  } else {
    REQUIRE_THROWS_WITH(moe(x), Contains("rank(s) 0 of the expert-parallel group failed before dispatch"));
  }
  // A wrong input width, on every rank.
  REQUIRE_THROWS_WITH(moe(Variable(uniform({3, kDim + 1}, 2))), Contains("MixtureOfExperts: input must be [..., 6]"));
  // Still usable afterwards: a good forward on every rank.
  MoEOptions good;
  good.experts = R;
  MixtureOfExperts fine(comm, kDim, good, expert);
  REQUIRE(fine(x).shape() == Shape{3, kDim});
}
