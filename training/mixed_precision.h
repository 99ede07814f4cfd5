// The precisions a trainer offers (the examples' --dtype):
//   f32         everything in f32;
//   mixed_bf16  f32 parameters and optimizer; products and convolutions in bf16 under an
//               AutocastScope (autograd/autocast.h), losses and normalisation in f32;
//   mixed_f16   the same in f16, with dynamic loss scaling (layers/optimizers/loss_scaler.h);
//   bf16        the parameters themselves in bf16 (half their memory), the optimizer's master
//               copies and state in f32 (layers/optimizers/optimizer.h), under the same autocast
//               as mixed_bf16 (losses, softmax and normalisation statistics still in f32);
//   f16         the same in f16, with dynamic loss scaling.
// A trainer calls convert_model(model, precision) before the optimizer's setup and
// apply_precision(optimizer, precision) after it, and runs
// `const AutocastScope scope(precision.autocast);` around trainer.run() (training and evaluation).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "layers/link.h"
#include "layers/optimizers/optimizer.h"

namespace tandem {

struct TrainingPrecision {
  std::string name = "f32";
  std::optional<DType> autocast;    // the scope's dtype; none for f32
  std::optional<DType> parameters;  // the parameters' dtype (bf16, f16); none: as the model built them
  bool loss_scaling = false;
};

// By name; an unknown name is an error that lists the choices.
TrainingPrecision training_precision(const std::string& name);
// "f32|mixed_bf16|mixed_f16|bf16|f16", for help texts.
const char* training_precision_choices();

// Converts the model's floating parameters and buffers to precision.parameters (Link::to(DType)),
// if it names one; before the optimizer's setup.
void convert_model(Link& model, const TrainingPrecision& precision);

// Gives the optimizer a LossScaler when the precision scales the loss. `agree` sums a count over
// the ranks that must skip a step together (model parallelism; LossScalerOptions::agree).
void apply_precision(Optimizer& optimizer, const TrainingPrecision& precision,
                     std::function<double(double)> agree = nullptr);

}  // namespace tandem
