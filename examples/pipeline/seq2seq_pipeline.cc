// The seq2seq number translator (examples/seq2seq: digits -> English words, "1204" -> "one
// thousand two hundred four") as a 2-stage pipeline run by the pipeline runtime
// (comm/pipeline/pipeline.h), with microbatches of different sequence lengths:
//   stage 0 (rank 0): an EncoderStage, a Chain around the one-process Encoder: it takes the
//                     microbatch's source sequences, one i32 tensor [T_i] per example (variable
//                     lengths, no padding), and returns the encoder's final state {hy, cy};
//   stage 1 (rank 1): a DecoderStage, a Chain around the one-process Decoder: it takes
//                     {hy, cy, target sequences...} and returns the loss (teacher forcing),
//                     reporting "loss" and "accuracy" (DecoderLoss) in observation().
// The stages are ordinary Links: the runtime sends {hy, cy} forward and their gradients back.
// On 1 rank both stages live in the one process (2 stages on 1 rank: --schedule 1f1b runs
// interleaved_1f1b(1, 2, M), gpipe runs all forwards then all backwards, zb-h1, zb-h2 and zbv
// run zbv(1, M)): the same model,
// initialised the same (every rank builds both stages from --seed, in the same order, and keeps
// its own), the same batches, the same microbatches, so it is the exact reference of the 2-rank
// run up to float rounding.
//
// Microbatches. Every rank draws the same batches (the same data, the same shuffling seed).
// Each step strips the batch's padding, SORTS its examples by source length (ties by target
// length) and cuts them into --microbatches contiguous groups (sizes differing by at most one,
// the larger first). So the microbatches differ in sequence length: the first holds the
// shortest sources, the last the longest, and each microbatch's sequences are of nearly one
// length (bucketing), where cutting the shuffled batch in order would give every microbatch the
// whole spread. The stage tensors of consecutive microbatches thus have different shapes, which
// the runtime sends with their shapes: nothing is declared. The first batch's microbatches are
// printed at the start.
//
// The loss. The runtime weights microbatch m's loss by its share of the batch's examples
// (examples_m / B). The decoder's loss is a mean per target token (<eos> included), so the
// pipelined loss, and its gradient, is the example-weighted mean of per-microbatch token means:
// microbatches of longer targets count per example, not per token; it is not the unsplit
// batch's per-token mean (and depends on --microbatches). The reported accuracy is weighted the
// same way. The 1-rank run of this program with the same --microbatches computes exactly the
// same thing and is the reference for the 2-rank run.
//
// Evaluation (teacher forcing, the decoder's loss and token accuracy) splits each held-out batch
// the same way (into min(--microbatches, batch) groups) and runs Pipeline::evaluate; rank 0
// prints the per-epoch report and, at the end, the whole held-out set's
// "final validation accuracy: A  loss: L".
//
//   bazel build //examples/pipeline:seq2seq_pipeline
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/pipeline/seq2seq_pipeline --microbatches 4
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/pipeline/seq2seq_pipeline --schedule gpipe
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/pipeline/seq2seq_pipeline --schedule zb-h1
//   bazel-bin/examples/pipeline/seq2seq_pipeline --microbatches 4   # 1 rank: the reference
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "comm/pipeline/pipeline.h"
#include "comm/pipeline/schedule.h"
#include "comm/transport/communicator.h"
#include "data/data.h"
#include "examples/common/flags.h"
#include "examples/mnist/mnist_common.h"  // extend_with_report
#include "examples/seq2seq/seq2seq_data.h"
#include "examples/seq2seq/seq2seq_model.h"
#include "layers/optimizers/adam.h"
#include "training/extensions/evaluator.h"
#include "training/trainer.h"

using namespace tandem;
using namespace tandem::examples;

namespace {

constexpr const char* kProgram = "seq2seq_pipeline";
// The held-out split does not depend on --seed, so runs with different seeds are comparable
// (the same split as seq2seq_model_parallel).
constexpr std::uint64_t kSplitSeed = 20240601;
// Held-out batches: teacher forcing, as cheap as training without the backward.
constexpr std::int64_t kEvalBatch = 256;

// xs[first], xs[first + 1], ...: one i32 sequence [T] each.
TokenSequences to_sequences(const Variables& xs, std::size_t first, const char* who) {
  TANDEM_CHECK(xs.size() > first, who, ": no sequences (", xs.size(), " inputs)");
  TokenSequences sequences;
  for (std::size_t i = first; i < xs.size(); ++i) {
    TANDEM_CHECK(xs[i].data().dim() == 1 && xs[i].data().dtype() == DType::i32, who, ": input ", i,
                 " must be one i32 sequence [T], got ", xs[i].data().description());
    sequences.push_back(xs[i].data().to_vector<std::int32_t>());
  }
  return sequences;
}

// Stage 0: the microbatch's source sequences in, the encoder's final state {hy, cy} out
// ([layers, examples, units] each).
class EncoderStage : public Chain {
 public:
  explicit EncoderStage(const Seq2seqOptions& options)
      : encoder_(add_link("encoder", std::make_shared<Encoder>(options))) {}
  std::string type_name() const override { return "EncoderStage"; }
  Variables forward_many(const Variables& xs) override {
    const MultiNodeNStepRNNResult state = encoder_->forward(to_sequences(xs, 0, "EncoderStage"));
    return {state.hy, state.cy};
  }

 private:
  std::shared_ptr<Encoder> encoder_;
};

// Stage 1: {hy, cy, target sequences...} in, the loss (mean per target token) out.
class DecoderStage : public Chain {
 public:
  explicit DecoderStage(const Seq2seqOptions& options)
      : decoder_(add_link("decoder", std::make_shared<Decoder>(options))) {}
  std::string type_name() const override { return "DecoderStage"; }
  Variables forward_many(const Variables& xs) override {
    TANDEM_CHECK(xs.size() >= 3, "DecoderStage: takes hy, cy and the target sequences, got ", xs.size(), " inputs");
    const DecoderLoss result = decoder_->loss(xs[0], xs[1], to_sequences(xs, 2, "DecoderStage"));
    observation_ = {{"loss", result.loss.data().item()}, {"accuracy", result.accuracy}};
    return {result.loss};
  }
  std::map<std::string, double> observation() const override { return observation_; }

 private:
  std::shared_ptr<Decoder> decoder_;
  std::map<std::string, double> observation_;
};

// The batch's examples without padding, sorted by source length (then target length), cut into
// `count` contiguous groups whose sizes differ by at most one (the larger first): microbatches
// of different sequence lengths, each of nearly one length.
std::vector<pipeline::Microbatch> length_sorted_microbatches(const Example& batch, std::int64_t count) {
  TANDEM_CHECK(batch.size() == 2, kProgram, ": a batch has 2 fields (sources, targets), got ", batch.size());
  const TokenSequences sources = unpad(batch[0]), targets = unpad(batch[1]);
  const auto size = static_cast<std::int64_t>(sources.size());
  TANDEM_CHECK(count >= 1 && count <= size, kProgram, ": cannot cut a batch of ", size, " pairs into ", count,
               " microbatches");
  std::vector<std::int64_t> order(static_cast<std::size_t>(size));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    const auto& sa = sources[static_cast<std::size_t>(a)];
    const auto& sb = sources[static_cast<std::size_t>(b)];
    if (sa.size() != sb.size()) return sa.size() < sb.size();
    return targets[static_cast<std::size_t>(a)].size() < targets[static_cast<std::size_t>(b)].size();
  });
  std::vector<pipeline::Microbatch> microbatches;
  std::int64_t next = 0;
  for (std::int64_t m = 0; m < count; ++m) {
    pipeline::Microbatch mb;
    mb.examples = size / count + (m < size % count ? 1 : 0);
    for (std::int64_t k = next; k < next + mb.examples; ++k) {
      const auto i = static_cast<std::size_t>(order[static_cast<std::size_t>(k)]);
      mb.inputs.push_back(from_vector(sources[i]));
      mb.targets.push_back(from_vector(targets[i]));
    }
    next += mb.examples;
    microbatches.push_back(std::move(mb));
  }
  return microbatches;
}

// "12 pairs, source 5-6 / target 2-9 tokens" for each microbatch.
std::string describe_microbatches(const std::vector<pipeline::Microbatch>& microbatches) {
  std::string out;
  for (std::size_t m = 0; m < microbatches.size(); ++m) {
    const auto span = [](const std::vector<Tensor>& sequences) {
      std::int64_t lo = sequences[0].shape()[0], hi = lo;
      for (const Tensor& t : sequences) lo = std::min(lo, t.shape()[0]), hi = std::max(hi, t.shape()[0]);
      return lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
    };
    const pipeline::Microbatch& mb = microbatches[m];
    out += "  microbatch " + std::to_string(m) + ": " + std::to_string(mb.examples) + " pairs, source " +
           span(mb.inputs) + " / target " + span(mb.targets) + " tokens\n";
  }
  return out;
}

// The schedule of 2 stages on `ranks` (1 or 2) ranks. On 2 ranks: one stage each (zbv holds 2
// stages per rank, 4 on 2 ranks: an error). On 1 rank: 1f1b is Megatron's interleaved schedule
// with both stages on the rank; gpipe all forwards (stage 0 then 1 per microbatch), then all
// backwards; the zero-bubble schedules zbv(1, M), both stages on the rank, each microbatch's
// backward split into B and W.
pipeline::Schedule make_schedule(const std::string& name, int ranks, int microbatches) {
  const bool zero_bubble = name == "zb-h1" || name == "zb-h2" || name == "zbv";
  TANDEM_CHECK(name == "gpipe" || name == "1f1b" || zero_bubble, kProgram,
               ": --schedule is gpipe, 1f1b, zb-h1, zb-h2 or zbv, not '", name, "'");
  TANDEM_CHECK(ranks == 1 || name != "zbv", kProgram,
               ": --schedule zbv holds 2 stages per rank, 4 on 2 ranks; this model has 2 stages: run zbv on 1 rank, "
               "or zb-h1 / zb-h2 on 2");
  if (ranks == 2) return pipeline::schedule_by_name(name, 2, 1, microbatches);
  if (zero_bubble) return pipeline::schedule_by_name("zbv", 1, 2, microbatches);
  if (name == "1f1b") return pipeline::interleaved_1f1b(1, 2, microbatches);
  pipeline::Schedule s;
  s.name = "gpipe";
  s.ranks = 1;
  s.stages = 2;
  s.microbatches = microbatches;
  s.actions.resize(1);
  for (int m = 0; m < microbatches; ++m) {
    s.actions[0].push_back(pipeline::forward(0, m));
    s.actions[0].push_back(pipeline::forward(1, m));
  }
  for (int m = 0; m < microbatches; ++m) {
    s.actions[0].push_back(pipeline::backward(1, m));
    s.actions[0].push_back(pipeline::backward(0, m));
  }
  pipeline::validate(s);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags(kProgram,
              "The seq2seq number translator as a 2-stage pipeline (encoder, decoder) with microbatches sorted by\n"
              "sequence length. Run with: /usr/bin/mpiexec.mpich -n 2 seq2seq_pipeline [flags] (or 1 rank: the\n"
              "same computation in one process)");
  flags.add_int("batchsize", 64, "sentence pairs per minibatch");
  flags.add_int("epoch", 2, "epochs to train");
  flags.add_int("unit", 128, "units of the embeddings and the LSTM states");
  flags.add_int("layer", 1, "LSTM layers of the encoder and of the decoder");
  flags.add_string("schedule", "1f1b",
                   "pipeline schedule: gpipe, 1f1b, or a zero-bubble one: zb-h1 or zb-h2 (2 ranks), zbv (1 rank: "
                   "both stages, with zb-h1 and zb-h2 there)");
  flags.add_int("microbatches", 4, "microbatches per minibatch (sorted by source length)");
  flags.add_string("out", "result", "directory for the log (rank 1 writes to <out>/rank1)");
  flags.add_int("numbers", 1000000, "the numbers 0 .. numbers-1 make the corpus");
  flags.add_int("test-size", 10000, "pairs held out from training, to evaluate on");
  flags.add_int("train-size", 20000, "at most this many pairs to train on, drawn from the others (0: all of them)");
  flags.add_int("eval-size", 1000, "held-out pairs evaluated after each epoch (all of them at the end)");
  flags.add_int("seed", 0, "random seed (initialisation and shuffling; the held-out split is fixed)");
  flags.add_int("gpu", -1, "GPU to use, -1 for the CPU (needs a build with --config=cuda)");
  examples::add_communicator_flag(flags);
  const int status = examples::parse_command_line(
      flags, argc, argv, kProgram,
      {"batchsize", "epoch", "unit", "layer", "microbatches", "numbers", "test-size", "eval-size"});
  if (status >= 0) return status;
  const long long batchsize = flags.get_int("batchsize"), epochs = flags.get_int("epoch"),
                  microbatches = flags.get_int("microbatches"), eval_size = flags.get_int("eval-size");
  const auto seed = static_cast<std::uint64_t>(flags.get_int("seed"));
  // From here an exception on one rank aborts both (the communicator's handler).
  auto comm = create_communicator(flags.get_string("communicator"));
  const int rank = comm->rank(), ranks = comm->size();
  TANDEM_CHECK(ranks == 1 || ranks == 2, kProgram, " runs on 1 or 2 ranks (2 stages), not ", ranks);
  TANDEM_CHECK(microbatches <= batchsize, kProgram, ": --microbatches ", microbatches, " is more than --batchsize ",
               batchsize);
  const pipeline::Schedule schedule =
      make_schedule(flags.get_string("schedule"), ranks, static_cast<int>(microbatches));

  const Seq2seqData data = make_seq2seq_data(number_pairs(flags.get_int("numbers")), flags.get_int("test-size"),
                                             flags.get_int("train-size"), kSplitSeed);
  Seq2seqOptions options;
  options.layers = flags.get_int("layer");
  options.units = flags.get_int("unit");
  options.source_vocab = data.source_vocab.size();
  options.target_vocab = data.target_vocab.size();
  // Both stages built on every rank from the same seed, in the same order: the model starts the
  // same on 1 and on 2 ranks. Each rank keeps the stages it holds (schedule.stages_of_rank).
  manual_seed(seed);
  const std::vector<LinkPtr> all_stages{std::make_shared<EncoderStage>(options),
                                        std::make_shared<DecoderStage>(options)};
  const Device device = examples::training_device(flags, kProgram, comm->intra_rank());
  comm->set_device(device);
  std::vector<LinkPtr> my_stages;
  for (int s : schedule.stages_of_rank(rank)) {
    all_stages[static_cast<std::size_t>(s)]->to(device);
    my_stages.push_back(all_stages[static_cast<std::size_t>(s)]);
  }
  auto pipe = std::make_shared<pipeline::Pipeline>(comm, schedule, my_stages);

  auto optimizer = std::make_shared<Adam>();
  optimizer->setup(pipe);
  // The same seed on every rank: the same batches, so the same microbatches everywhere.
  auto train_iter = std::make_shared<SerialIterator>(data.train, batchsize, true, true, seed);
  const LossFunction loss = [pipe, microbatches](const Example& batch) {
    const pipeline::StepResult step = pipe->step(length_sorted_microbatches(batch, microbatches));
    LossResult result;
    result.loss = Variable(full({}, step.loss, DType::f64));
    result.observation = step.observation;
    result.observation.erase("loss");  // the updater reports the loss itself
    result.backward_done = true;       // the step ran every microbatch's backward
    return result;
  };
  // Every rank passes the real held-out batch (a short last one goes in fewer microbatches).
  const Evaluator::EvalFunction eval = [pipe, microbatches](const Example& batch) {
    const std::int64_t count = std::min<std::int64_t>(microbatches, batch.at(0).shape()[0]);
    const pipeline::StepResult step = pipe->evaluate(length_sorted_microbatches(batch, count));
    Observation observation = step.observation;
    observation["loss"] = step.loss;
    return observation;
  };
  auto updater = std::make_shared<StandardUpdater>(train_iter, optimizer, loss);
  const std::string out = flags.get_string("out") + (rank == 0 ? "" : "/rank" + std::to_string(rank));
  Trainer trainer(updater, Trigger::epochs(epochs), out, pipe);
  DatasetPtr eval_subset =
      std::make_shared<SubDataset>(data.test, 0, std::min<std::int64_t>(eval_size, data.test->size()));
  trainer.extend(
      std::make_shared<Evaluator>(std::make_shared<SerialIterator>(eval_subset, kEvalBatch, false, false), eval));
  if (rank == 0) {
    std::printf(
        "%s: %s; %lld train / %lld held-out pairs (%lld evaluated per epoch); vocabulary %lld -> %lld; "
        "# unit: %lld  # layer: %lld  # minibatch: %lld (%lld microbatches, sorted by source length)  "
        "# epoch: %lld\n",
        kProgram, schedule.describe().c_str(), static_cast<long long>(data.train->size()),
        static_cast<long long>(data.test->size()), static_cast<long long>(eval_subset->size()),
        static_cast<long long>(options.source_vocab), static_cast<long long>(options.target_vocab),
        static_cast<long long>(options.units), static_cast<long long>(options.layers), batchsize, microbatches, epochs);
    // The first batch (drawn by an iterator of the same seed) as the first step will cut it.
    SerialIterator peek(data.train, batchsize, true, true, seed);
    std::printf("the first batch's microbatches:\n%s",
                describe_microbatches(length_sorted_microbatches(peek.next(), microbatches)).c_str());
    std::fflush(stdout);
    examples::extend_with_report(trainer);
  }
  trainer.run();

  // The whole held-out set, every rank taking part.
  Evaluator final_evaluator(std::make_shared<SerialIterator>(data.test, kEvalBatch, false, false), eval);
  const Observation metrics = final_evaluator.evaluate();
  if (rank == 0)
    std::printf("final validation accuracy: %.4f  loss: %.4f\n", metrics.at("accuracy"), metrics.at("loss"));
  return 0;
}
