// ChainerMN's data-parallel MNIST MLP on any number of ranks, on Fashion-MNIST (or MNIST):
// every rank holds the whole model (784-unit-unit-10), trains on its own share of the data
// (scatter_dataset), and the multi-node optimizer averages the gradients over the ranks each
// step (one packed allreduce) after broadcasting rank 0's initial weights; the multi-node
// evaluator averages the test metrics. --batchsize is per rank.
//
// How the gradients are averaged (comm/data_parallel/data_parallel_options.h): in buckets of
// --bucket-mb MiB started while backward runs (--overlap 0: after it), with the optimizer state
// (--zero 1), also the gradients (--zero 2) and also the parameters (--zero 3) sharded over the
// ranks, over --accumulate batches per update, or with ChainerMN's --double-buffering 1.
// --global-batches 1: every rank iterates the same global batches and trains on its rows, so
// that runs on any number of ranks take the same steps; with TANDEM_DETERMINISTIC=1 (and
// TANDEM_DETERMINISTIC_GROUP dividing every rank's batch) bit for bit (docs/reproducibility.md).
//
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/mnist/train_mnist_data_parallel --epoch 10
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/mnist/train_mnist_data_parallel --zero 3 --accumulate 2
#include <cstdio>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "comm/multi_node_data/data.h"
#include "comm/multi_node_training/multi_node_evaluator.h"
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

int main(int argc, char** argv) {
  examples::Flags flags("train_mnist_data_parallel",
                        "ChainerMN's data-parallel MNIST MLP on any number of ranks, on Fashion-MNIST (or MNIST).\n"
                        "Run with: /usr/bin/mpiexec.mpich -n N train_mnist_data_parallel [flags]");
  examples::add_training_flags(flags, "examples per minibatch on each rank",
                               "directory for the log and snapshots (rank r > 0 writes to <out>/rank<r>)",
                               "'latest': continue from the newest snapshot that every rank completed");
  examples::add_communicator_flag(flags);
  flags.add_int("zero", 0,
                "sharding over the ranks: 0 none, 1 the optimizer state, 2 also the gradients, 3 also the parameters");
  flags.add_int("accumulate", 1, "batches per update (gradient accumulation)");
  flags.add_double("bucket-mb", 4, "gradients travel in buckets of this many MiB (0: one per dtype)");
  flags.add_int("overlap", 1, "1: a bucket's average starts while backward runs; 0: after backward");
  flags.add_int("double-buffering", 0, "1: ChainerMN's double buffering (gradients applied one step late)");
  flags.add_string("allreduce-grad-dtype", "",
                   "bf16 or f16: gradients averaged in 16 bits, half the bytes (ChainerMN's allreduce_grad_dtype); "
                   "empty: the parameters' dtype");
  examples::add_dtype_flag(flags);
  flags.add_int("global-batches", 0,
                "1: every rank iterates the same global batches of --batchsize x ranks examples and trains on its "
                "rows of each (the run then computes the same steps on any number of ranks; with "
                "TANDEM_DETERMINISTIC=1, bit for bit)");
  examples::add_checkpoint_flags(flags);
  const int status =
      examples::parse_command_line(flags, argc, argv, "train_mnist_data_parallel", {"batchsize", "epoch", "unit"});
  if (status >= 0) return status;
  // From here an exception on one rank aborts them all (the communicator's handler).
  auto comm = create_communicator(flags.get_string("communicator"));
  const int rank = comm->rank();
  const long long batchsize = flags.get_int("batchsize"), epochs = flags.get_int("epoch"),
                  units = flags.get_int("unit");
  const auto seed = static_cast<std::uint64_t>(flags.get_int("seed"));
  // --global-batches: every rank iterates the same global batches and takes its rows of each;
  // the replicas start equal, so that no step is lost to broadcasting rank 0's weights.
  const bool global_batches = flags.get_int("global-batches") != 0;
  // Otherwise different initial weights: the first update broadcasts rank 0's.
  manual_seed(global_batches ? seed : seed + rank);

  auto [mnist_train, mnist_test] = examples::get_mnist(flags);
  DatasetPtr train = global_batches ? mnist_train : scatter_dataset(mnist_train, *comm, 0, /*shuffle=*/true, seed);
  DatasetPtr test = scatter_dataset(mnist_test, *comm, 0, /*shuffle=*/true, seed);

  auto mlp = std::make_shared<examples::MLP>(units, 10);
  auto model = std::make_shared<Classifier>(mlp);
  {
    // The lazily sized layers take their sizes from one example before setup, which zero = 3
    // needs (it shards the parameters there); every setting does it, so that all draw the same
    // initial weights.
    NoGradGuard no_grad;
    Shape one = mnist_train->get(0)[0].shape();
    one.insert(one.begin(), 1);
    mlp->forward(Variable(zeros(one)));
  }
  DataParallelOptions parallel;
  parallel.zero = static_cast<int>(flags.get_int("zero"));
  parallel.bucket_mb = flags.get_double("bucket-mb");
  parallel.overlap = flags.get_int("overlap") != 0;
  parallel.double_buffering = flags.get_int("double-buffering") != 0;
  const std::string grad_dtype = flags.get_string("allreduce-grad-dtype");
  if (!grad_dtype.empty()) parallel.allreduce_grad_dtype = dtype_by_name(grad_dtype, "--allreduce-grad-dtype");
  auto optimizer = create_multi_node_optimizer(std::make_shared<Adam>(), comm, parallel);
  // Data parallel: every rank holds the same averaged gradients and takes the same decision.
  const TrainingPrecision precision = training_precision(flags.get_string("dtype"));
  apply_precision(*optimizer, precision);
  // --gpu: each rank's part of the model on its GPU; received tensors land there too.
  const Device device = examples::training_device(flags, "train_mnist_data_parallel", comm->intra_rank());
  comm->set_device(device);
  model->to(device);
  convert_model(*model, precision);
  optimizer->setup(model);
  std::shared_ptr<Iterator> train_iter = std::make_shared<SerialIterator>(train, batchsize, true, true, seed + rank);
  if (global_batches)
    train_iter = std::make_shared<ReplicaRowsIterator>(
        std::make_shared<SerialIterator>(train, batchsize * comm->size(), true, true, seed), rank, comm->size());
  auto test_iter = std::make_shared<SerialIterator>(test, batchsize, false, false);
  auto updater = std::make_shared<StandardUpdater>(train_iter, optimizer);
  updater->set_accumulation(static_cast<int>(flags.get_int("accumulate")));
  Trainer trainer(updater, Trigger::epochs(epochs), examples::rank_out(flags, rank), model);
  auto evaluator = create_multi_node_evaluator(std::make_shared<Evaluator>(test_iter, model), comm);
  trainer.extend(evaluator);
  if (rank == 0) {
    std::printf("train_mnist_data_parallel: %d ranks, %lld train / %lld test examples per rank; # unit: %lld  "
                "# minibatch: %lld per rank  # epoch: %lld  zero %d, accumulate %lld, buckets of %g MiB%s%s\n",
                comm->size(), static_cast<long long>(global_batches ? train->size() / comm->size() : train->size()),
                static_cast<long long>(test->size()), units,
                batchsize, epochs, parallel.zero, static_cast<long long>(flags.get_int("accumulate")),
                parallel.bucket_mb, parallel.overlap ? " overlapped with backward" : " after backward",
                parallel.double_buffering ? ", double buffering" : "");
    examples::extend_with_report(trainer);
  }
  trainer.extend(create_multi_node_snapshot_writer(comm), Trigger::epochs(1));

  examples::resume(trainer, *comm, flags, "train_mnist_data_parallel");
  const auto checkpoint_writer =
      examples::setup_checkpoints(trainer, comm, flags, "train_mnist_data_parallel",
                                  "dp " + std::to_string(comm->size()) + ", zero " + std::to_string(parallel.zero));
  const AutocastScope autocast(precision.autocast);  // training and the evaluations
  trainer.run();
  examples::print_checkpoint_summary(checkpoint_writer.get(), rank);
  examples::print_final_metrics(evaluator->evaluate(), rank);
  return 0;
}
