// A VGG-style CNN whose convolutions are split by output channel over the ranks
// (ParallelConvolution2D), on Fashion-MNIST (or MNIST), like ChainerMN's parallel_convolution
// example. Every rank sees the same batch (the multi-node iterator broadcasts rank 0's), holds
// its share of every convolution's channels and a replica of the classifier head, and computes
// the same loss; a plain Adam keeps the replicas equal. On one rank it is the ordinary CNN, with
// the same initial weights (the same seed), so the two runs can be compared directly:
//
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/cnn/train_parallel_convolution --epoch 3
//   /usr/bin/mpiexec.mpich -n 1 bazel-bin/examples/cnn/train_parallel_convolution --epoch 3
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "comm/multi_node_data/multi_node_iterator.h"
#include "comm/multi_node_links/parallel_convolution_2d.h"
#include "comm/multi_node_training/multi_node_snapshot.h"
#include "data/data.h"
#include "examples/common/flags.h"
#include "examples/mnist/mnist_common.h"
#include "examples/mnist/multi_rank.h"
#include "layers/links/classifier.h"
#include "layers/links/linear.h"
#include "layers/optimizers/adam.h"
#include "training/extensions/evaluator.h"
#include "training/extensions/reporting.h"
#include "training/mixed_precision.h"
#include "training/trainer.h"

using namespace tandem;

namespace {

// Two blocks of two 3x3 convolutions (width, width, then 2 width, 2 width channels), each
// block ending in 2x2 max pooling (28 -> 14 -> 7), then Linear + ReLU + Linear to 10 classes.
class ParallelVGG : public Chain {
 public:
  ParallelVGG(const CommunicatorPtr& comm, std::int64_t width) {
    const auto conv3x3 = Convolution2DOptions::make(3, 1, 1);
    c1 = add_link("c1", std::make_shared<ParallelConvolution2D>(comm, 1, width, conv3x3));
    c2 = add_link("c2", std::make_shared<ParallelConvolution2D>(comm, width, width, conv3x3));
    c3 = add_link("c3", std::make_shared<ParallelConvolution2D>(comm, width, 2 * width, conv3x3));
    c4 = add_link("c4", std::make_shared<ParallelConvolution2D>(comm, 2 * width, 2 * width, conv3x3));
    fc1 = add_link("fc1", std::make_shared<Linear>(2 * width * 7 * 7, 8 * width));
    fc2 = add_link("fc2", std::make_shared<Linear>(8 * width, 10));
  }
  Variable forward(const Variable& x) override {
    Variable h = F::relu((*c2)(F::relu((*c1)(x))));
    h = F::max_pooling_2d(h, 2);
    h = F::relu((*c4)(F::relu((*c3)(h))));
    h = F::max_pooling_2d(h, 2);
    return (*fc2)(F::relu((*fc1)(h)));
  }
  std::shared_ptr<ParallelConvolution2D> c1, c2, c3, c4;
  std::shared_ptr<Linear> fc1, fc2;
};

// The first `size` examples of `dataset` (all of them when size is 0).
DatasetPtr first_examples(DatasetPtr dataset, long long size) {
  if (size <= 0 || size >= dataset->size()) return dataset;
  return split_dataset(dataset, size).first;
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags(
      "train_parallel_convolution",
      "A VGG-style CNN with channel-parallel convolutions over N ranks, on Fashion-MNIST (or MNIST).\n"
      "Run with: /usr/bin/mpiexec.mpich -n N train_parallel_convolution [flags] (N = 1 for comparison)");
  examples::TrainingDefaults defaults;
  defaults.epoch = 3;
  defaults.unit = 16;
  defaults.unit_help = "channels of the first convolutions (then twice as many); at least one per rank";
  examples::add_training_flags(flags, "examples per minibatch (every rank sees the whole batch)",
                               "directory for the log and snapshots (rank R > 0 writes to <out>/rank<R>)",
                               "'latest': continue from the newest snapshot that every rank completed", defaults);
  flags.add_int("train-size", 0, "train on the first this many examples (0: all)");
  flags.add_int("test-size", 0, "evaluate on the first this many test examples (0: all)");
  examples::add_dtype_flag(flags);
  examples::add_communicator_flag(flags);
  examples::add_checkpoint_flags(flags);
  const int status =
      examples::parse_command_line(flags, argc, argv, "train_parallel_convolution", {"batchsize", "epoch", "unit"});
  if (status >= 0) return status;
  // From here an exception on one rank aborts every rank (the communicator's handler).
  auto comm = create_communicator(flags.get_string("communicator"));
  const int rank = comm->rank();
  const long long batchsize = flags.get_int("batchsize"), epochs = flags.get_int("epoch"),
                  width = flags.get_int("unit");
  TANDEM_CHECK(width >= comm->size(), "train_parallel_convolution: --unit ", width, " gives fewer channels than the ",
               comm->size(), " ranks");
  const auto seed = static_cast<std::uint64_t>(flags.get_int("seed"));

  // Only rank 0 reads the data; the multi-node iterators broadcast its batches.
  std::shared_ptr<Iterator> train_actual, test_actual;
  if (rank == 0) {
    auto [mnist_train, mnist_test] = examples::get_mnist(flags, /*ndim=*/3);
    const DatasetPtr train = first_examples(mnist_train, flags.get_int("train-size"));
    const DatasetPtr test = first_examples(mnist_test, flags.get_int("test-size"));
    std::printf(
        "train_parallel_convolution: %d rank(s); %lld train / %lld test examples; # unit: %lld  "
        "# minibatch: %lld  # epoch: %lld  # dtype: %s\n",
        comm->size(), static_cast<long long>(train->size()), static_cast<long long>(test->size()), width, batchsize,
        epochs, flags.get_string("dtype").c_str());
    train_actual = std::make_shared<SerialIterator>(train, batchsize, true, true, seed);
    test_actual = std::make_shared<SerialIterator>(test, batchsize, false, false);
  }
  auto train_iter = std::make_shared<MultiNodeIterator>(train_actual, *comm);
  auto test_iter = std::make_shared<MultiNodeIterator>(test_actual, *comm);

  // The same seed on every rank, right before the model (rank 0 alone read the data): each
  // rank draws the full weights and keeps its share; the replicated head comes out equal.
  manual_seed(seed);
  auto cnn = std::make_shared<ParallelVGG>(comm, width);
  auto model = std::make_shared<Classifier>(cnn);
  auto optimizer = std::make_shared<Adam>();
  // --gpu: each rank's part of the model on its GPU; received tensors land there too.
  const Device device = examples::training_device(flags, "train_parallel_convolution", comm->intra_rank());
  comm->set_device(device);
  model->to(device);
  const TrainingPrecision precision = training_precision(flags.get_string("dtype"));
  convert_model(*model, precision);
  optimizer->setup(model);
  // Every rank skips a step whose gradients overflowed on any rank (mixed_f16): each holds a share.
  apply_precision(*optimizer, precision, [comm](double count) {
    return comm->size() == 1 ? count : comm->allreduce(full({}, count, DType::f64)).item();
  });
  auto updater = std::make_shared<StandardUpdater>(train_iter, optimizer);
  Trainer trainer(updater, Trigger::epochs(epochs), examples::rank_out(flags, rank), model);
  auto evaluator = std::make_shared<Evaluator>(test_iter, model);
  trainer.extend(evaluator);
  if (rank == 0) examples::extend_with_report(trainer);
  trainer.extend(create_multi_node_snapshot_writer(comm), Trigger::epochs(1));

  examples::resume(trainer, *comm, flags, "train_parallel_convolution");
  const auto checkpoint_writer =
      examples::setup_checkpoints(trainer, comm, flags, "train_parallel_convolution",
                                  "channel parallel over " + std::to_string(comm->size()) + " ranks");
  const std::int64_t first_epoch = trainer.updater().epoch();
  const auto start = std::chrono::steady_clock::now();
  {
    const AutocastScope autocast(precision.autocast);
    trainer.run();
  }
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
  examples::print_checkpoint_summary(checkpoint_writer.get(), rank);
  // Every rank takes part. The final figures are in f32 (outside the scope) where the parameters
  // are f32; a run under autocast also reports them in its own precision, as its log's validation
  // entries are (16-bit parameters: only so).
  Observation final_metrics;
  std::optional<Observation> scoped_metrics;
  if (!precision.parameters) final_metrics = evaluator->evaluate();
  if (precision.autocast) {
    const AutocastScope autocast(precision.autocast);
    scoped_metrics = evaluator->evaluate();
    if (precision.parameters) final_metrics = *scoped_metrics;
  }
  if (rank == 0) {
    const double epochs_run = static_cast<double>(std::max<std::int64_t>(trainer.updater().epoch() - first_epoch, 1));
    std::printf("final test accuracy: %.4f  loss: %.4f  (%.1f s per epoch on %d rank(s))\n",
                final_metrics.at("accuracy"), final_metrics.at("loss"), seconds.count() / epochs_run,
                comm->size());
    if (scoped_metrics) {
      std::printf("final test accuracy under %s autocast: %.4f  loss: %.4f\n", precision.name.c_str(),
                  scoped_metrics->at("accuracy"), scoped_metrics->at("loss"));
    }
  }
  return 0;
}
