#include "layers/optimizers/loss_scaler.h"

#include <cmath>

#include "autograd/functions/arithmetic.h"
#include "core/ops.h"

namespace tandem {

LossScaler::LossScaler(LossScalerOptions options) : options_(std::move(options)), scale_(options_.init_scale) {
  TANDEM_CHECK(std::isfinite(scale_) && scale_ > 0, "LossScaler: init_scale must be positive and finite, got ", scale_);
  TANDEM_CHECK(options_.growth_factor > 1, "LossScaler: growth_factor must exceed 1, got ", options_.growth_factor);
  TANDEM_CHECK(options_.backoff_factor > 0 && options_.backoff_factor < 1,
               "LossScaler: backoff_factor must be in (0, 1), got ", options_.backoff_factor);
  TANDEM_CHECK(options_.growth_interval >= 1, "LossScaler: growth_interval must be at least 1, got ",
               options_.growth_interval);
}

Variable LossScaler::scale(const Variable& loss) const { return functions::mul(loss, scale_); }

double LossScaler::unscale(std::vector<std::pair<std::string, Variable>>& params) const {
  const double inverse = 1.0 / scale_;
  double nonfinite = 0;
  for (auto& [name, param] : params) {
    if (!param.grad().defined()) continue;
    Tensor grad = param.grad();
    if (is_half(grad.dtype())) grad = grad.to(DType::f32);
    grad = mul(grad, inverse);
    // x * 0 is 0 for finite x and NaN otherwise: one pass decides.
    if (sum(mul(grad, 0.0)).item() != 0.0) ++nonfinite;
    param.set_grad(grad);
  }
  return options_.agree ? options_.agree(nonfinite) : nonfinite;
}

void LossScaler::update(double nonfinite) {
  if (nonfinite > 0) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    ++skipped_;
    return;
  }
  if (++growth_tracker_ < options_.growth_interval) return;
  growth_tracker_ = 0;
  // As GradScaler: a growth that would overflow the scale is not taken.
  if (std::isfinite(scale_ * options_.growth_factor)) scale_ *= options_.growth_factor;
}

std::vector<std::pair<std::string, Tensor>> LossScaler::state_dict() const {
  return {{"scale", full({}, scale_, DType::f64)},
          {"growth_tracker", full({}, static_cast<double>(growth_tracker_), DType::i64)},
          {"skipped", full({}, static_cast<double>(skipped_), DType::i64)}};
}

void LossScaler::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& entries) {
  double scale = -1;
  std::int64_t tracker = -1, skipped = -1;
  for (const auto& [key, tensor] : entries) {
    TANDEM_CHECK(tensor.numel() == 1, "LossScaler: state '", key, "' must be a scalar, got ", tensor.description());
    if (key == "scale") scale = tensor.item();
    else if (key == "growth_tracker") tracker = static_cast<std::int64_t>(tensor.item());
    else if (key == "skipped") skipped = static_cast<std::int64_t>(tensor.item());
    else TANDEM_FAIL("LossScaler: unexpected state entry '", key, "'");
  }
  TANDEM_CHECK(std::isfinite(scale) && scale > 0, "LossScaler: the saved state has no positive finite 'scale'");
  TANDEM_CHECK(tracker >= 0 && tracker < options_.growth_interval && skipped >= 0, "LossScaler: saved growth_tracker ",
               tracker, " (growth_interval ", options_.growth_interval, ") or skipped ", skipped, " is out of range");
  scale_ = scale;
  growth_tracker_ = tracker;
  skipped_ = skipped;
}

}  // namespace tandem
