// Dynamic loss scaling for f16 training (PyTorch's GradScaler, with its rules and defaults): the
// loss is multiplied by a scale before backward, so that small gradients do not flush to zero
// in f16; the optimizer divides the gradients by it before its hooks and rules. A step whose
// gradients hold an Inf or NaN is skipped (no update, t() unchanged) and the scale shrinks by
// backoff_factor; after growth_interval clean steps in a row it grows by growth_factor.
// bf16 has f32's range and needs none of this.
//
//   auto scaler = std::make_shared<LossScaler>();
//   optimizer.set_loss_scaler(scaler);
//   optimizer.update(lossfun);  // scales the loss, unscales the gradients, skips or updates
//
// A caller that runs backward itself (a pipeline) calls scaler->scale(loss).backward(), then
// optimizer.update(). Where the parameters are spread over ranks that must skip together
// (tensor or pipeline parallelism), `agree` sums the count of non-finite gradients over them;
// a sharded data-parallel optimizer (ZeRO) is agreed through its own GradientSync.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"

namespace tandem {

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  // The sum of a count over every rank whose decision must match this one's; null: this rank only.
  std::function<double(double)> agree;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});

  // loss * scale(), differentiably (the value to call backward on).
  Variable scale(const Variable& loss) const;
  double scale() const { return scale_; }
  // Clean steps since the last change of the scale.
  std::int64_t growth_tracker() const { return growth_tracker_; }
  // Steps skipped so far for non-finite gradients.
  std::int64_t skipped() const { return skipped_; }

  // Divides every gradient by the scale (16-bit gradients become f32 ones, so none underflows)
  // and returns how many hold an Inf or NaN, summed by `agree`.
  double unscale(std::vector<std::pair<std::string, Variable>>& params) const;
  // GradScaler.update(): the rules above, after a step with `nonfinite` bad gradients.
  void update(double nonfinite);

  // "scale" (f64) and "growth_tracker", "skipped" (i64), for snapshots.
  std::vector<std::pair<std::string, Tensor>> state_dict() const;
  void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& entries);

 private:
  LossScalerOptions options_;
  double scale_;
  std::int64_t growth_tracker_ = 0;
  std::int64_t skipped_ = 0;
};

}  // namespace tandem
