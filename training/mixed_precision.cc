#include "training/mixed_precision.h"

#include <memory>

#include "core/error.h"

namespace tandem {

const char* training_precision_choices() { return "f32|mixed_bf16|mixed_f16|bf16|f16"; }

TrainingPrecision training_precision(const std::string& name) {
  TrainingPrecision precision;
  precision.name = name;
  if (name == "f32") return precision;
  if (name == "mixed_bf16") {
    precision.autocast = DType::bf16;
    return precision;
  }
  if (name == "mixed_f16") {
    precision.autocast = DType::f16;
    precision.loss_scaling = true;
    return precision;
  }
  if (name == "bf16" || name == "f16") {
    precision.autocast = precision.parameters = name == "bf16" ? DType::bf16 : DType::f16;
    precision.loss_scaling = name == "f16";
    return precision;
  }
  TANDEM_FAIL("--dtype: unknown precision '", name, "' (choose ", training_precision_choices(), ")");
}

void convert_model(Link& model, const TrainingPrecision& precision) {
  if (precision.parameters) model.to(*precision.parameters);
}

void apply_precision(Optimizer& optimizer, const TrainingPrecision& precision, std::function<double(double)> agree) {
  if (!precision.loss_scaling) return;
  LossScalerOptions options;
  options.agree = std::move(agree);
  optimizer.set_loss_scaler(std::make_shared<LossScaler>(options));
}

}  // namespace tandem
