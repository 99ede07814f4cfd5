#include "training/recompute_budget.h"

#include <cstdio>

#include "core/error.h"
#include "core/storage.h"

namespace tandem {

namespace {

// The k-th cheapest setting: the first k of (block 0's MLP, ..., block L-1's MLP, block 0's
// attention, ..., block L-1's attention) recomputed.
void apply(const std::vector<TransformerBlock*>& blocks, std::size_t k) {
  const std::size_t L = blocks.size();
  for (std::size_t b = 0; b < L; ++b) {
    Recompute r;
    r.mlp = b < k;
    r.attention = b + L < k;
    blocks[b]->set_recompute(r);
  }
}

std::string megabytes(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

}  // namespace

std::int64_t measure_step_peak(Link& model, const std::function<void()>& step, const Device& device) {
  model.cleargrads();
  const std::int64_t before = live_storage_bytes(device);
  reset_peak_live_storage_bytes(device);
  step();
  const std::int64_t peak = peak_live_storage_bytes(device) - before;
  model.cleargrads();
  return peak;
}

std::string RecomputePlan::describe() const {
  std::size_t mlp = 0, attention = 0;
  for (const Recompute& r : blocks) {
    mlp += r.mlp ? 1 : 0;
    attention += r.attention ? 1 : 0;
  }
  return std::to_string(mlp) + " of " + std::to_string(blocks.size()) + " blocks recompute their MLP, " +
         std::to_string(attention) + " their attention: peak " + megabytes(peak) + " within " + megabytes(budget) +
         " (" + megabytes(unbudgeted_peak) + " without recompute)";
}

RecomputePlan plan_recompute(Link& model, const std::vector<TransformerBlock*>& blocks, std::int64_t budget,
                             const std::function<void()>& step, const Device& device,
                             const std::function<bool(bool)>& agree) {
  const char* op = "plan_recompute";
  TANDEM_CHECK(step != nullptr, op, ": needs a step to measure");
  TANDEM_CHECK(budget > 0, op, ": the budget must be positive, got ", budget, " bytes");
  for (TransformerBlock* block : blocks) TANDEM_CHECK(block != nullptr, op, ": a block is null");
  RecomputePlan plan;
  plan.budget = budget;
  const auto measure = [&](std::size_t k) {
    apply(blocks, k);
    ++plan.measurements;
    return measure_step_peak(model, step, device);
  };
  const auto fits = [&](std::int64_t peak) { return agree ? agree(peak <= budget) : peak <= budget; };
  const std::size_t all = 2 * blocks.size();
  plan.unbudgeted_peak = plan.peak = measure(0);
  std::size_t chosen = 0;
  if (!fits(plan.peak)) {
    const std::int64_t least = measure(all);
    TANDEM_CHECK(fits(least), op, ": a budget of ", budget, " bytes (", megabytes(budget),
                 ") is below the step's peak with every one of the ", blocks.size(), " blocks recomputed whole, ",
                 least, " bytes (", megabytes(least), "; ", megabytes(plan.unbudgeted_peak),
                 " without recompute): the rest is parameters' gradients, one block's recompute and what lies outside "
                 "the blocks");
    // The fewest branches that fit: the peak falls as more are recomputed.
    std::size_t low = 0, high = all;  // low does not fit, high does
    std::int64_t high_peak = least;
    while (high - low > 1) {
      const std::size_t mid = (low + high) / 2;
      const std::int64_t peak = measure(mid);
      if (fits(peak)) {
        high = mid;
        high_peak = peak;
      } else {
        low = mid;
      }
    }
    chosen = high;
    plan.peak = high_peak;
  }
  apply(blocks, chosen);
  for (TransformerBlock* block : blocks) plan.blocks.push_back(block->recompute());
  return plan;
}

}  // namespace tandem
