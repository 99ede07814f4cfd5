// ChainerMN's model-parallel MNIST MLP on exactly 2 ranks, on Fashion-MNIST (or MNIST): rank 0
// holds Linear(784, unit) + ReLU and the loss (Classifier), rank 1 Linear(-1, unit) + ReLU ->
// Linear(-1, 10) and iterates an empty dataset of the same length (so as many steps as rank 0).
// --form chainlist (default) declares the split with MultiNodeChainList; --form explicit
// writes the same traffic with send/recv and the delegate variable by hand.
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/mnist/train_mnist_model_parallel --epoch 10
#include <cstdio>
#include <tuple>

#include "comm/multi_node_data/empty_dataset.h"
#include "comm/functions.h"
#include "comm/graph/multi_node_dump_graph.h"
#include "comm/multi_node_links/multi_node_chain_list.h"
#include "comm/multi_node_training/multi_node_snapshot.h"
#include "examples/mnist/mnist_common.h"
#include "examples/mnist/multi_rank.h"
#include "layers/links/classifier.h"
#include "layers/links/identity.h"
#include "layers/optimizers/adam.h"
#include "training/extensions/evaluator.h"

using namespace tandem;

namespace {

// --form explicit: examples::MLPFirstLayer / MLPLastLayers with the traffic written by hand.
struct ExplicitRank0 : Chain {
  ExplicitRank0(CommunicatorPtr c, std::int64_t units)
      : comm(std::move(c)), first(add_link("0", std::make_shared<examples::MLPFirstLayer>(units))) {}
  Variable forward(const Variable& x) override {
    Variable phi = F::send((*first)(x), *comm, 1);  // phi: the delegate variable
    return F::recv(*comm, 1, phi);                   // keeps the send in this rank's graph
  }
  CommunicatorPtr comm;
  std::shared_ptr<examples::MLPFirstLayer> first;
};
struct ExplicitRank1 : Chain {  // no input: it comes from rank 0
  ExplicitRank1(CommunicatorPtr c, std::int64_t units)
      : comm(std::move(c)), last(add_link("0", std::make_shared<examples::MLPLastLayers>(units))) {}
  Variables forward_many(const Variables&) override {
    Variable h = F::recv(*comm, 0, Variable(), 0, device());  // onto this rank's device
    return {F::send((*last)(h), *comm, 0)};  // a delegate: backward() on it runs the exchange
  }
  CommunicatorPtr comm;
  std::shared_ptr<examples::MLPLastLayers> last;
};

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags("train_mnist_model_parallel",
                        "ChainerMN's model-parallel MNIST MLP over 2 ranks, on Fashion-MNIST (or MNIST).\n"
                        "Run with: /usr/bin/mpiexec.mpich -n 2 train_mnist_model_parallel [flags]");
  examples::add_training_flags(flags, "examples per minibatch",
                               "directory for the log and snapshots (rank 1 writes to <out>/rank1)",
                               "'latest': continue from the newest snapshot that both ranks completed");
  flags.add_string("form", "chainlist", "chainlist (MultiNodeChainList) or explicit (send/recv by hand)");
  flags.add_int("snapshot-interval", 0, "iterations between snapshots (0: one at the end of every epoch)");
  examples::add_communicator_flag(flags);
  examples::add_checkpoint_flags(flags);
  const int status =
      examples::parse_command_line(flags, argc, argv, "train_mnist_model_parallel", {"batchsize", "epoch", "unit"});
  if (status >= 0) return status;
  auto comm = create_communicator(flags.get_string("communicator"));  // an error on one rank now ends both
  const int rank = comm->rank();
  const long long batchsize = flags.get_int("batchsize"), epochs = flags.get_int("epoch"),
                  units = flags.get_int("unit");
  const std::string form = flags.get_string("form");
  TANDEM_CHECK(comm->size() == 2, "train_mnist_model_parallel runs on exactly 2 ranks (mpiexec.mpich -n 2), not ",
               comm->size());
  TANDEM_CHECK(form == "chainlist" || form == "explicit", "train_mnist_model_parallel: --form is chainlist or "
               "explicit, not '", form, "'");
  manual_seed(flags.get_int("seed") + rank);

  // Rank 1 needs the number of steps, not the data: it does not load it (the lengths are broadcast).
  DatasetPtr train, test;
  if (rank == 0) std::tie(train, test) = examples::get_mnist(flags);
  DatasetPtr empty_train = create_empty_dataset(train, *comm), empty_test = create_empty_dataset(test, *comm);
  if (rank == 1) train = empty_train, test = empty_test;
  std::shared_ptr<Link> model;  // rank 0: the predictor, then the loss; rank 1: returns the delegate variable
  if (form == "explicit" && rank == 0) model = std::make_shared<ExplicitRank0>(comm, units);
  if (form == "explicit" && rank == 1) model = std::make_shared<ExplicitRank1>(comm, units);
  if (form == "chainlist") {
    auto chain = std::make_shared<MultiNodeChainList>(comm);
    if (rank == 0) chain->add_link(std::make_shared<examples::MLPFirstLayer>(units), /*rank_in=*/{}, /*rank_out=*/1);
    if (rank == 0) chain->add_link(std::make_shared<Identity>(), 1, {});  // the logits come back
    if (rank == 1) chain->add_link(std::make_shared<examples::MLPLastLayers>(units), 0, 0);
    model = chain;
  }
  if (rank == 0) model = std::make_shared<Classifier>(model);
  comm->set_device(examples::training_device(flags, "train_mnist_model_parallel", comm->intra_rank()));
  model->to(comm->device());  // --gpu: each rank's part on its GPU, where received tensors land too
  auto optimizer = std::make_shared<Adam>();
  optimizer->setup(model);
  auto train_iter = std::make_shared<SerialIterator>(train, batchsize, true, rank == 0, flags.get_int("seed"));
  auto updater = std::make_shared<StandardUpdater>(train_iter, optimizer);
  Trainer trainer(updater, Trigger::epochs(epochs), examples::rank_out(flags, rank), model);
  auto evaluator = std::make_shared<Evaluator>(std::make_shared<SerialIterator>(test, batchsize, false, false), model);
  trainer.extend(evaluator);
  if (rank == 0) {
    std::printf("train_mnist_model_parallel (%s form): %lld train / %lld test examples; # unit: %lld  # minibatch: "
                "%lld  # epoch: %lld\n", form.c_str(), static_cast<long long>(train->size()),
                static_cast<long long>(test->size()), units, batchsize, epochs);
    examples::extend_with_report(trainer);
  }
  const long long snapshot_interval = flags.get_int("snapshot-interval");
  TANDEM_CHECK(snapshot_interval >= 0, "train_mnist_model_parallel: --snapshot-interval must be 0 or more, not ",
               snapshot_interval);
  trainer.extend(create_multi_node_snapshot_writer(comm),
                 snapshot_interval > 0 ? Trigger::iterations(snapshot_interval) : Trigger::epochs(1));
  trainer.extend(create_multi_node_dump_graph(comm));  // both ranks' graphs in rank 0's out/cg.dot (and cg.svg)
  examples::resume(trainer, *comm, flags, "train_mnist_model_parallel");
  const auto checkpoint_writer =
      examples::setup_checkpoints(trainer, comm, flags, "train_mnist_model_parallel", "model parallel over 2 ranks");
  trainer.run();
  examples::print_checkpoint_summary(checkpoint_writer.get(), rank);
  examples::print_final_metrics(evaluator->evaluate(), rank);  // both ranks take part
  return 0;
}
