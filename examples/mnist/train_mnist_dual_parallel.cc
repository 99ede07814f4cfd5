// ChainerMN's dual-parallel MNIST MLP (model parallelism inside pairs of ranks, data
// parallelism across the pairs), on an even number of ranks, on Fashion-MNIST (or MNIST):
//
//   the pairs {0,1}, {2,3}, ... (split by rank / 2) each run the 2-rank model-parallel MLP of
//   train_mnist_model_parallel: pair-rank 0 = Linear(784, unit) + ReLU and the loss
//   (Classifier), pair-rank 1 = Linear(-1, unit) + ReLU -> Linear(-1, 10);
//   the halves {0,2,4,...} and {1,3,5,...} (split by rank % 2) are data-parallel groups: each
//   half's optimizer averages its gradients over the pairs (create_multi_node_optimizer on
//   the half's communicator), after broadcasting pair 0's initial weights of that half.
//
// Pair-rank 0 of every pair trains on its own share of the data (scatter_dataset over the first
// halves, equal lengths, so every pair takes the same number of steps); pair-rank 1 iterates an
// empty dataset of the same length. The test set is scattered the same way and the
// metrics are averaged over the pairs (create_multi_node_evaluator on each half's data
// communicator; the second halves have none to average).
// --batchsize is per pair (the global minibatch is batchsize * pairs). Global rank 0 prints the
// report; its training loss is pair 0's, the validation metrics are every pair's mean.
//
//   /usr/bin/mpiexec.mpich -n 4 bazel-bin/examples/mnist/train_mnist_dual_parallel --epoch 10
#include <cstdio>

#include "autograd/functions.h"
#include "comm/multi_node_data/data.h"
#include "comm/multi_node_links/multi_node_chain_list.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "comm/multi_node_training/multi_node_evaluator.h"
#include "comm/multi_node_training/multi_node_snapshot.h"
#include "data/data.h"
#include "examples/common/flags.h"
#include "examples/mnist/mnist_common.h"
#include "examples/mnist/multi_rank.h"
#include "layers/links/classifier.h"
#include "layers/links/identity.h"
#include "layers/links/linear.h"
#include "layers/optimizers/adam.h"
#include "training/extensions/evaluator.h"
#include "training/extensions/reporting.h"
#include "training/trainer.h"

using namespace tandem;

int main(int argc, char** argv) {
  examples::Flags flags("train_mnist_dual_parallel",
                        "ChainerMN's dual-parallel MNIST MLP on Fashion-MNIST (or MNIST): pairs of ranks split the "
                        "model (model\nparallelism), the pairs split the data (data parallelism). Needs an even "
                        "number of ranks.\nRun with: /usr/bin/mpiexec.mpich -n 4 train_mnist_dual_parallel [flags]");
  examples::add_training_flags(flags, "examples per minibatch of each pair (the global minibatch is this times the "
                               "number of pairs)",
                               "directory for the log and snapshots (rank r > 0 writes to <out>/rank<r>)",
                               "'latest': continue from the newest snapshot that every rank completed");
  examples::add_communicator_flag(flags);
  examples::add_checkpoint_flags(flags);
  const int status =
      examples::parse_command_line(flags, argc, argv, "train_mnist_dual_parallel", {"batchsize", "epoch", "unit"});
  if (status >= 0) return status;
  // From here an exception on one rank aborts them all (the communicator's handler).
  auto comm = create_communicator(flags.get_string("communicator"));
  const int rank = comm->rank();
  const long long batchsize = flags.get_int("batchsize"), epochs = flags.get_int("epoch"),
                  units = flags.get_int("unit");
  TANDEM_CHECK(comm->size() % 2 == 0, "train_mnist_dual_parallel runs on an even number of ranks (pairs of ranks; "
               "mpiexec.mpich -n 4), not ", comm->size());
  const auto seed = static_cast<std::uint64_t>(flags.get_int("seed"));
  manual_seed(seed + rank);  // different initial weights: each half's first update broadcasts pair 0's

  // ChainerMN's axes: model_comm is this rank's pair (pair-rank = rank % 2), data_comm the
  // same half of every pair (its rank = the pair's index).
  CommunicatorPtr model_comm = comm->split(/*color=*/rank / 2, /*key=*/rank);
  CommunicatorPtr data_comm = comm->split(/*color=*/rank % 2, /*key=*/rank);
  const bool first_half = model_comm->rank() == 0;
  const int pairs = data_comm->size();

  auto [mnist_train, mnist_test] = examples::get_mnist(flags);
  // Both halves scatter over their own data communicator with the same arithmetic, so
  // pair-rank 1's share has its partner's length; it needs only that length.
  DatasetPtr train = scatter_dataset(mnist_train, *data_comm, 0, /*shuffle=*/first_half, seed);
  DatasetPtr test = scatter_dataset(mnist_test, *data_comm, 0, /*shuffle=*/first_half, seed);
  if (!first_half) {
    train = create_empty_dataset(train);
    test = create_empty_dataset(test);
  }

  // The model is the loss on the first halves; on the second it returns the delegate variable.
  auto chain = std::make_shared<MultiNodeChainList>(model_comm);
  std::shared_ptr<Link> model = chain;
  if (first_half) {
    chain->add_link(std::make_shared<examples::MLPFirstLayer>(units), {}, 1);
    chain->add_link(std::make_shared<Identity>(), 1, {});  // the logits come back
    model = std::make_shared<Classifier>(chain);
  } else {
    chain->add_link(std::make_shared<examples::MLPLastLayers>(units), 0, 0);
  }

  auto optimizer = create_multi_node_optimizer(std::make_shared<Adam>(), data_comm);
  // --gpu: each rank's part of the model on its GPU; received tensors land there too.
  const Device device = examples::training_device(flags, "train_mnist_dual_parallel", comm->intra_rank());
  comm->set_device(device);
  model->to(device);
  optimizer->setup(model);
  auto train_iter = std::make_shared<SerialIterator>(train, batchsize, true, first_half, seed + rank);
  auto test_iter = std::make_shared<SerialIterator>(test, batchsize, false, false);
  auto updater = std::make_shared<StandardUpdater>(train_iter, optimizer);
  Trainer trainer(updater, Trigger::epochs(epochs), examples::rank_out(flags, rank), model);
  // The first halves average the metrics over the pairs; the second halves report none (an
  // empty average among themselves), but take part in every evaluation step of their partner.
  auto evaluator = create_multi_node_evaluator(std::make_shared<Evaluator>(test_iter, model), data_comm);
  trainer.extend(evaluator);
  if (rank == 0) {
    std::printf(
        "train_mnist_dual_parallel: %d ranks = %d pair%s (model parallel within a pair, data parallel "
        "across pairs), %lld train / %lld test examples per pair; # unit: %lld  # minibatch: %lld per pair  "
        "# epoch: %lld\n",
        comm->size(), pairs, pairs == 1 ? "" : "s", static_cast<long long>(train->size()),
        static_cast<long long>(test->size()), units, batchsize, epochs);
    examples::extend_with_report(trainer);
  }
  trainer.extend(create_multi_node_snapshot_writer(comm), Trigger::epochs(1));

  examples::resume(trainer, *comm, flags, "train_mnist_dual_parallel");
  const auto checkpoint_writer =
      examples::setup_checkpoints(trainer, comm, flags, "train_mnist_dual_parallel",
                                  "dual parallel over " + std::to_string(comm->size()) + " ranks");
  trainer.run();
  examples::print_checkpoint_summary(checkpoint_writer.get(), rank);
  examples::print_final_metrics(evaluator->evaluate(), rank);  // every rank takes part
  return 0;
}
