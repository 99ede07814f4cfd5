// ChainerMN's model-parallel MNIST MLP on exactly 2 ranks, on Fashion-MNIST (or MNIST):
//   rank 0: Linear(784, unit) + ReLU, sends to rank 1, receives the logits back, computes the
//           loss (Classifier) and reports;
//   rank 1: Linear(-1, unit) + ReLU -> Linear(-1, 10), sends the logits back; it iterates an
//           empty dataset of the same length, so both ranks take the same number of steps.
// --form chainlist (default) declares the split with MultiNodeChainList; --form explicit
// writes the same traffic with send/recv and the delegate variable by hand.
//
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/mnist/train_mnist_model_parallel --epoch 10
#include <cstdio>

#include "autograd/functions.h"
#include "comm/data/empty_dataset.h"
#include "comm/functions.h"
#include "comm/links/multi_node_chain_list.h"
#include "comm/training/multi_node_snapshot.h"
#include "data/data.h"
#include "examples/common/flags.h"
#include "examples/mnist/mnist_common.h"
#include "layers/links/classifier.h"
#include "layers/links/linear.h"
#include "layers/optimizers/adam.h"
#include "training/extensions/evaluator.h"
#include "training/extensions/reporting.h"
#include "training/trainer.h"

using namespace tandem;

namespace {

// The split of examples::MLPFirstLayer / MLPLastLayers, with the communication written out.
class ExplicitRank0 : public Chain {
 public:
  ExplicitRank0(CommunicatorPtr comm, std::int64_t units) : comm_(std::move(comm)) {
    first = add_link("0", std::make_shared<examples::MLPFirstLayer>(units));
  }
  Variable forward(const Variable& x) override {
    Variable phi = F::send((*first)(x), *comm_, 1);  // phi: the delegate variable
    return F::recv(*comm_, 1, phi);                   // keeps the send in this rank's graph
  }
  std::shared_ptr<examples::MLPFirstLayer> first;

 private:
  CommunicatorPtr comm_;
};

class ExplicitRank1 : public Chain {
 public:
  ExplicitRank1(CommunicatorPtr comm, std::int64_t units) : comm_(std::move(comm)) {
    last = add_link("0", std::make_shared<examples::MLPLastLayers>(units));
  }
  using Chain::forward;
  // No input: rank 1's data comes from rank 0.
  Variable forward() {
    Variable h = F::recv(*comm_, 0, Variable(), 0, device());  // onto this rank's device
    return F::send((*last)(h), *comm_, 0);  // a delegate: backward() on it runs the exchange
  }
  std::shared_ptr<examples::MLPLastLayers> last;

 private:
  CommunicatorPtr comm_;
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
  examples::add_communicator_flag(flags);
  const int status =
      examples::parse_command_line(flags, argc, argv, "train_mnist_model_parallel", {"batchsize", "epoch", "unit"});
  if (status >= 0) return status;
  // From here an exception on one rank aborts both (the communicator's handler).
  auto comm = create_communicator(flags.get_string("communicator"));
  const int rank = comm->rank();
  const long long batchsize = flags.get_int("batchsize"), epochs = flags.get_int("epoch"),
                  units = flags.get_int("unit");
  const std::string form = flags.get_string("form");
  TANDEM_CHECK(comm->size() == 2, "train_mnist_model_parallel runs on exactly 2 ranks (mpiexec.mpich -n 2), not ",
               comm->size());
  TANDEM_CHECK(form == "chainlist" || form == "explicit", "train_mnist_model_parallel: --form is chainlist or "
               "explicit, not '", form, "'");
  manual_seed(static_cast<std::uint64_t>(flags.get_int("seed")) + rank);

  MnistOptions data_options;
  data_options.dir = flags.get_string("data-dir");
  auto [mnist_train, mnist_test] = get_mnist(data_options);
  DatasetPtr train = mnist_train, test = mnist_test;
  if (rank == 1) {  // rank 1 needs the number of steps, not the data
    train = create_empty_dataset(train);
    test = create_empty_dataset(test);
  }

  std::shared_ptr<Link> model;
  LossFunction loss;
  Evaluator::EvalFunction eval;
  std::function<void()> forward_once;  // sizes the lazy layers before a snapshot loads
  if (rank == 0) {
    std::shared_ptr<Link> predictor;
    if (form == "chainlist") {
      auto chain = std::make_shared<MultiNodeChainList>(comm);
      chain->add_link(std::make_shared<examples::MLPFirstLayer>(units), {}, 1);
      chain->add_link(std::make_shared<examples::Passthrough>(), 1, {});
      predictor = chain;
    } else {
      predictor = std::make_shared<ExplicitRank0>(comm, units);
    }
    auto classifier = std::make_shared<Classifier>(predictor);
    model = classifier;
    loss = classifier_loss(classifier);
    eval = classifier_eval(classifier);
    forward_once = [classifier, train = train] {
      const Example batch = train->get_batch({0});
      classifier->forward(Variable(batch[0]), Variable(batch[1]));
    };
  } else {
    std::function<Variable()> forward;  // rank 1 has no input; its result is the delegate
    if (form == "chainlist") {
      auto chain = std::make_shared<MultiNodeChainList>(comm);
      chain->add_link(std::make_shared<examples::MLPLastLayers>(units), 0, 0);
      model = chain;
      forward = [chain] { return chain->forward(); };
    } else {
      auto chain = std::make_shared<ExplicitRank1>(comm, units);
      model = chain;
      forward = [chain] { return chain->forward(); };
    }
    loss = [forward](const Example&) { return LossResult{forward(), {}}; };
    eval = [forward](const Example&) {
      forward();
      return Observation{};
    };
    forward_once = forward;
  }

  auto optimizer = std::make_shared<Adam>();
  // --gpu: each rank's part of the model on its GPU; received tensors land there too.
  const Device device = examples::training_device(flags, "train_mnist_model_parallel", comm->intra_rank());
  comm->set_device(device);
  model->to(device);
  optimizer->setup(model);
  auto train_iter = std::make_shared<SerialIterator>(train, batchsize, true, rank == 0,
                                                     static_cast<std::uint64_t>(flags.get_int("seed")));
  auto test_iter = std::make_shared<SerialIterator>(test, batchsize, false, false);
  auto updater = std::make_shared<StandardUpdater>(train_iter, optimizer, loss);
  const std::string out = rank == 0 ? flags.get_string("out") : flags.get_string("out") + "/rank1";
  Trainer trainer(updater, Trigger::epochs(epochs), out, model);
  auto evaluator = std::make_shared<Evaluator>(test_iter, eval);
  trainer.extend(evaluator);
  if (rank == 0) {
    std::printf("train_mnist_model_parallel (%s form): %lld train / %lld test examples; # unit: %lld  # minibatch: "
                "%lld  # epoch: %lld\n",
                form.c_str(), static_cast<long long>(train->size()), static_cast<long long>(test->size()), units,
                batchsize, epochs);
    examples::extend_with_report(trainer);
  }
  trainer.extend(create_multi_node_snapshot_writer(comm), Trigger::epochs(1));

  const std::string resume = flags.get_string("resume");
  TANDEM_CHECK(resume.empty() || resume == "latest", "train_mnist_model_parallel: --resume takes 'latest' (the newest "
               "snapshot that both ranks completed)");
  if (resume == "latest") {
    const std::string path = latest_complete_snapshot(*comm, out).path;
    // Lazily sized layers get their shapes from one forward pass (both ranks) before loading.
    {
      NoGradGuard no_grad;
      forward_once();
    }
    trainer.load_snapshot(path);
    if (rank == 0) std::printf("resumed at iteration %lld\n", static_cast<long long>(trainer.iteration()));
  }
  trainer.run();
  const Observation final_metrics = evaluator->evaluate();  // both ranks take part
  if (rank == 0)
    std::printf("final test accuracy: %.4f  loss: %.4f\n", final_metrics.at("accuracy"), final_metrics.at("loss"));
  return 0;
}
