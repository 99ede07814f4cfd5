// Activation checkpointing by memory budget (training/recompute_budget.h) on a character-LM-shaped
// model: what each budget's plan costs in step time and what it saves in peak memory, beside the
// fixed settings (every block's MLP, attention, or both recomputed).
//
//   OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE bazel run -c opt //bench:recompute_budget_bench
//
// The model, built here: EmbedID(128, 128) + PositionalEmbedding(T, 128) + L = 12
// TransformerBlock(128, heads 4, mlp_ratio 4) + LayerNormalization + Linear(128 -> 128) head, the
// softmax cross-entropy over every position; a fixed random batch of ids and targets i32 [16, 256];
// f32 on the CPU. A step: cleargrads, forward, loss, backward (no optimizer).
//
// Per setting one line:
//   name=tandem.recompute.<none|budget75|budget50|budget25|mlp|attention|block> threads=N L=12
//   B=16 T=256 dim=128 budget_mb=.. peak_mb=.. peak_ratio=.. mlp_blocks=.. attention_blocks=..
//   median_ms=.. time_ratio=.. (then min_ms, max_ms, iters, plan_steps, omp_wait)
//   budget_mb: the budget given to plan_recompute (75%, 50%, 25% of the unbudgeted peak P; for
//           the fixed settings and none, 0: no budget);
//   peak_mb: the step's peak of live tensor bytes above those live before it (measure_step_peak,
//           MB = 10^6 bytes), measured again after planning, independently of the planner's
//           figure (it must be within the budget, or the benchmark stops); peak_ratio = peak / P;
//   median_ms: a step's median time after 2 warm-up steps (7 timed, BENCH_SCALE scales, at
//           least 5); time_ratio = median / none's median;
//   plan_steps: the steps the planner ran to choose (0 for the fixed settings).
// A budget below what recomputing every block whole reaches prints an "infeasible" line with
// that minimum (the planner's error) instead of the budget's line.
// Before the budgets are timed, the gradients of the 25% plan (or, if it is infeasible, every
// block recomputed whole) must be bit-identical (==) to those of the step without recompute, for
// every parameter, or the benchmark stops.
// Environment: BENCH_SCALE (timed steps), OMP_NUM_THREADS (printed as threads=); for quick trials
// BENCH_LAYERS and BENCH_BATCH change L and B (defaults 12 and 16).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "bench/bench_util.h"
#include "core/error.h"
#include "core/random.h"
#include "core/tensor.h"
#include "layers/link.h"
#include "layers/links/embed_id.h"
#include "layers/links/layer_normalization.h"
#include "layers/links/linear.h"
#include "layers/links/positional_embedding.h"
#include "layers/links/transformer.h"
#include "training/recompute_budget.h"

using namespace tandem;

namespace {

constexpr std::int64_t kVocab = 128, kDim = 128, kHeads = 4, kMlpRatio = 4, kT = 256;
constexpr int kWarmup = 2;

std::int64_t env_int(const char* name, std::int64_t fallback) {
  const char* e = std::getenv(name);
  return e && std::atoll(e) > 0 ? std::atoll(e) : fallback;
}

int threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// The char LM's shape in one chain: ids [B, T] -> logits [B * T, vocab].
class CharLM : public Chain {
 public:
  explicit CharLM(std::int64_t layers) {
    token_ = add_link("token", std::make_shared<EmbedID>(kVocab, kDim));
    position_ = add_link("position", std::make_shared<PositionalEmbedding>(kT, kDim));
    auto list = add_link("blocks", std::make_shared<ChainList>());
    TransformerBlockOptions options;
    options.heads = kHeads;
    options.mlp_ratio = kMlpRatio;
    for (std::int64_t i = 0; i < layers; ++i)
      blocks_.push_back(list->append(std::make_shared<TransformerBlock>(kDim, options)).get());
    norm_ = add_link("norm", std::make_shared<LayerNormalization>(kDim, 1e-5));
    head_ = add_link("head", std::make_shared<Linear>(kDim, kVocab));
  }
  std::string type_name() const override { return "CharLM"; }

  Variable loss(const Variable& ids, const Variable& targets) {
    Variable h = position_->forward(token_->forward(ids));
    for (TransformerBlock* block : blocks_) h = block->forward(h);
    const Variable rows = F::reshape(h, {-1, kDim});
    return F::softmax_cross_entropy(head_->forward(norm_->forward(rows)), F::reshape(targets, {-1}));
  }
  const std::vector<TransformerBlock*>& blocks() const { return blocks_; }

 private:
  std::shared_ptr<EmbedID> token_;
  std::shared_ptr<PositionalEmbedding> position_;
  std::shared_ptr<LayerNormalization> norm_;
  std::shared_ptr<Linear> head_;
  std::vector<TransformerBlock*> blocks_;
};

Variable random_ids(std::int64_t B, Generator& gen) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(B * kT));
  for (auto& id : ids) id = static_cast<std::int32_t>(gen.next() % static_cast<std::uint64_t>(kVocab));
  return Variable(from_vector(ids, {B, kT}));
}

void set_all(const std::vector<TransformerBlock*>& blocks, Recompute r) {
  for (TransformerBlock* block : blocks) block->set_recompute(r);
}

void count(const std::vector<TransformerBlock*>& blocks, int& mlp, int& attention) {
  mlp = attention = 0;
  for (TransformerBlock* block : blocks) {
    mlp += block->recompute().mlp ? 1 : 0;
    attention += block->recompute().attention ? 1 : 0;
  }
}

// Every parameter's gradient after one step, by name.
std::vector<std::pair<std::string, std::vector<float>>> gradients(CharLM& model, const std::function<void()>& step) {
  step();
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const auto& [name, p] : model.namedparams()) {
    TANDEM_CHECK(p.grad().defined(), "recompute_budget_bench: no gradient for ", name);
    out.emplace_back(name, p.grad().to_vector<float>());
  }
  model.cleargrads();
  return out;
}

struct Bench {
  CharLM& model;
  std::function<void()> step;
  std::int64_t B, unbudgeted;
  double none_ms = 0;

  // Measures the current setting's peak and time again and prints its line.
  void report(const std::string& id, std::int64_t budget, int plan_steps) {
    const std::int64_t peak = measure_step_peak(model, step);
    if (budget > 0 && peak > budget) {
      std::fflush(stdout);
      std::fprintf(stderr,
                   "recompute_budget_bench: %s: re-measured peak %lld bytes exceeds the budget %lld bytes (the plan "
                   "said it fits)\n",
                   id.c_str(), static_cast<long long>(peak), static_cast<long long>(budget));
      std::exit(1);
    }
    const bench::Stats s = bench::measure(kWarmup, std::max(5, bench::scaled(7)), step);
    model.cleargrads();
    if (id == "none") none_ms = s.median_ms;
    int mlp = 0, attention = 0;
    count(model.blocks(), mlp, attention);
    const char* wait = std::getenv("OMP_WAIT_POLICY");
    std::printf(
        "name=tandem.recompute.%s threads=%d L=%zu B=%lld T=%lld dim=%lld budget_mb=%.1f peak_mb=%.1f "
        "peak_ratio=%.3f mlp_blocks=%d attention_blocks=%d median_ms=%.1f time_ratio=%.3f min_ms=%.1f max_ms=%.1f "
        "iters=%d plan_steps=%d lib=tandem omp_wait=%s\n",
        id.c_str(), threads(), model.blocks().size(), static_cast<long long>(B), static_cast<long long>(kT),
        static_cast<long long>(kDim), budget / 1e6, peak / 1e6, static_cast<double>(peak) / unbudgeted, mlp, attention,
        s.median_ms, s.median_ms / none_ms, s.min_ms, s.max_ms, s.iters, plan_steps, wait ? wait : "default");
    std::fflush(stdout);
  }
};

int run() {
  const std::int64_t L = env_int("BENCH_LAYERS", 12), B = env_int("BENCH_BATCH", 16);
  manual_seed(0);
  CharLM model(L);
  Generator gen(1);
  const Variable ids = random_ids(B, gen), targets = random_ids(B, gen);
  const std::function<void()> step = [&] {
    model.cleargrads();
    const Variable loss = model.loss(ids, targets);
    loss.backward();
  };
  const std::vector<TransformerBlock*>& blocks = model.blocks();

  // Without recompute: P and the reference gradients.
  set_all(blocks, {});
  const auto reference = gradients(model, step);
  Bench bench{model, step, B, measure_step_peak(model, step)};
  bench.report("none", 0, 0);

  // The budgets.
  struct Planned {
    std::string id;
    std::int64_t budget;
    bool feasible = false;
    std::vector<Recompute> plan;
    int steps = 0;
  };
  std::vector<Planned> budgets;
  for (int percent : {75, 50, 25})
    budgets.push_back({"budget" + std::to_string(percent), bench.unbudgeted * percent / 100});
  for (Planned& p : budgets) {
    try {
      const RecomputePlan plan = plan_recompute(model, blocks, p.budget, step);
      p.feasible = true;
      p.plan = plan.blocks;
      p.steps = plan.measurements;
      std::printf("plan %s: %s (%d measured steps)\n", p.id.c_str(), plan.describe().c_str(), plan.measurements);
    } catch (const std::exception& e) {
      set_all(blocks, {true, true});
      const std::int64_t least = measure_step_peak(model, step);
      std::printf(
          "infeasible name=tandem.recompute.%s threads=%d L=%lld B=%lld T=%lld dim=%lld budget_mb=%.1f "
          "min_peak_mb=%.1f min_peak_ratio=%.3f (every block recomputed whole; planner: %s)\n",
          p.id.c_str(), threads(), static_cast<long long>(L), static_cast<long long>(B), static_cast<long long>(kT),
          static_cast<long long>(kDim), p.budget / 1e6, least / 1e6, static_cast<double>(least) / bench.unbudgeted,
          e.what());
    }
    std::fflush(stdout);
  }

  // Bit-identical gradients: the 25% plan (or every block whole, if that budget is infeasible).
  {
    const Planned& p = budgets.back();
    if (p.feasible) {
      for (std::size_t b = 0; b < blocks.size(); ++b) blocks[b]->set_recompute(p.plan[b]);
    } else {
      set_all(blocks, {true, true});
    }
    const auto recomputed = gradients(model, step);
    TANDEM_CHECK(recomputed.size() == reference.size(), "recompute_budget_bench: parameter counts differ");
    for (std::size_t i = 0; i < reference.size(); ++i)
      TANDEM_CHECK(recomputed[i].first == reference[i].first && recomputed[i].second == reference[i].second,
                   "recompute_budget_bench: the gradient of ", reference[i].first, " with ",
                   p.feasible ? p.id : std::string("every block recomputed"),
                   " differs from the step without recompute");
    std::printf("check: %zu parameters' gradients bit-identical to no recompute under %s\n", reference.size(),
                p.feasible ? p.id.c_str() : "every block recomputed whole");
    std::fflush(stdout);
  }

  for (const Planned& p : budgets) {
    if (!p.feasible) continue;
    for (std::size_t b = 0; b < blocks.size(); ++b) blocks[b]->set_recompute(p.plan[b]);
    bench.report(p.id, p.budget, p.steps);
  }

  // The fixed settings.
  set_all(blocks, {false, true});
  bench.report("mlp", 0, 0);
  set_all(blocks, {true, false});
  bench.report("attention", 0, 0);
  set_all(blocks, {true, true});
  bench.report("block", 0, 0);
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "recompute_budget_bench: %s\n", e.what());
    return 1;
  }
}
