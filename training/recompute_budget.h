// Activation checkpointing by memory budget: the user gives bytes, the planner chooses which
// transformer blocks recompute which branches (TransformerBlock::set_recompute) so that a
// training step's measured peak stays within them.
//
// What the budget bounds: the peak of live tensor bytes on the device during one forward and
// backward, above the bytes live before it (the parameters, the optimizer's state, the batch):
// the activations kept for backward and the gradients. The planner measures it (core/storage.h's
// peak of live bytes) by running `step` with the gradients cleared: first without recompute (the
// unbudgeted peak; nothing changes if that fits), then with every block's MLP branch and then
// attention branch recomputed (in that order: the MLP's activations are the larger share of a
// block's, its recompute the cheaper), searching for the fewest branches whose measured peak
// fits. A budget below the peak with every block recomputed whole is an error naming both.
//
// Each choice is measured, not predicted, so the result holds for the step as given; a step with
// other shapes (a longer sequence, a larger batch) needs its own plan. `step` must not change the
// parameters (forward and backward of a representative batch, no optimizer update); the planner
// clears the model's gradients before and after each run. A pipeline stage plans with its own
// budget around its own step. When `step` is collective (a pipeline, data parallelism), every rank
// must take the same decisions: `agree` combines each rank's "this fits" into one answer for all
// (true only if true on every rank: an allreduce), and every rank then runs the same steps and
// settles on the same number of branches.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "layers/link.h"
#include "layers/links/transformer.h"

namespace tandem {

struct RecomputePlan {
  std::vector<Recompute> blocks;     // per block, in the order given
  std::int64_t budget = 0;           // bytes
  std::int64_t unbudgeted_peak = 0;  // the step's peak without recompute
  std::int64_t peak = 0;             // measured with the plan
  int measurements = 0;              // steps run to choose
  // "2 of 4 blocks recompute their MLP, 0 their attention: peak 12.3 MB within 13.0 MB (45.1 MB
  // without recompute)"
  std::string describe() const;
};

// Chooses and sets the blocks' recompute (see above). model: holds the blocks' parameters (its
// gradients are cleared around every measurement).
RecomputePlan plan_recompute(Link& model, const std::vector<TransformerBlock*>& blocks, std::int64_t budget,
                             const std::function<void()>& step, const Device& device = Device::cpu(),
                             const std::function<bool(bool)>& agree = nullptr);

// The peak of live tensor bytes on `device` during step(), above those live before it, with the
// model's gradients cleared before and after.
std::int64_t measure_step_peak(Link& model, const std::function<void()>& step, const Device& device = Device::cpu());

}  // namespace tandem
