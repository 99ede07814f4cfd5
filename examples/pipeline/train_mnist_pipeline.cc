// A deep MLP on Fashion-MNIST (or MNIST), pipeline-parallel over the ranks of an MPI job with
// the pipeline runtime (comm/pipeline): --layers hidden layers of --unit units (Linear + ReLU;
// the first Linear(784, unit)), then Linear(unit, 10) and the softmax cross-entropy loss, cut
// into S = ranks_per_pipeline * --stages-per-rank consecutive stages, each an ordinary Chain:
// the hidden layers are split as evenly as possible (earlier stages get the extra one), stage 0
// starts with Linear(784, unit), and the last stage, a Classifier around its layers, ends with
// Linear(unit, 10) and the loss (it takes (h, t) and reports loss and accuracy). Each batch is
// split into --microbatches microbatches that the stages compute in the order --schedule gives
// (gpipe, 1f1b or interleaved: --stages-per-rank > 1 stages per rank, round-robin; the zero-bubble
// zb-h1, zb-h2, and zbv: 2 stages per rank in a V, rank r holding r and 2 ranks - 1 - r); --recompute
// keeps only each stage's inputs and recomputes its forward in backward.
//
// Every rank draws each layer's weights from its own generator, seeded with --seed and the
// layer's index, so the model starts the same however it is split: on 1 rank (one process
// holding every stage; with --stages-per-rank 1 that is gradient accumulation over the
// microbatches) it trains the same model as on any number of ranks, up to float rounding.
// Every rank of a pipeline iterates the same batches (the same seed). --data-parallel D runs D
// pipelines of size/D ranks each (comm/pipeline/layout.h): each pipeline trains on its own share
// of the data (scatter_dataset) and evaluates its own share of the test set, the gradients and
// the test metrics are averaged over the ranks that hold the same stages; --batchsize is per
// pipeline.
//
//   bazel build //examples/pipeline:train_mnist_pipeline
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/pipeline/train_mnist_pipeline --schedule 1f1b --microbatches 4
//   --epoch 1 /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/pipeline/train_mnist_pipeline --schedule interleaved
//   --stages-per-rank 2 /usr/bin/mpiexec.mpich -n 4 bazel-bin/examples/pipeline/train_mnist_pipeline --data-parallel 2
//   --recompute bazel-bin/examples/pipeline/train_mnist_pipeline --epoch 1      # the same model in one process
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/pipeline/train_mnist_pipeline --profile --microbatches 8
//       # one measured step beside the simulator's prediction, then exit
//
// Rank 0 prints the configuration, the per-epoch report and the final test accuracy; rank r > 0
// writes its log and snapshots to <out>/rank<r>. --resume latest continues from the newest
// snapshot that every rank completed (the same number of ranks and the same flags). --dtype
// mixed_bf16 / mixed_f16 trains under autocast (training/mixed_precision.h): products in 16 bits,
// and the activations and their gradients cross between stages in 16 bits.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "comm/multi_node_data/scatter_dataset.h"
#include "comm/multi_node_training/multi_node_evaluator.h"
#include "comm/multi_node_training/multi_node_snapshot.h"
#include "comm/pipeline/layout.h"
#include "comm/pipeline/pipeline.h"
#include "comm/pipeline/pipeline_training.h"
#include "comm/pipeline/profile.h"
#include "comm/pipeline/report.h"
#include "comm/pipeline/schedule.h"
#include "data/data.h"
#include "examples/common/flags.h"
#include "examples/mnist/mnist_common.h"
#include "examples/mnist/multi_rank.h"
#include "layers/links/classifier.h"
#include "layers/links/linear.h"
#include "layers/optimizers/adam.h"
#include "training/extensions/evaluator.h"
#include "training/mixed_precision.h"
#include "training/trainer.h"

using namespace tandem;

namespace {

constexpr const char* kProgram = "train_mnist_pipeline";

// Linear's default initialiser (LeCun normal: N(0, 1 / fan_in)), drawn from the layer's own
// generator rather than the global one, so that a layer's weights do not depend on which
// layers were built before it in this process.
initializers::Initializer layer_initializer(std::uint64_t seed, int layer) {
  return [generator = Generator(seed * 1000 + static_cast<std::uint64_t>(layer))](const Shape& shape,
                                                                                  DType dtype) mutable {
    return randn(shape, generator, 0, std::sqrt(1.0 / static_cast<double>(shape[1])), dtype);
  };
}

// One stage of the MLP: hidden layers [first, first + count) (Linear + ReLU; hidden layer 0
// takes the 784 pixels), followed on the last stage by the output layer Linear(units, 10)
// (layer index `layers`). The links are named by their layer index.
class MlpStage : public Chain {
 public:
  MlpStage(int first, int count, int layers, std::int64_t units, bool last, std::uint64_t seed) {
    for (int i = first; i < first + count; ++i) {
      LinearOptions options;
      options.initialW = layer_initializer(seed, i);
      hidden_.push_back(
          add_link("l" + std::to_string(i), std::make_shared<Linear>(i == 0 ? 784 : units, units, options)));
    }
    if (last) {
      LinearOptions options;
      options.initialW = layer_initializer(seed, layers);
      output_ = add_link("l" + std::to_string(layers), std::make_shared<Linear>(units, 10, options));
    }
  }
  std::string type_name() const override { return "MlpStage"; }
  Variable forward(const Variable& x) override {
    Variable h = x;
    for (const auto& linear : hidden_) h = F::relu((*linear)(h));
    return output_ ? (*output_)(h) : h;
  }

 private:
  std::vector<std::shared_ptr<Linear>> hidden_;
  std::shared_ptr<Linear> output_;
};

DatasetPtr first_examples(DatasetPtr dataset, long long size) {
  if (size <= 0 || size >= dataset->size()) return dataset;
  return split_dataset(dataset, size).first;
}

// --recompute and --profile are switches: a bare "--recompute" (last, or followed by another
// flag) means --recompute=1; "--recompute 0" / "--recompute=1" are taken as they are.
std::vector<char*> expand_switches(int argc, char** argv) {
  static char recompute_on[] = "--recompute=1", profile_on[] = "--profile=1";
  std::vector<char*> args(argv, argv + argc);
  for (std::size_t i = 1; i < args.size(); ++i) {
    const bool recompute = std::strcmp(args[i], "--recompute") == 0, profile = std::strcmp(args[i], "--profile") == 0;
    if (!recompute && !profile) continue;
    const bool bare = i + 1 == args.size() || std::strncmp(args[i + 1], "-", 1) == 0;
    if (bare) args[i] = recompute ? recompute_on : profile_on;
  }
  return args;
}

// --profile: two steps on the first batch (the first warms up; gradients are dropped, nothing is
// updated), then the simulator fed with what the second measured (comm/pipeline/profile.h).
// Rank 0 prints the measured and the predicted step side by side, with their timelines, and the
// simulate tool's command line for planning other schedules; both Chrome traces go to --out.
void profile(pipeline::Pipeline& pipe, Communicator& world, DatasetPtr train, long long batchsize,
             const std::string& out) {
  const Example batch = SerialIterator(train, batchsize, false, false).next();
  for (int i = 0; i < 2; ++i) {
    pipe.cleargrads();
    pipe.step(batch);
  }
  pipe.cleargrads();
  std::int64_t activation = 0;
  for (const auto& [stage, bytes] : pipe.last_profile().output_bytes) activation = std::max(activation, bytes);
  const pipeline::LinkModel link = pipeline::measure_link(pipe.communicator(), std::max<std::int64_t>(activation, 8));
  const pipeline::MeasuredStep measured = pipeline::measure_last_step(pipe, link);
  const pipeline::SimulationResult real = pipeline::measured_result(pipe);
  const pipeline::SimulationResult predicted = pipeline::simulate(pipe.schedule(), measured.options);
  if (world.rank() != 0) return;
  const pipeline::Schedule& schedule = pipe.schedule();
  std::printf("\n--- measured (one step; each action's computation, waits shown idle) ---\n%s%s",
              pipeline::format_summary(schedule, real).c_str(), pipeline::format_timeline(schedule, real).c_str());
  std::printf("\n--- predicted by the simulator from the measured costs ---\n%s%s",
              pipeline::format_summary(schedule, predicted).c_str(),
              pipeline::format_timeline(schedule, predicted).c_str());
  std::printf("\nmeasured step %.2f ms, predicted %.2f ms; link %.1f us, %.2f GB/s\nplan other schedules: %s\n",
              real.step_s * 1e3, predicted.step_s * 1e3, link.latency_s * 1e6, link.bandwidth_bytes_per_s / 1e9,
              pipeline::simulate_command(schedule, measured.options).c_str());
  pipeline::write_chrome_trace(out + "/pipeline_measured.json", schedule, real);
  pipeline::write_chrome_trace(out + "/pipeline_predicted.json", schedule, predicted);
  std::printf("Chrome traces: %s/pipeline_measured.json, %s/pipeline_predicted.json\n", out.c_str(), out.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags(kProgram,
                        "A deep MLP on Fashion-MNIST (or MNIST), pipeline-parallel over the ranks of an MPI job.\n"
                        "Run with: /usr/bin/mpiexec.mpich -n N train_mnist_pipeline [flags] (or without mpiexec: "
                        "1 rank)");
  examples::add_training_flags(flags, "examples per minibatch (per pipeline with --data-parallel)",
                               "directory for the log and snapshots (rank r > 0 writes to <out>/rank<r>)",
                               "'latest': continue from the newest snapshot that every rank completed");
  flags.add_string("schedule", "1f1b",
                   "pipeline schedule: gpipe, 1f1b or interleaved, each also with -dw (1f1b-dw: the weight gradients "
                   "computed at the step's end, one product per weight over the whole batch), or a zero-bubble one: "
                   "zb-h1, zb-h2 or zbv (2 stages per rank in a V: rank 0 holds the first and the last)");
  flags.add_int("microbatches", 4, "microbatches per minibatch");
  flags.add_int("stages-per-rank", 1,
                "stages (model chunks) per rank; more than 1 with --schedule interleaved (zbv: 2, its default)");
  flags.add_int("layers", 8, "hidden layers (Linear + ReLU) before the output layer");
  flags.add_int("data-parallel", 1, "pipelines (data parallelism over them); must divide the number of ranks");
  flags.add_int("recompute", 0, "recompute each stage's forward in backward (--recompute alone: 1)");
  flags.add_int("profile", 0,
                "measure one step, print it beside the simulator's prediction, write Chrome traces "
                "to --out and exit (--profile alone: 1)");
  flags.add_int("train-size", 0, "train on the first this many examples (0: all)");
  flags.add_int("test-size", 0, "evaluate on the first this many test examples (0: all)");
  examples::add_dtype_flag(flags);
  examples::add_communicator_flag(flags);
  examples::add_checkpoint_flags(flags);
  std::vector<char*> args = expand_switches(argc, argv);
  const int status = examples::parse_command_line(
      flags, static_cast<int>(args.size()), args.data(), kProgram,
      {"batchsize", "epoch", "unit", "microbatches", "stages-per-rank", "layers", "data-parallel"});
  if (status >= 0) return status;
  // From here an exception on one rank aborts them all (the communicator's handler).
  auto world = create_communicator(flags.get_string("communicator"));
  const int rank = world->rank();
  const long long batchsize = flags.get_int("batchsize"), epochs = flags.get_int("epoch"),
                  units = flags.get_int("unit"), microbatches = flags.get_int("microbatches"),
                  stages_per_rank = examples::pipeline_stages_per_rank(flags), layers = flags.get_int("layers"),
                  data_parallel = flags.get_int("data-parallel"), recompute = flags.get_int("recompute");
  const std::string schedule_name = flags.get_string("schedule");
  const auto seed = static_cast<std::uint64_t>(flags.get_int("seed"));
  TANDEM_CHECK(recompute == 0 || recompute == 1, kProgram, ": --recompute is 0 or 1, not ", recompute);
  TANDEM_CHECK(world->size() % data_parallel == 0, kProgram, ": --data-parallel ", data_parallel,
               " must divide the number of ranks, ", world->size());
  const int ranks = world->size() / static_cast<int>(data_parallel);  // per pipeline
  // Every error here and below is the same on every rank (the same flags).
  const pipeline::Schedule schedule = pipeline::schedule_by_name(
      schedule_name, ranks, static_cast<int>(stages_per_rank), static_cast<int>(microbatches));
  const long long stages = ranks * stages_per_rank;
  TANDEM_CHECK(layers >= stages, kProgram, ": --layers ", layers, " cannot fill ", stages, " stages (", ranks,
               " rank(s) per pipeline x ", stages_per_rank, " per rank): every stage needs a hidden layer");
  TANDEM_CHECK(microbatches <= batchsize, kProgram, ": --microbatches ", microbatches, " is more than --batchsize ",
               batchsize);
  manual_seed(seed);  // nothing draws from it here; set for any link that would

  const Device device = examples::training_device(flags, kProgram, world->intra_rank());
  world->set_device(device);  // the layout's communicators (and the pipeline's) inherit it
  const pipeline::PipelineLayout layout = pipeline::make_pipeline_layout(world, static_cast<int>(data_parallel));

  // This rank's stages, in increasing order (schedule.stages_of_rank): stage s lives on rank
  // schedule.rank_of_stage(s) of its pipeline (s % ranks; zbv's V: rank r holds r and 2 ranks - 1 - r).
  std::vector<LinkPtr> my_stages;
  std::string split;  // "3+3+2", hidden layers per stage
  int first = 0;
  for (int s = 0; s < stages; ++s) {
    const int count = static_cast<int>(layers / stages + (s < layers % stages ? 1 : 0));
    split += (s ? "+" : "") + std::to_string(count);
    if (schedule.rank_of_stage(s) == layout.stage_rank) {
      const bool last = s == stages - 1;
      LinkPtr stage = std::make_shared<MlpStage>(first, count, static_cast<int>(layers), units, last, seed);
      if (last) stage = std::make_shared<Classifier>(stage);
      stage->to(device);
      my_stages.push_back(stage);
    }
    first += count;
  }
  pipeline::PipelineOptions options;
  options.recompute = recompute != 0;
  auto pipe = std::make_shared<pipeline::Pipeline>(layout.pipeline, schedule, my_stages, options);

  // Every rank of a pipeline iterates the same data in the same order; each pipeline its own share.
  auto [mnist_train, mnist_test] = examples::get_mnist(flags);
  DatasetPtr train = first_examples(mnist_train, flags.get_int("train-size"));
  DatasetPtr test = first_examples(mnist_test, flags.get_int("test-size"));
  if (data_parallel > 1) {
    train = scatter_dataset(train, *layout.data);  // not shuffled: the ranks of a pipeline agree
    test = scatter_dataset(test, *layout.data);
  }
  std::shared_ptr<Optimizer> optimizer = std::make_shared<Adam>();
  if (data_parallel > 1) optimizer = create_multi_node_optimizer(optimizer, layout.data);
  const TrainingPrecision precision = training_precision(flags.get_string("dtype"));
  convert_model(*pipe, precision);
  optimizer->setup(pipe);
  // mixed_f16: every rank skips a step whose gradients overflowed anywhere (each holds some stages),
  // and the pipeline seeds backward with the scaler's scale. Activations cross the stages in 16 bits.
  apply_precision(*optimizer, precision, [&world](double count) {
    return world->size() == 1 ? count : world->allreduce(full({}, count, DType::f64)).item();
  });
  if (optimizer->loss_scaler()) pipe->set_loss_scaler(optimizer->loss_scaler());
  auto train_iter = std::make_shared<SerialIterator>(train, batchsize, true, true, seed + layout.pipeline_index);
  auto test_iter = std::make_shared<SerialIterator>(test, batchsize, false, false);  // the real data on every rank
  auto updater = pipeline::create_pipeline_updater(train_iter, optimizer, pipe);
  Trainer trainer(updater, Trigger::epochs(epochs), examples::rank_out(flags, rank), pipe);
  auto pipeline_evaluator = pipeline::create_pipeline_evaluator(test_iter, pipe);
  std::shared_ptr<MultiNodeEvaluator> multi_node_evaluator;
  if (data_parallel > 1) {
    multi_node_evaluator = create_multi_node_evaluator(pipeline_evaluator, layout.data);
    trainer.extend(multi_node_evaluator);
  } else {
    trainer.extend(pipeline_evaluator);
  }
  if (rank == 0) {
    std::printf(
        "%s: %s; %lld pipeline(s) of %d rank(s), %lld stage(s) (hidden layers %s)%s; %lld train / %lld "
        "test examples per pipeline; # layers: %lld x %lld units  # minibatch: %lld (%lld microbatches)  "
        "# epoch: %lld  # dtype: %s\n",
        kProgram, schedule.describe().c_str(), data_parallel, ranks, stages, split.c_str(),
        recompute ? ", recompute" : "", static_cast<long long>(train->size()), static_cast<long long>(test->size()),
        layers, units, batchsize, microbatches, epochs, precision.name.c_str());
    std::fflush(stdout);
    examples::extend_with_report(trainer);
  }
  trainer.extend(create_multi_node_snapshot_writer(world), Trigger::epochs(1));

  const AutocastScope autocast(precision.autocast);  // training, evaluation and --profile
  if (flags.get_int("profile") != 0) {
    profile(*pipe, *world, train, batchsize, examples::rank_out(flags, rank));
    return 0;
  }
  examples::resume(trainer, *world, flags, kProgram);
  const auto checkpoint_writer = examples::setup_checkpoints(
      trainer, world, flags, kProgram, schedule.describe() + ", dp " + std::to_string(data_parallel));
  trainer.run();
  examples::print_checkpoint_summary(checkpoint_writer.get(), rank);
  const Observation metrics = multi_node_evaluator ? multi_node_evaluator->evaluate() : pipeline_evaluator->evaluate();
  examples::print_final_metrics(metrics, rank);  // every rank takes part
  return 0;
}
