// model_parallel_gradient_clipping (comm/model_parallel/gradient_norm.h) over a tensor-parallel
// pair (ColumnParallelLinear -> tanh -> RowParallelLinear, the world as the tensor group, run on 2
// and 3 ranks) against GradientClipping on the unsplit pair in one process: the same norm, the
// same clipped (and unclipped) step; a parameter named not_counted adds nothing to the norm.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "comm/model_parallel/gradient_norm.h"
#include "comm/tensor_parallel/tensor_parallel_checkpoint.h"
#include "comm/tensor_parallel/tensor_parallel_linear.h"
#include "core/ops.h"
#include "layers/initializers.h"
#include "layers/links/linear.h"
#include "layers/optimizers/sgd.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;

namespace {

constexpr std::int64_t kIn = 5, kHidden = 7, kOut = 3, kBatch = 4;
constexpr double kLr = 0.5;

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

Tensor f64(const Shape& shape, std::uint64_t seed) { return test_util::uniform(shape, seed, -1, 1, DType::f64); }

// Weights and (non-zero) biases from their own streams: the split layers draw the whole tensors
// as the unsplit ones do and keep their shares.
LinearOptions options(std::uint64_t seed) {
  LinearOptions o;
  o.dtype = DType::f64;
  o.initialW = initializers::seeded(seed, initializers::normal(0.7));
  o.initial_bias = initializers::seeded(seed + 1, initializers::normal(0.5));
  return o;
}

class WholeMLP : public Chain {
 public:
  WholeMLP() {
    fc1_ = add_link("fc1", std::make_shared<Linear>(kIn, kHidden, options(1)));
    fc2_ = add_link("fc2", std::make_shared<Linear>(kHidden, kOut, options(3)));
  }
  Variable forward(const Variable& x) override { return (*fc2_)(F::tanh((*fc1_)(x))); }

 private:
  std::shared_ptr<Linear> fc1_, fc2_;
};

// fc1 split by output features, fc2 by input features (its bias replicated).
class SplitMLP : public Chain {
 public:
  SplitMLP() {
    fc1_ = add_link("fc1", std::make_shared<ColumnParallelLinear>(world(), kIn, kHidden, false, options(1)));
    fc2_ = add_link("fc2", std::make_shared<RowParallelLinear>(world(), kHidden, kOut, true, options(3)));
  }
  Variable forward(const Variable& x) override { return (*fc2_)(F::tanh((*fc1_)(x))); }

 private:
  std::shared_ptr<ColumnParallelLinear> fc1_;
  std::shared_ptr<RowParallelLinear> fc2_;
};

// An asymmetric loss of the output, the same on every rank.
Variable loss_of(Link& model) {
  return F::sum(F::mul(model(Variable(f64({kBatch, kIn}, 10))), Variable(f64({kBatch, kOut}, 11))));
}

void require_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  INFO(what << " on rank " << world()->rank() << ": " << got.description() << " vs " << want.description());
  REQUIRE(got.defined());
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": " << g[i] << " vs " << w[i]);
    REQUIRE(std::abs(g[i] - w[i]) <= tol * (1 + std::abs(w[i])));
  }
}

void require_whole(Link& split, const Link& whole, const std::string& what) {
  const NamedTensors gathered = gather_tensor_parallel_params(split);
  const auto params = whole.namedparams();
  REQUIRE(gathered.size() == params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    REQUIRE(gathered[i].first == params[i].first);
    require_close(gathered[i].second, params[i].second.data(), 1e-12, what + ": " + params[i].first);
  }
}

// A link with the one parameter "w".
class Holder : public Link {
 public:
  explicit Holder(const Tensor& w) { add_param("w", w); }
  std::string type_name() const override { return "Holder"; }
};

struct Step {
  double norm;                            // GradientClipping::last_norm()
  std::map<std::string, double> squares;  // each parameter's squared gradient norm
};

// One clipped SGD step of the unsplit model.
Step whole_step(WholeMLP& whole, double threshold) {
  auto optimizer = std::make_shared<SGD>(kLr);
  auto clipping = std::make_shared<GradientClipping>(threshold);
  optimizer->add_hook(clipping);
  optimizer->setup(std::shared_ptr<Link>(&whole, [](Link*) {}));
  loss_of(whole).backward();
  Step step;
  for (const auto& [name, param] : whole.namedparams()) step.squares[name] = sum_of_squares(param.grad());
  optimizer->update();
  step.norm = clipping->last_norm();
  return step;
}

}  // namespace

TEST_CASE("model_parallel_gradient_clipping: the unsplit model's norm and clipped step", "[gradient_norm]") {
  // The unsplit gradient's norm, to put the threshold below it (clipped) and above it (not).
  double norm = 0;
  {
    WholeMLP whole;
    loss_of(whole).backward();
    for (const auto& [name, param] : whole.namedparams()) norm += sum_of_squares(param.grad());
    norm = std::sqrt(norm);
  }
  REQUIRE(norm > 0.1);
  for (double threshold : {norm / 3, norm * 2}) {
    INFO("threshold " << threshold << ", norm " << norm);
    WholeMLP whole;
    auto split = std::make_shared<SplitMLP>();
    const int size = world()->size();
    // fc1's W and b and fc2's W are split; fc2's b is replicated.
    REQUIRE(split->namedparams()[0].second.shape()[0] < kHidden);
    REQUIRE(size > 1);
    require_whole(*split, whole, "at construction");

    auto optimizer = std::make_shared<SGD>(kLr);
    const auto clipping = model_parallel_gradient_clipping(threshold, *optimizer, world(), world());
    optimizer->add_hook(clipping);
    optimizer->setup(split);
    loss_of(*split).backward();
    optimizer->update();

    const Step step = whole_step(whole, threshold);
    REQUIRE(std::abs(step.norm - norm) <= 1e-12 * norm);
    CHECK(std::abs(clipping->last_norm() - norm) <= 1e-12 * norm);
    require_whole(*split, whole, "after one step");
  }
}

TEST_CASE("model_parallel_gradient_clipping: a not_counted parameter adds nothing to the norm", "[gradient_norm]") {
  WholeMLP whole;
  const Step step = whole_step(whole, 1e6);  // the squares, unclipped
  double all = 0;
  for (const auto& [name, squares] : step.squares) all += squares;
  // A replicated parameter (its squares counted on rank 0 only) and a split one (on every rank).
  for (const std::string skipped : {"fc2/b", "fc1/W"}) {
    INFO("not_counted " << skipped);
    auto split = std::make_shared<SplitMLP>();
    auto optimizer = std::make_shared<SGD>(kLr);
    const auto clipping = model_parallel_gradient_clipping(1e6, *optimizer, world(), world(), {skipped});
    optimizer->add_hook(clipping);
    optimizer->setup(split);
    loss_of(*split).backward();
    optimizer->update();
    REQUIRE(step.squares.at(skipped) > 1e-4);
    const double want = std::sqrt(all - step.squares.at(skipped));
    CHECK(std::abs(clipping->last_norm() - want) <= 1e-12 * want);
  }
}

TEST_CASE("model_parallel_gradient_clipping: pipeline parts over the model group, a tied copy counted once",
          "[gradient_norm]") {
  // Rank r holds its own part "own/w" and a copy "tied/w" of a parameter every rank holds (as a
  // pipeline's first and last stages hold wte); the copies after rank 0's are not counted.
  const int rank = world()->rank(), size = world()->size();
  auto model = std::make_shared<Chain>();
  model->add_link("own", std::make_shared<Holder>(f64({3, 2}, 20 + rank)));
  model->add_link("tied", std::make_shared<Holder>(f64({4}, 30)));
  auto optimizer = std::make_shared<SGD>(kLr);
  std::set<std::string> not_counted;
  if (rank > 0) not_counted.insert("tied/w");
  const auto clipping = model_parallel_gradient_clipping(1.0, *optimizer, nullptr, world(), not_counted);
  optimizer->add_hook(clipping);
  optimizer->setup(model);
  auto own_grad = [](int r) { return f64({3, 2}, 40 + static_cast<std::uint64_t>(r)); };
  const Tensor tied_grad = f64({4}, 50);  // the tied sum, the same on every holder
  for (const auto& [name, param] : model->namedparams())
    F::sum(F::mul(param, Variable(name == "own/w" ? own_grad(rank) : tied_grad))).backward();
  const Tensor own_before = model->namedparams()[0].second.data().clone();
  optimizer->update();
  double squares = sum_of_squares(tied_grad);
  for (int r = 0; r < size; ++r) squares += sum_of_squares(own_grad(r));
  const double norm = std::sqrt(squares);
  REQUIRE(norm > 1.0);  // clipped
  CHECK(std::abs(clipping->last_norm() - norm) <= 1e-12 * norm);
  require_close(model->namedparams()[0].second.data(), sub(own_before, mul(own_grad(rank), kLr / norm)), 1e-12,
                "own/w after a clipped step");
}
