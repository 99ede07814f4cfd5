// What the MNIST trainers share: Chainer's MLP, the common flags, and the report (log,
// per-epoch table, progress bar) that rank 0 (or the only process) prints.
#pragma once

#include <memory>
#include <string>

#include "autograd/functions.h"
#include "examples/common/flags.h"
#include "layers/links/linear.h"
#include "training/trainer.h"

namespace tandem::examples {

// 784-units-units-out (the input size is inferred), ReLU between layers.
class MLP : public Chain {
 public:
  MLP(std::int64_t units, std::int64_t out);
  std::string type_name() const override { return "MLP"; }
  Variable forward(const Variable& x) override;

 private:
  std::shared_ptr<Linear> l1_, l2_, l3_;
};

// The defaults of the flags whose values differ between models.
struct TrainingDefaults {
  long long batchsize = 100, epoch = 10, unit = 1000;
  std::string unit_help = "units per hidden layer";
};

// --batchsize --epoch --unit --out --resume --data-dir --seed --gpu, with the trainer's own
// wording for the three whose meaning differs between trainers.
void add_training_flags(Flags& flags, const std::string& batchsize_help, const std::string& out_help,
                        const std::string& resume_help, const TrainingDefaults& defaults = {});


// LogReport, PrintReport of loss/accuracy (training and validation) and a ProgressBar.
void extend_with_report(Trainer& trainer);

}  // namespace tandem::examples
