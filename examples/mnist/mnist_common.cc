#include "examples/mnist/mnist_common.h"

#include "training/extensions/plot_report.h"
#include "training/extensions/reporting.h"

namespace tandem::examples {

MLP::MLP(std::int64_t units, std::int64_t out) {
  l1_ = add_link("l1", std::make_shared<Linear>(-1, units));
  l2_ = add_link("l2", std::make_shared<Linear>(-1, units));
  l3_ = add_link("l3", std::make_shared<Linear>(-1, out));
}

Variable MLP::forward(const Variable& x) {
  const Variable h1 = F::relu((*l1_)(x));
  const Variable h2 = F::relu((*l2_)(h1));
  return (*l3_)(h2);
}

MLPFirstLayer::MLPFirstLayer(std::int64_t units) { l1 = add_link("l1", std::make_shared<Linear>(784, units)); }

Variable MLPFirstLayer::forward(const Variable& x) { return F::relu((*l1)(x)); }

MLPLastLayers::MLPLastLayers(std::int64_t units) {
  l2 = add_link("l2", std::make_shared<Linear>(-1, units));
  l3 = add_link("l3", std::make_shared<Linear>(-1, 10));
}

Variable MLPLastLayers::forward(const Variable& h) { return (*l3)(F::relu((*l2)(h))); }

void add_training_flags(Flags& flags, const std::string& batchsize_help, const std::string& out_help,
                        const std::string& resume_help, const TrainingDefaults& defaults) {
  flags.add_int("batchsize", defaults.batchsize, batchsize_help);
  flags.add_int("epoch", defaults.epoch, "epochs to train");
  flags.add_int("unit", defaults.unit, defaults.unit_help);
  flags.add_string("out", "result", out_help);
  flags.add_string("resume", "", resume_help);
  flags.add_string("data-dir", "", "directory of the MNIST-format IDX files; empty: $TANDEM_MNIST_DIR, else "
                   "/usr/share/datasets/fashion-mnist");
  flags.add_int("seed", 0, "random seed (initialisation and shuffling)");
  flags.add_int("gpu", -1, "GPU to use, -1 for the CPU (needs a build with --config=cuda)");
}

std::pair<DatasetPtr, DatasetPtr> get_mnist(const Flags& flags, int ndim) {
  MnistOptions options;
  options.dir = flags.get_string("data-dir");
  options.ndim = ndim;
  auto [train, test] = tandem::get_mnist(options);
  return {train, test};
}

void extend_with_report(Trainer& trainer) {
  auto log = std::make_shared<LogReport>();
  trainer.extend(log);
  trainer.extend(std::make_shared<PrintReport>(
      log, std::vector<std::string>{"epoch", "main/loss", "validation/main/loss", "main/accuracy",
                                    "validation/main/accuracy", "elapsed_time"}));
  trainer.extend(std::make_shared<ProgressBar>());
  // out/loss.png and out/accuracy.png (and .svg, .dat), redrawn every epoch (needs gnuplot).
  trainer.extend(std::make_shared<PlotReport>(std::vector<std::string>{"main/loss", "validation/main/loss"}, "epoch",
                                              Trigger::epochs(1), "loss.png"));
  trainer.extend(std::make_shared<PlotReport>(std::vector<std::string>{"main/accuracy", "validation/main/accuracy"},
                                              "epoch", Trigger::epochs(1), "accuracy.png"));
}

}  // namespace tandem::examples
