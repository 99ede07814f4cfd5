// tie_parameters (comm/model_parallel/tied_parameters.h) on an even number of ranks (run on 2 and
// 4): copies of one parameter on two ranks, on one rank, and on both, each updated with the sum of
// every copy's gradient; under a data-parallel optimizer the mean over the replicas of the tied
// sums; and the errors of copies that differ or are not there. Every expected value is computed
// here, on each rank, from the seeds every rank knows.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "comm/model_parallel/tied_parameters.h"
#include "core/ops.h"
#include "layers/optimizers/sgd.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;

namespace {

constexpr double kLr = 0.5;
const Shape kShape = {2, 3};

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

// Ranks 2p and 2p + 1 hold the two copies of replica p's tied parameter.
CommunicatorPtr tie_group() {
  static CommunicatorPtr comm = world()->split(world()->rank() / 2, world()->rank());
  return comm;
}

// The ranks holding the same copy in every replica.
CommunicatorPtr data_group() {
  static CommunicatorPtr comm = world()->split(world()->rank() % 2, world()->rank());
  return comm;
}

Tensor f64(const Shape& shape, std::uint64_t seed) { return test_util::uniform(shape, seed, -1, 1, DType::f64); }

// A link with the one parameter "w".
class Holder : public Link {
 public:
  explicit Holder(const Tensor& w) { add_param("w", w); }
  std::string type_name() const override { return "Holder"; }
};

// Two copies, "a/w" and "b/w".
class TwoCopies : public Chain {
 public:
  explicit TwoCopies(const Tensor& w) {
    add_link("a", std::make_shared<Holder>(w.clone()));
    add_link("b", std::make_shared<Holder>(w.clone()));
  }
};

// Gives `param` the gradient `grad` through a backward pass: d/dw sum(w * grad) = grad.
void backward_with(const Variable& param, const Tensor& grad) { F::sum(F::mul(param, Variable(grad))).backward(); }

void require_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  INFO(what << " on world rank " << world()->rank() << ": " << got.description() << " vs " << want.description());
  REQUIRE(got.defined());
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": " << g[i] << " vs " << w[i]);
    REQUIRE(std::abs(g[i] - w[i]) <= tol * (1 + std::abs(w[i])));
  }
}

// Every rank of `group` holds the same bits of t.
void require_same_on_every_rank(Communicator& group, const Tensor& t, const std::string& what) {
  const std::vector<Tensor> all = group.allgather(t);
  for (const Tensor& other : all) require_close(other, t, 0, what + ", every rank of the group alike");
}

}  // namespace

TEST_CASE("tie_parameters: copies on two ranks take the sum of both gradients", "[tied]") {
  REQUIRE(world()->size() % 2 == 0);
  const int t = tie_group()->rank();
  REQUIRE(tie_group()->size() == 2);
  const Tensor w0 = f64(kShape, 1);
  const Tensor g[2] = {f64(kShape, 100), f64(kShape, 101)};
  auto link = std::make_shared<Holder>(w0.clone());
  auto optimizer = std::make_shared<SGD>(kLr);
  tie_parameters(*optimizer, tie_group(), {"w"});
  optimizer->setup(link);
  Variable& w = link->param("w");
  backward_with(w, g[t]);
  optimizer->update();
  const Tensor sum = add(g[0], g[1]);
  require_close(w.grad(), sum, 1e-15, "the tied gradient");
  require_close(w.data(), sub(w0, mul(sum, kLr)), 1e-15, "w after one step");
  require_same_on_every_rank(*tie_group(), w.data(), "w after one step");

  // A second step: the copies are still equal and move together.
  const Tensor h[2] = {f64(kShape, 200), f64(kShape, 201)};
  const Tensor before = w.data().clone();
  link->cleargrads();
  backward_with(w, h[t]);
  optimizer->update();
  require_close(w.data(), sub(before, mul(add(h[0], h[1]), kLr)), 1e-15, "w after two steps");
  require_same_on_every_rank(*tie_group(), w.data(), "w after two steps");
}

TEST_CASE("tie_parameters: two copies on one rank sum locally; with a group, all four", "[tied]") {
  const Tensor w0 = f64(kShape, 2), ga = f64(kShape, 300), gb = f64(kShape, 301);
  {
    INFO("no group: this rank's copies");
    auto link = std::make_shared<TwoCopies>(w0);
    auto optimizer = std::make_shared<SGD>(kLr);
    tie_parameters(*optimizer, nullptr, {"a/w", "b/w"});
    optimizer->setup(link);
    Variable& a = static_cast<Chain&>(*link).child("a")->param("w");
    Variable& b = static_cast<Chain&>(*link).child("b")->param("w");
    backward_with(a, ga);
    backward_with(b, gb);
    optimizer->update();
    const Tensor want = sub(w0, mul(add(ga, gb), kLr));
    require_close(a.data(), want, 1e-15, "a/w");
    require_close(b.data(), a.data(), 0, "b/w against a/w");
    require_close(b.grad(), add(ga, gb), 1e-15, "b/w's gradient");

    // A copy the step did not reach still gets the sum (and so the same update).
    link->cleargrads();
    const Tensor before = a.data().clone();
    backward_with(a, gb);
    REQUIRE(!b.grad().defined());
    optimizer->update();
    require_close(a.data(), sub(before, mul(gb, kLr)), 1e-15, "a/w, b/w without a gradient");
    require_close(b.data(), a.data(), 0, "b/w, updated with a/w's gradient");
  }
  {
    INFO("two copies on each rank of the tie group");
    auto link = std::make_shared<TwoCopies>(w0);
    auto optimizer = std::make_shared<SGD>(kLr);
    tie_parameters(*optimizer, tie_group(), {"a/w", "b/w"});
    optimizer->setup(link);
    const int t = tie_group()->rank();
    Variable& a = static_cast<Chain&>(*link).child("a")->param("w");
    Variable& b = static_cast<Chain&>(*link).child("b")->param("w");
    backward_with(a, f64(kShape, 400 + 2 * t));
    backward_with(b, f64(kShape, 401 + 2 * t));
    optimizer->update();
    const Tensor sum = add(add(f64(kShape, 400), f64(kShape, 401)), add(f64(kShape, 402), f64(kShape, 403)));
    require_close(a.data(), sub(w0, mul(sum, kLr)), 1e-14, "a/w");
    require_close(b.data(), a.data(), 0, "b/w against a/w");
    require_same_on_every_rank(*tie_group(), a.data(), "a/w");
  }
}

TEST_CASE("tie_parameters under a data-parallel optimizer: the mean over replicas of the tied sums", "[tied]") {
  // World rank r holds copy r % 2 of replica r / 2.
  const int t = tie_group()->rank(), replica = data_group()->rank(), replicas = data_group()->size();
  REQUIRE(replicas == world()->size() / 2);
  REQUIRE(world()->rank() == 2 * replica + t);
  const Tensor w0 = f64(kShape, 3);
  auto grad_of = [](int p, int copy) { return f64(kShape, 500 + 10 * static_cast<std::uint64_t>(p) + copy); };
  auto link = std::make_shared<Holder>(w0.clone());
  DataParallelOptions options;
  options.overlap = false;  // the tied sum needs each rank's own gradients at update
  const std::shared_ptr<Optimizer> optimizer =
      create_multi_node_optimizer(std::make_shared<SGD>(kLr), data_group(), options);
  tie_parameters(*optimizer, tie_group(), {"w"});
  optimizer->setup(link);
  Variable& w = link->param("w");
  backward_with(w, grad_of(replica, t));
  optimizer->update();
  REQUIRE(optimizer->t() == 1);  // equal replicas: the first update goes ahead
  Tensor mean = zeros(kShape, DType::f64);
  for (int p = 0; p < replicas; ++p) mean = add(mean, add(grad_of(p, 0), grad_of(p, 1)));
  mean = mul(mean, 1.0 / replicas);
  require_close(w.data(), sub(w0, mul(mean, kLr)), 1e-14, "w after one step");
  require_same_on_every_rank(*world(), w.data(), "w after one step");
}

TEST_CASE("tie_parameters: errors", "[tied]") {
  const int t = tie_group()->rank();
  {
    INFO("copies of different shapes: an error on every rank of the group, naming both");
    auto link = std::make_shared<Holder>(f64(t == 0 ? Shape{2, 3} : Shape{3, 2}, 4));
    auto optimizer = std::make_shared<SGD>(kLr);
    tie_parameters(*optimizer, tie_group(), {"w"});
    optimizer->setup(link);
    backward_with(link->param("w"), f64(link->param("w").shape(), 5));
    REQUIRE_THROWS_WITH(optimizer->update(),
                        Contains("tie_parameters: rank " + std::to_string(t)) &&
                            Contains("rank " + std::to_string(1 - t) + " a tensor of another shape") &&
                            Contains(t == 0 ? "[2, 3]" : "[3, 2]"));
  }
  {
    INFO("copies of different dtypes");
    auto link = std::make_shared<Holder>(f64(kShape, 4).to(t == 0 ? DType::f64 : DType::f32));
    auto optimizer = std::make_shared<SGD>(kLr);
    tie_parameters(*optimizer, tie_group(), {"w"});
    optimizer->setup(link);
    backward_with(link->param("w"), ones(kShape, link->param("w").dtype()));
    REQUIRE_THROWS_WITH(optimizer->update(), Contains("a tensor of another shape or dtype"));
  }
  {
    INFO("this rank's copies differ");
    auto link = std::make_shared<Chain>();
    link->add_link("a", std::make_shared<Holder>(f64({2, 3}, 6)));
    link->add_link("b", std::make_shared<Holder>(f64({3, 2}, 6)));
    auto optimizer = std::make_shared<SGD>(kLr);
    tie_parameters(*optimizer, nullptr, {"a/w", "b/w"});
    optimizer->setup(link);
    REQUIRE_THROWS_WITH(optimizer->update(), Contains("'b/w'") && Contains("differs from 'a/w'"));
  }
  {
    INFO("a path the target does not have; no path; after setup");
    auto optimizer = std::make_shared<SGD>(kLr);
    tie_parameters(*optimizer, nullptr, {"w", "x/w"});
    optimizer->setup(std::make_shared<Holder>(f64(kShape, 7)));
    REQUIRE_THROWS_WITH(optimizer->update(), Contains("the optimizer's target has no parameter 'x/w'"));
    auto other = std::make_shared<SGD>(kLr);
    REQUIRE_THROWS_WITH(tie_parameters(*other, nullptr, {}), Contains("no parameter to tie"));
    other->setup(std::make_shared<Holder>(f64(kShape, 7)));
    REQUIRE_THROWS_WITH(tie_parameters(*other, nullptr, {"w"}), Contains("before optimizer.setup"));
  }
}
