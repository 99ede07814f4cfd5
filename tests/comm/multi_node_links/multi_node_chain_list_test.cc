// MultiNodeChainList on several ranks, in the model shapes ChainerMN's own tests exercise:
// a cycle through all ranks, crossing, branching (with the parent's own rank among the
// children), twisting and tuple data. Each must give the same losses and parameter gradients
// as the identical model computed on one process.
#include <catch2/catch.hpp>

#include <map>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "comm/functions/pseudo_connect.h"
#include "comm/multi_node_links/multi_node_chain_list.h"
#include "layers/links/linear.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;

namespace {

constexpr std::int64_t kWidth = 4;

// Every shape below also runs under the send-order check (comm/functions/pseudo_connect.h): the
// list joins its delegates in the order of their sends, so the check must never fire.
const bool kCheckSendOrder = [] {
  F::set_check_send_order(true);
  return true;
}();

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

std::shared_ptr<Linear> seeded_linear(std::uint64_t seed) {
  auto l = std::make_shared<Linear>(kWidth, kWidth);
  Generator gen(seed);
  l->W().set_data(randn({kWidth, kWidth}, gen, 0, 0.6));
  l->b().set_data(randn({kWidth}, gen, 0, 0.3));
  return l;
}

// sigmoid(W sum(xs) + b): one input, or several summed (a parent collecting its children).
class Stage : public Chain {
 public:
  explicit Stage(std::uint64_t seed) : l(add_link("l", seeded_linear(seed))) {}
  Variable forward(const Variable& x) override { return F::sigmoid((*l)(x)); }
  Variables forward_many(const Variables& xs) override {
    Variable total = xs[0];
    for (std::size_t i = 1; i < xs.size(); ++i) total = F::add(total, xs[i]);
    return {forward(total)};
  }
  std::shared_ptr<Linear> l;
};

// Tuple data: one input to a pair, a pair to a pair, a pair to one output.
class PairSplit : public Chain {
 public:
  explicit PairSplit(std::uint64_t seed)
      : a(add_link("a", seeded_linear(seed))), b(add_link("b", seeded_linear(seed + 1))) {}
  Variables forward_many(const Variables& xs) override { return {F::sigmoid((*a)(xs[0])), F::tanh((*b)(xs[0]))}; }
  std::shared_ptr<Linear> a, b;
};
class PairMix : public Chain {
 public:
  explicit PairMix(std::uint64_t seed)
      : a(add_link("a", seeded_linear(seed))), b(add_link("b", seeded_linear(seed + 1))) {}
  Variables forward_many(const Variables& xs) override {
    return {F::sigmoid(F::add((*a)(xs[0]), xs[1])), F::tanh(F::sub((*b)(xs[1]), xs[0]))};
  }
  std::shared_ptr<Linear> a, b;
};
class PairJoin : public Chain {
 public:
  explicit PairJoin(std::uint64_t seed) : l(add_link("l", seeded_linear(seed))) {}
  Variables forward_many(const Variables& xs) override { return {F::sigmoid((*l)(F::mul(xs[0], xs[1])))}; }
  std::shared_ptr<Linear> l;
};

Tensor input(int rank) { return test_util::uniform({3, kWidth}, 500 + rank); }

Variable weighted_loss(const Variable& y, int rank) {
  return F::sum(F::mul(y, Variable(test_util::uniform(y.shape(), 600 + rank, 0.5, 2.0))));
}

// The single-process reference: components by seed, built on demand.
class Reference {
 public:
  template <typename T>
  std::shared_ptr<T> get(std::uint64_t seed) {
    auto& slot = links_[seed];
    if (!slot) slot = std::make_shared<T>(seed);
    return std::dynamic_pointer_cast<T>(slot);
  }
  // The total objective: every rank's loss, summed.
  void backward(const std::map<int, Variable>& outputs) {
    Variables losses;
    for (const auto& [rank, y] : outputs) losses.push_back(weighted_loss(y, rank));
    tandem::backward(losses, std::vector<Tensor>(losses.size()));
    for (const auto& [rank, y] : outputs) loss_[rank] = weighted_loss(y, rank).data().item();
  }
  double loss(int rank) const { return loss_.at(rank); }
  const Link& link(std::uint64_t seed) const { return *links_.at(seed); }

 private:
  std::map<std::uint64_t, std::shared_ptr<Link>> links_;
  std::map<int, double> loss_;
};

// Runs this rank's model on its input (forward() on a rank without one), backpropagates its loss
// (or its delegate), and compares the loss and every component's gradients with the reference.
void run_and_compare(MultiNodeChainList& model, const std::vector<std::uint64_t>& seeds, bool has_output,
                     Reference& reference, bool has_input = true) {
  const int rank = model.communicator().rank();
  Variable y = has_input ? model(Variable(input(rank))) : model.forward();
  if (has_output) {
    Variable loss = weighted_loss(y, rank);
    loss.backward();
    REQUIRE(loss.data().item() == Approx(reference.loss(rank)).epsilon(1e-5));
  } else {
    REQUIRE(y.numel() == 0);  // a delegate
    y.backward();
  }
  REQUIRE(seeds.size() == model.size());
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    const auto got = model[i]->namedparams(), want = reference.link(seeds[i]).namedparams();
    REQUIRE(got.size() == want.size());
    for (std::size_t p = 0; p < got.size(); ++p) {
      INFO("component " << i << " parameter " << got[p].first);
      REQUIRE(got[p].second.grad().defined());
      test_util::require_values(got[p].second.grad(), test_util::values(want[p].second.grad()), 1e-4, 1e-6);
    }
  }
}

}  // namespace

TEST_CASE("cycle through all ranks") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  Reference ref;
  Variable h(input(0));
  for (int q = 0; q < n; ++q) h = ref.get<Stage>(q)->forward(h);
  ref.backward({{0, ref.get<Stage>(1000)->forward(h)}});

  MultiNodeChainList model(comm);
  if (r == 0) {
    model.add_link(std::make_shared<Stage>(0), {}, 1);
    model.add_link(std::make_shared<Stage>(1000), n - 1, {});
    run_and_compare(model, {0, 1000}, true, ref);
  } else {
    model.add_link(std::make_shared<Stage>(r), r - 1, (r + 1) % n);
    run_and_compare(model, {static_cast<std::uint64_t>(r)}, false, ref, /*has_input=*/false);
  }
}

TEST_CASE("crossing: the output component declared first") {
  auto comm = world();
  const int r = comm->rank();
  Reference ref;
  std::map<int, Variable> outputs;
  outputs[0] = ref.get<Stage>(11)->forward(ref.get<Stage>(21)->forward(Variable(input(1))));
  outputs[1] = ref.get<Stage>(20)->forward(ref.get<Stage>(10)->forward(Variable(input(0))));
  ref.backward(outputs);

  MultiNodeChainList model(comm);
  if (r == 0) {
    model.add_link(std::make_shared<Stage>(10), {}, 1);
    model.add_link(std::make_shared<Stage>(11), 1, {});
    run_and_compare(model, {10, 11}, true, ref);
  } else if (r == 1) {
    model.add_link(std::make_shared<Stage>(20), 0, {});
    model.add_link(std::make_shared<Stage>(21), {}, 0);
    run_and_compare(model, {20, 21}, true, ref);
  }
}

TEST_CASE("branching: a parent sends to its children and itself and collects the results") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  std::vector<int> children_and_self;
  for (int q = 1; q < n; ++q) children_and_self.push_back(q);
  children_and_self.push_back(0);

  Reference ref;
  Variable a = ref.get<Stage>(30)->forward(Variable(input(0)));
  Variables collected;
  for (int q = 1; q < n; ++q) collected.push_back(ref.get<Stage>(40 + q)->forward(a));
  collected.push_back(a);
  ref.backward({{0, ref.get<Stage>(31)->forward_many(collected)[0]}});

  MultiNodeChainList model(comm);
  if (r == 0) {
    model.add_link(std::make_shared<Stage>(30), {}, Ranks(children_and_self));
    model.add_link(std::make_shared<Stage>(31), Ranks(children_and_self), {});
    run_and_compare(model, {30, 31}, true, ref);
  } else {
    model.add_link(std::make_shared<Stage>(40 + r), 0, 0);
    run_and_compare(model, {static_cast<std::uint64_t>(40 + r)}, false, ref, /*has_input=*/false);
  }
}

TEST_CASE("twisting: several components per rank sending both ways") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  // Seeds: rank q's components are 100 q + 0..4.
  auto seed = [](int q, int i) { return static_cast<std::uint64_t>(100 * q + i); };
  Reference ref;
  auto x = [](int q) { return Variable(input(q)); };
  // What rank q sends towards q + 1 and towards q - 1.
  auto forward_from = [&](int q) {
    return q == 0 ? ref.get<Stage>(seed(0, 0))->forward(x(0)) : ref.get<Stage>(seed(q, 2))->forward(x(q));
  };
  auto backward_from = [&](int q) {
    return q == n - 1 ? ref.get<Stage>(seed(q, 1))->forward(x(q)) : ref.get<Stage>(seed(q, 1))->forward(x(q));
  };
  std::map<int, Variable> outputs;
  outputs[0] = ref.get<Stage>(seed(0, 1))->forward(backward_from(1));
  for (int q = 1; q < n - 1; ++q) {
    Variable left = ref.get<Stage>(seed(q, 0))->forward(forward_from(q - 1));
    Variable right = ref.get<Stage>(seed(q, 3))->forward(backward_from(q + 1));
    outputs[q] = ref.get<Stage>(seed(q, 4))->forward_many({left, right})[0];
  }
  outputs[n - 1] = ref.get<Stage>(seed(n - 1, 0))->forward(forward_from(n - 2));
  ref.backward(outputs);

  MultiNodeChainList model(comm);
  std::vector<std::uint64_t> seeds;
  auto add = [&](int i, Ranks in, Ranks out) {
    model.add_link(std::make_shared<Stage>(seed(r, i)), in, out);
    seeds.push_back(seed(r, i));
  };
  if (r == 0) {
    add(0, {}, 1);
    add(1, 1, {});
  } else if (r == n - 1) {
    add(0, r - 1, {});
    add(1, {}, r - 1);
  } else {
    add(0, r - 1, r);
    add(1, {}, r - 1);
    add(2, {}, r + 1);
    add(3, r + 1, r);
    add(4, {r, r}, {});
  }
  run_and_compare(model, seeds, true, ref);
}

TEST_CASE("tuple data: a component sends a pair") {
  auto comm = world();
  const int r = comm->rank();
  Reference ref;
  Variables pair = ref.get<PairSplit>(60)->forward_many({Variable(input(0))});
  Variables mixed = ref.get<PairMix>(70)->forward_many(pair);
  ref.backward({{0, ref.get<PairJoin>(62)->forward_many(mixed)[0]}});

  MultiNodeChainList model(comm);
  if (r == 0) {
    model.add_link(std::make_shared<PairSplit>(60), {}, 1);
    model.add_link(std::make_shared<PairJoin>(62), 1, {});
    run_and_compare(model, {60, 62}, true, ref);
  } else if (r == 1) {
    model.add_link(std::make_shared<PairMix>(70), 0, 0);
    run_and_compare(model, {70}, false, ref, /*has_input=*/false);
  }
}

TEST_CASE("a rank without input: forward() and forward(Variable()) are the same call") {
  auto comm = world();
  const int r = comm->rank();
  REQUIRE(kCheckSendOrder);
  Reference ref;
  Variable h = ref.get<Stage>(81)->forward(ref.get<Stage>(80)->forward(Variable(input(0))));
  ref.backward({{0, ref.get<Stage>(82)->forward(h)}});
  for (bool with_undefined : {false, true}) {
    MultiNodeChainList model(comm);
    if (r == 0) {
      model.add_link(std::make_shared<Stage>(80), {}, 1);
      model.add_link(std::make_shared<Stage>(82), 1, {});
      run_and_compare(model, {80, 82}, true, ref);
    } else if (r == 1) {
      model.add_link(std::make_shared<Stage>(81), 0, 0);
      Variable delegate = with_undefined ? model.forward(Variable()) : model.forward();
      REQUIRE(delegate.numel() == 0);
      delegate.backward();
      const auto got = model[0]->namedparams(), want = ref.link(81).namedparams();
      for (std::size_t p = 0; p < got.size(); ++p)
        test_util::require_values(got[p].second.grad(), test_util::values(want[p].second.grad()), 1e-4, 1e-6);
    }
  }
}

TEST_CASE("MultiNodeChainList errors") {
  auto comm = world();
  const int r = comm->rank();
  MultiNodeChainList model(comm);
  model.add_link(std::make_shared<Stage>(1), {}, {});
  REQUIRE_THROWS_WITH(model.add_link(std::make_shared<Stage>(2), {}, {}), Contains("only one component"));
  REQUIRE_THROWS_WITH(model.add_link(std::make_shared<Stage>(2), comm->size(), {}), Contains("names rank"));

  MultiNodeChainList unconsumed(comm);
  unconsumed.add_link(std::make_shared<Stage>(1), {}, r);
  REQUIRE_THROWS_WITH(unconsumed(Variable(input(r))), Contains("never taken"));

  MultiNodeChainList starved(comm);
  starved.add_link(std::make_shared<Stage>(1), r, {});
  REQUIRE_THROWS_WITH(starved(Variable(input(r))), Contains("no earlier component"));
}
