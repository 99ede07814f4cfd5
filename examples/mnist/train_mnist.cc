// Trains Chainer's MNIST MLP (784-1000-1000-10, ReLU, Adam, batch 100) on Fashion-MNIST (or
// MNIST: --data-dir / $TANDEM_MNIST_DIR) with a progress bar, a per-epoch report of
// training and validation loss/accuracy, a JSON log, and a snapshot every epoch to resume from.
//
//   bazel run //examples/mnist:train_mnist -- --epoch 10 --out /tmp/mnist
//   bazel run //examples/mnist:train_mnist -- --epoch 20 --out /tmp/mnist --resume /tmp/mnist/snapshot_iter_6000.npz
//   bazel run //examples/mnist:train_mnist -- --dtype mixed_bf16   # products in bf16 (training/mixed_precision.h)
#include <cstdio>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "data/data.h"
#include "examples/common/flags.h"
#include "examples/mnist/mnist_common.h"
#include "layers/links/classifier.h"
#include "layers/links/linear.h"
#include "layers/optimizers/adam.h"
#include "training/extensions/dump_graph.h"
#include "training/extensions/evaluator.h"
#include "training/extensions/reporting.h"
#include "training/mixed_precision.h"
#include "training/trainer.h"

using namespace tandem;

int main(int argc, char** argv) {
  try {
    examples::Flags flags("train_mnist", "Chainer's MNIST MLP on Fashion-MNIST (or MNIST).");
    examples::add_training_flags(flags, "examples per minibatch", "directory for the log and snapshots",
                                 "snapshot to resume from ('latest': the newest one in --out)");
    flags.add_int("frequency", 1, "snapshot every this many epochs");
    examples::add_dtype_flag(flags);
    if (!flags.parse(argc, argv)) return 0;
    const Device device = examples::training_device(flags, "train_mnist");
    const long long batchsize = flags.get_int("batchsize"), epochs = flags.get_int("epoch");
    const long long units = flags.get_int("unit"), frequency = flags.get_int("frequency");
    TANDEM_CHECK(batchsize > 0 && epochs > 0 && units > 0 && frequency > 0,
                 "train_mnist: --batchsize, --epoch, --unit and --frequency must be positive");

    manual_seed(static_cast<std::uint64_t>(flags.get_int("seed")));
    auto [train, test] = examples::get_mnist(flags);
    std::string data_dir = flags.get_string("data-dir");
    if (data_dir.empty()) data_dir = default_mnist_dir();
    std::printf("train_mnist: %lld train / %lld test examples from %s\n", static_cast<long long>(train->size()),
                static_cast<long long>(test->size()), data_dir.c_str());
    const TrainingPrecision precision = training_precision(flags.get_string("dtype"));
    std::printf("# unit: %lld  # minibatch: %lld  # epoch: %lld  # dtype: %s\n", units, batchsize, epochs,
                precision.name.c_str());

    auto model = std::make_shared<Classifier>(std::make_shared<examples::MLP>(units, 10));
    model->to(device);
    auto optimizer = std::make_shared<Adam>();
    convert_model(*model, precision);
    optimizer->setup(model);
    apply_precision(*optimizer, precision);
    auto train_iter = std::make_shared<SerialIterator>(train, batchsize, true, true,
                                                       static_cast<std::uint64_t>(flags.get_int("seed")));
    auto test_iter = std::make_shared<SerialIterator>(test, batchsize, false, false);

    auto updater = std::make_shared<StandardUpdater>(train_iter, optimizer);
    Trainer trainer(updater, Trigger::epochs(epochs), flags.get_string("out"), model);
    trainer.extend(std::make_shared<Evaluator>(test_iter, model));
    examples::extend_with_report(trainer);
    trainer.extend(std::make_shared<DumpGraph>("main/loss"));  // out/cg.dot (and cg.svg): the graph of a step
    trainer.extend(std::make_shared<SnapshotWriter>(), Trigger::epochs(frequency));

    std::string resume = flags.get_string("resume");
    if (resume == "latest") {
      resume = latest_snapshot(flags.get_string("out"));
      TANDEM_CHECK(!resume.empty(), "train_mnist: --resume latest: no snapshot in ", flags.get_string("out"));
    }
    if (!resume.empty()) {
      trainer.load_snapshot(resume);  // the lazily sized layers take their shapes from it
      std::printf("resumed from %s at iteration %lld\n", resume.c_str(), static_cast<long long>(trainer.iteration()));
    }
    const AutocastScope autocast(precision.autocast);
    trainer.run();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
