// Activation checkpointing per transformer block (TransformerBlock::set_recompute) and its
// planner by memory budget (training/recompute_budget.h), on a small language model in f32 (token
// embedding, 4 blocks, a linear head and softmax cross entropy): every recompute setting gives
// every parameter's gradient bit for bit; plans for 25%, 50% and 75% of the unbudgeted peak fit
// their budget (as planned and measured again), set the blocks as they say, and keep the
// gradients; a budget below every block recomputed is an error; a budget the step fits needs no
// recompute and one measurement.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "layers/links/embed_id.h"
#include "layers/links/linear.h"
#include "layers/links/transformer.h"
#include "training/recompute_budget.h"

using namespace tandem;
using Catch::Matchers::Contains;

namespace {

struct Shape_ {
  std::int64_t vocab, dim, heads, layers, batch, length;
};

// Token embedding, `layers` TransformerBlocks, a linear head; softmax cross entropy.
class LanguageModel : public Chain {
 public:
  explicit LanguageModel(const Shape_& s) : s_(s) {
    manual_seed(5);
    embed_ = add_link("embed", std::make_shared<EmbedID>(s.vocab, s.dim));
    TransformerBlockOptions options;
    options.heads = s.heads;
    for (std::int64_t i = 0; i < s.layers; ++i)
      blocks_.push_back(
          add_link("block" + std::to_string(i), std::make_shared<TransformerBlock>(s.dim, options)).get());
    head_ = add_link("head", std::make_shared<Linear>(s.dim, s.vocab));
    Generator data(9);
    std::vector<std::int64_t> ids, targets;
    for (std::int64_t i = 0; i < s.batch * s.length; ++i) {
      ids.push_back(static_cast<std::int64_t>(data.next() % s.vocab));
      targets.push_back(static_cast<std::int64_t>(data.next() % s.vocab));
    }
    ids_ = Variable(from_vector(ids, {s.batch, s.length}));
    targets_ = Variable(from_vector(targets, {s.batch * s.length}));
  }
  Variable loss() {
    Variable h = (*embed_)(ids_);
    for (TransformerBlock* block : blocks_) h = (*block)(h);
    const Variable logits = F::reshape(forward_last_axis(*head_, h), {s_.batch * s_.length, s_.vocab});
    return F::softmax_cross_entropy(logits, targets_);
  }
  // Forward and backward of the batch, no update.
  void step() { loss().backward(); }
  const std::vector<TransformerBlock*>& blocks() const { return blocks_; }
  void set_all(Recompute r) {
    for (TransformerBlock* block : blocks_) block->set_recompute(r);
  }
  // Every parameter's gradient after one step from cleared gradients, by name.
  std::vector<std::pair<std::string, Tensor>> gradients() {
    cleargrads();
    step();
    std::vector<std::pair<std::string, Tensor>> out;
    for (const auto& [name, p] : namedparams())
      out.emplace_back(name, p.grad().defined() ? p.grad().clone() : Tensor());
    cleargrads();
    return out;
  }

 private:
  Shape_ s_;
  std::shared_ptr<EmbedID> embed_;
  std::vector<TransformerBlock*> blocks_;
  std::shared_ptr<Linear> head_;
  Variable ids_, targets_;
};

void require_identical(const std::vector<std::pair<std::string, Tensor>>& got,
                       const std::vector<std::pair<std::string, Tensor>>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("parameter " << want[i].first);
    REQUIRE(got[i].first == want[i].first);
    REQUIRE(want[i].second.defined());
    REQUIRE(got[i].second.defined());
    REQUIRE(got[i].second.to_vector<double>() == want[i].second.to_vector<double>());
  }
}

std::string setting(Recompute r) {
  return std::string("attention ") + (r.attention ? "on" : "off") + ", mlp " + (r.mlp ? "on" : "off");
}

// The test's models: blocks of dim 32 (4 heads) over [B = 4, T = 64], a vocabulary of 64. With
// every block recomputed whole the step keeps each block's input and output and one block's
// activations at a time: 4 blocks peak at about 32% of their unbudgeted peak, 8 at 22% (a longer
// sequence changes neither: the parameters' gradients are small beside the activations).
const Shape_ kSmall{64, 32, 4, 4, 4, 64};
const Shape_ kDeep{64, 32, 4, 8, 4, 64};

}  // namespace

TEST_CASE("TransformerBlock recompute: every setting gives every parameter's gradient bit for bit", "[recompute]") {
  LanguageModel model(kSmall);
  model.set_all({});
  const auto want = model.gradients();
  for (const Recompute r : {Recompute{false, true}, Recompute{true, false}, Recompute{true, true}}) {
    INFO(setting(r));
    model.set_all(r);
    require_identical(model.gradients(), want);
  }
  // Blocks set differently from each other.
  model.set_all({});
  model.blocks()[1]->set_recompute({true, false});
  model.blocks()[2]->set_recompute({false, true});
  model.blocks()[3]->set_recompute({true, true});
  require_identical(model.gradients(), want);
}

TEST_CASE("plan_recompute: budgets of 25%, 50% and 75% of the unbudgeted peak (8 blocks)", "[recompute]") {
  LanguageModel model(kDeep);
  model.set_all({});
  const auto want = model.gradients();
  const auto step = [&] { model.step(); };
  const std::int64_t unbudgeted = measure_step_peak(model, step);
  REQUIRE(unbudgeted > 0);
  REQUIRE(measure_step_peak(model, step) == unbudgeted);  // the measurement repeats
  model.set_all({true, true});
  const std::int64_t least = measure_step_peak(model, step);
  model.set_all({});
  INFO("unbudgeted peak " << unbudgeted << " B, every block recomputed " << least << " B ("
                          << 100.0 * least / unbudgeted << "%)");
  for (const int percent : {75, 50, 25}) {
    INFO(percent << "% of the unbudgeted peak");
    model.set_all({});
    const std::int64_t budget = unbudgeted * percent / 100;
    const RecomputePlan plan = plan_recompute(model, model.blocks(), budget, step);
    INFO(plan.describe());
    WARN(percent << "%: " << plan.describe() << ", " << plan.measurements << " measurements");
    REQUIRE(plan.budget == budget);
    REQUIRE(plan.unbudgeted_peak == unbudgeted);
    REQUIRE(plan.peak <= budget);
    REQUIRE(plan.peak < unbudgeted);
    REQUIRE(plan.measurements >= 2);
    REQUIRE(plan.blocks.size() == model.blocks().size());
    for (std::size_t b = 0; b < plan.blocks.size(); ++b) REQUIRE(plan.blocks[b] == model.blocks()[b]->recompute());
    const std::int64_t again = measure_step_peak(model, step);
    REQUIRE(again <= budget);
    REQUIRE(again == plan.peak);
    require_identical(model.gradients(), want);
    // The first k branches of the order (every block's MLP, then every block's attention), and
    // one branch fewer does not fit.
    const std::size_t L = plan.blocks.size();
    std::size_t k = 0;
    for (const Recompute& r : plan.blocks) k += (r.mlp ? 1 : 0) + (r.attention ? 1 : 0);
    REQUIRE(k > 0);
    const auto first = [&](std::size_t n) {
      for (std::size_t b = 0; b < L; ++b) model.blocks()[b]->set_recompute({b + L < n, b < n});
    };
    first(k);
    for (std::size_t b = 0; b < L; ++b) REQUIRE(model.blocks()[b]->recompute() == plan.blocks[b]);
    first(k - 1);
    REQUIRE(measure_step_peak(model, step) > budget);
  }
}

TEST_CASE("plan_recompute: a budget below every block recomputed is an error; one the step fits needs nothing",
          "[recompute]") {
  LanguageModel model(kSmall);
  const auto step = [&] { model.step(); };
  model.set_all({});
  const std::int64_t unbudgeted = measure_step_peak(model, step);
  SECTION("1 byte") {
    REQUIRE_THROWS_WITH(plan_recompute(model, model.blocks(), 1, step), Contains("below the step's peak"));
  }
  SECTION("25% of 4 blocks' peak: below their peak recomputed whole") {
    model.set_all({true, true});
    const std::int64_t least = measure_step_peak(model, step);
    model.set_all({});
    INFO("unbudgeted " << unbudgeted << " B, every block recomputed " << least << " B");
    REQUIRE(least > unbudgeted / 4);
    REQUIRE_THROWS_WITH(plan_recompute(model, model.blocks(), unbudgeted / 4, step),
                        Contains("below the step's peak") && Contains(std::to_string(least) + " bytes"));
  }
  SECTION("the unbudgeted peak, and more") {
    for (const std::int64_t budget : {unbudgeted, 2 * unbudgeted}) {
      model.set_all({true, false});  // whatever was set before
      const RecomputePlan plan = plan_recompute(model, model.blocks(), budget, step);
      INFO(plan.describe());
      REQUIRE(plan.measurements == 1);
      REQUIRE(plan.peak == unbudgeted);
      REQUIRE(plan.unbudgeted_peak == unbudgeted);
      for (TransformerBlock* block : model.blocks()) REQUIRE(block->recompute() == Recompute{});
      for (const Recompute& r : plan.blocks) REQUIRE(r == Recompute{});
    }
  }
}
