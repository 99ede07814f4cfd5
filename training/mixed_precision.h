// The precisions a trainer offers (the examples' --dtype):
//   f32         everything in f32;
//   mixed_bf16  f32 parameters and optimizer; products and convolutions in bf16 under an
//               AutocastScope (autograd/autocast.h), losses and normalisation in f32;
//   mixed_f16   the same in f16, with dynamic loss scaling (layers/optimizers/loss_scaler.h).
// A trainer runs `const AutocastScope scope(precision.autocast);` around trainer.run() (training
// and evaluation), after apply_precision(optimizer, precision).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "layers/optimizers/optimizer.h"

namespace tandem {

struct TrainingPrecision {
  std::string name = "f32";
  std::optional<DType> autocast;  // the scope's dtype; none for f32
  bool loss_scaling = false;
};

// By name; an unknown name is an error that lists the choices.
TrainingPrecision training_precision(const std::string& name);
// "f32|mixed_bf16|mixed_f16", for help texts.
const char* training_precision_choices();

// Gives the optimizer a LossScaler when the precision scales the loss. `agree` sums a count over
// the ranks that must skip a step together (model parallelism; LossScalerOptions::agree).
void apply_precision(Optimizer& optimizer, const TrainingPrecision& precision,
                     std::function<double(double)> agree = nullptr);

}  // namespace tandem
