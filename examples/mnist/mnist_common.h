// What the MNIST trainers share: Chainer's MLP, the common flags, and the report (log,
// per-epoch table, progress bar, plots) that rank 0 (or the only process) prints.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "autograd/functions.h"
#include "data/data.h"
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

// ChainerMN's model-parallel split of the MLP over two ranks (the model-parallel and
// dual-parallel trainers): rank 0 runs MLPFirstLayer, sends to rank 1 and receives the logits
// back through an Identity link; rank 1 runs MLPLastLayers on what it receives and sends them
// back.
class MLPFirstLayer : public Chain {  // Linear(784, units) + ReLU
 public:
  explicit MLPFirstLayer(std::int64_t units);
  Variable forward(const Variable& x) override;
  std::shared_ptr<Linear> l1;
};
class MLPLastLayers : public Chain {  // Linear(-1, units) + ReLU, Linear(-1, 10)
 public:
  explicit MLPLastLayers(std::int64_t units);
  Variable forward(const Variable& h) override;
  std::shared_ptr<Linear> l2, l3;
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


// The MNIST-format training and test sets from --data-dir (empty: $TANDEM_MNIST_DIR, else
// Fashion-MNIST), each image with `ndim` axes (1: [784]; 3: [1, 28, 28]).
std::pair<DatasetPtr, DatasetPtr> get_mnist(const Flags& flags, int ndim = 1);

// LogReport, PrintReport of loss/accuracy (training and validation), a ProgressBar, and their
// plots against the epoch (PlotReport: loss.png, accuracy.png in the trainer's out directory).
void extend_with_report(Trainer& trainer);

}  // namespace tandem::examples
