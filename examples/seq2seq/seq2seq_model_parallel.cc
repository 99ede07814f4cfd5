// ChainerMN's model-parallel seq2seq on exactly 2 ranks, translating numbers into English words
// ("1204" -> "one thousand two hundred four"; or any sentence pairs from a TSV file):
//   rank 0: the Encoder (EmbedID + a multi-node NStepLSTM that sends its final state to rank 1);
//   rank 1: the Decoder (a multi-node NStepLSTM that receives it, EmbedID + Linear to the
//           vocabulary), the loss (teacher forcing) and greedy decoding.
// Both ranks build the same data and draw the same batches (the same shuffling seed); rank 0
// reads the sources, rank 1 the targets. Rank 1 sends each step's loss and each evaluation's
// scores to rank 0, which prints the report and a few translations after every epoch.
//
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/seq2seq/seq2seq_model_parallel
#include <sys/stat.h>

#include <cstdio>
#include <sstream>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "comm/transport/communicator.h"
#include "comm/multi_node_training/multi_node_snapshot.h"
#include "data/data.h"
#include "examples/common/flags.h"
#include "examples/seq2seq/seq2seq_data.h"
#include "examples/seq2seq/seq2seq_model.h"
#include "layers/optimizers/adam.h"
#include "training/extensions/evaluator.h"
#include "training/extensions/plot_report.h"
#include "training/extensions/reporting.h"
#include "training/mixed_precision.h"
#include "training/trainer.h"

using namespace tandem;
using namespace tandem::examples;

namespace {

constexpr int kEncoderRank = 0, kDecoderRank = 1;
// Scores and translations travel from rank 1 to rank 0 on their own tag, apart from the
// tensors of the model (tag 0).
constexpr int kReportTag = 1;
// The held-out split does not depend on --seed, so runs with different seeds are comparable.
constexpr std::uint64_t kSplitSeed = 20240601;

std::string encode(const Observation& observation) {
  std::ostringstream out;
  out.precision(17);
  for (const auto& [key, value] : observation) out << key << ' ' << value << '\n';
  return out.str();
}

// std::stod, unlike operator>>, reads back the "nan" and "inf" that a diverging loss prints.
Observation decode(const std::string& text) {
  std::istringstream in(text);
  Observation observation;
  for (std::string key, value; in >> key >> value;) observation[key] = std::stod(value);
  return observation;
}

// Exact match (the whole sentence right) and token accuracy (position by position, <eos>
// included) of greedy translations.
Observation score(const TokenSequences& hypotheses, const TokenSequences& references) {
  double exact = 0, right = 0, tokens = 0;
  for (std::size_t i = 0; i < references.size(); ++i) {
    const auto& h = hypotheses[i];
    const auto& r = references[i];
    exact += h == r;
    for (std::size_t k = 0; k <= r.size(); ++k) {
      const std::int32_t want = k < r.size() ? r[k] : kEos, got = k < h.size() ? h[k] : kEos;
      right += want == got && k <= h.size();
    }
    tokens += static_cast<double>(r.size() + 1);
  }
  return {{"exact_match", exact / static_cast<double>(references.size())}, {"accuracy", right / tokens}};
}

// "1204" when every token is one character (digits), "one two" otherwise.
std::string show_source(const Vocabulary& vocab, const std::vector<std::int32_t>& ids) {
  bool characters = true;
  for (std::int32_t id : ids) characters = characters && vocab.token(id).size() == 1;
  if (!characters) return vocab.join(ids);
  std::string out;
  for (std::int32_t id : ids) out += vocab.token(id);
  return out;
}

// Translates the first few held-out pairs after each epoch: rank 0 encodes, rank 1 decodes
// and sends the words back, rank 0 prints them beside the references.
class ShowTranslations : public Extension {
 public:
  ShowTranslations(CommunicatorPtr comm, std::shared_ptr<Encoder> encoder, std::shared_ptr<Decoder> decoder,
                   const Seq2seqData& data, std::int64_t count, std::int64_t max_length)
      : comm_(std::move(comm)), encoder_(std::move(encoder)), decoder_(std::move(decoder)), data_(data),
        max_length_(max_length) {
    std::vector<std::int64_t> first(std::min(count, data.test->size()));
    for (std::size_t i = 0; i < first.size(); ++i) first[i] = static_cast<std::int64_t>(i);
    batch_ = data.test->get_batch(first);
  }
  std::string name() const override { return "ShowTranslations"; }
  void operator()(Trainer&) override {
    NoGradGuard no_grad;
    TrainModeGuard test_mode(false);
    const TokenSequences sources = unpad(batch_[0]), references = unpad(batch_[1]);
    if (comm_->rank() == kEncoderRank) {
      encoder_->forward(sources);
      std::istringstream hypotheses(comm_->recv_obj(kDecoderRank, kReportTag));
      std::string hypothesis;
      for (std::size_t i = 0; i < sources.size() && std::getline(hypotheses, hypothesis); ++i) {
        const std::string source = show_source(data_.source_vocab, sources[i]);
        const std::string reference = data_.target_vocab.join(references[i]);
        if (hypothesis == reference) std::printf("  %s -> %s\n", source.c_str(), hypothesis.c_str());
        else std::printf("  %s -> %s   (reference: %s)\n", source.c_str(), hypothesis.c_str(), reference.c_str());
      }
      std::fflush(stdout);
    } else {
      std::string lines;
      for (const auto& h : decoder_->translate({}, {}, static_cast<std::int64_t>(sources.size()), max_length_))
        lines += data_.target_vocab.join(h) + "\n";
      comm_->send_obj(lines, kEncoderRank, kReportTag);
    }
  }

 private:
  CommunicatorPtr comm_;
  std::shared_ptr<Encoder> encoder_;
  std::shared_ptr<Decoder> decoder_;
  const Seq2seqData& data_;
  std::int64_t max_length_;
  Example batch_;
};

// --data-dir: a TSV file, or a directory holding pairs.tsv.
std::string tsv_path(const std::string& data_dir) {
  struct stat info {};
  if (::stat(data_dir.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) return data_dir + "/pairs.tsv";
  return data_dir;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags("seq2seq_model_parallel",
              "ChainerMN's model-parallel seq2seq over 2 ranks (encoder on rank 0, decoder on rank 1), translating\n"
              "numbers into English words. Run with: /usr/bin/mpiexec.mpich -n 2 seq2seq_model_parallel [flags]");
  flags.add_int("batchsize", 64, "sentence pairs per minibatch");
  flags.add_int("epoch", 3, "epochs to train");
  flags.add_int("unit", 128, "units of the embeddings and the LSTM states");
  flags.add_int("layer", 1, "LSTM layers of the encoder and of the decoder");
  flags.add_string("out", "result", "directory for the log and snapshots (rank 1 writes to <out>/rank1)");
  flags.add_string("resume", "", "'latest': continue from the newest snapshot that both ranks completed");
  flags.add_string("data-dir", "", "a TSV file of 'source<TAB>target' lines of space-separated tokens, or a "
                   "directory holding pairs.tsv (none: generate the numbers task)");
  flags.add_int("numbers", 1000000, "without --data-dir: the numbers 0 .. numbers-1 make the corpus");
  flags.add_int("test-size", 10000, "pairs held out from training, to evaluate on");
  flags.add_int("train-size", 100000, "at most this many pairs to train on, drawn from the others (0: all "
                "of them)");
  flags.add_int("eval-size", 1000, "held-out pairs evaluated after each epoch (all of them at the end)");
  flags.add_int("seed", 0, "random seed (initialisation and shuffling; the held-out split is fixed)");
  flags.add_int("gpu", -1, "GPU to use, -1 for the CPU (needs a build with --config=cuda)");
  examples::add_dtype_flag(flags);
  examples::add_communicator_flag(flags);
  const int status = examples::parse_command_line(flags, argc, argv, "seq2seq_model_parallel",
                                                  {"batchsize", "epoch", "unit", "layer", "eval-size"});
  if (status >= 0) return status;
  const long long batchsize = flags.get_int("batchsize"), epochs = flags.get_int("epoch");
  const long long eval_size = flags.get_int("eval-size");
  // From here an exception on one rank aborts both (the communicator's handler).
  auto comm = create_communicator(flags.get_string("communicator"));
  const int rank = comm->rank();
  TANDEM_CHECK(comm->size() == 2, "seq2seq_model_parallel runs on exactly 2 ranks (mpiexec.mpich -n 2), not ",
               comm->size());

  const std::string data_dir = flags.get_string("data-dir");
  const Seq2seqData data = make_seq2seq_data(
      data_dir.empty() ? number_pairs(flags.get_int("numbers")) : read_tsv_pairs(tsv_path(data_dir)),
      flags.get_int("test-size"), flags.get_int("train-size"), kSplitSeed);
  // Each rank reads its own side of the same batches: they must have built the same data.
  const std::string digest = std::to_string(data.digest) + " " + std::to_string(data.train->size());
  TANDEM_CHECK(comm->bcast_obj(digest, kEncoderRank) == digest, "seq2seq_model_parallel: rank ", rank,
               " built other data than rank 0 (does --data-dir hold the same file on both hosts?)");

  Seq2seqOptions options;
  options.layers = flags.get_int("layer");
  options.units = flags.get_int("unit");
  options.source_vocab = data.source_vocab.size();
  options.target_vocab = data.target_vocab.size();
  manual_seed(static_cast<std::uint64_t>(flags.get_int("seed")) + rank);
  std::shared_ptr<Encoder> encoder;
  std::shared_ptr<Decoder> decoder;
  std::shared_ptr<Link> model;
  LossFunction loss;
  Evaluator::EvalFunction eval;
  // Room for a few words too many, in the translations of a model still learning.
  const std::int64_t max_length = data.max_target_length + 5;
  if (rank == kEncoderRank) {
    model = encoder = std::make_shared<Encoder>(options, comm, kDecoderRank);
    // The delegate is the loss here: backward on it receives the state's gradient. The
    // observation (loss, accuracy) comes from rank 1.
    loss = [encoder, comm](const Example& batch) {
      const Variable delegate = encoder->forward(unpad(batch[0])).delegate;
      return LossResult{delegate, decode(comm->recv_obj(kDecoderRank, kReportTag))};
    };
    eval = [encoder, comm](const Example& batch) {
      encoder->forward(unpad(batch[0]));
      return decode(comm->recv_obj(kDecoderRank, kReportTag));
    };
  } else {
    model = decoder = std::make_shared<Decoder>(options, comm, kEncoderRank);
    loss = [decoder, comm](const Example& batch) {
      const DecoderLoss result = decoder->loss({}, {}, unpad(batch[1]));
      const Observation observation{{"loss", result.loss.data().item()}, {"accuracy", result.accuracy}};
      comm->send_obj(encode(observation), kEncoderRank, kReportTag);
      return LossResult{result.loss, observation};
    };
    eval = [decoder, comm, max_length](const Example& batch) {
      const TokenSequences references = unpad(batch[1]);
      const auto hypotheses = decoder->translate({}, {}, static_cast<std::int64_t>(references.size()), max_length);
      const Observation observation = score(hypotheses, references);
      comm->send_obj(encode(observation), kEncoderRank, kReportTag);
      return observation;
    };
  }

  auto optimizer = std::make_shared<Adam>();
  // --gpu: each rank's part of the model on its GPU; received tensors land there too.
  const Device device = examples::training_device(flags, "seq2seq_model_parallel", comm->intra_rank());
  comm->set_device(device);
  model->to(device);
  const TrainingPrecision precision = training_precision(flags.get_string("dtype"));
  convert_model(*model, precision);
  optimizer->setup(model);
  // Both ranks skip a step whose gradients overflowed on either (mixed_f16): each holds half the model.
  apply_precision(*optimizer, precision,
                  [comm](double count) { return comm->allreduce(full({}, count, DType::f64)).item(); });
  // The same seed on both ranks: the same order of pairs, so rank 1 decodes what rank 0 encoded.
  auto train_iter = std::make_shared<SerialIterator>(data.train, batchsize, true, true,
                                                     static_cast<std::uint64_t>(flags.get_int("seed")));
  // Evaluation batches are larger: greedy decoding runs one step at a time over the batch.
  const std::int64_t eval_batch = 500;
  DatasetPtr eval_subset =
      std::make_shared<SubDataset>(data.test, 0, std::min<std::int64_t>(eval_size, data.test->size()));
  auto updater = std::make_shared<StandardUpdater>(train_iter, optimizer, loss);
  const std::string out = rank == kEncoderRank ? flags.get_string("out") : flags.get_string("out") + "/rank1";
  Trainer trainer(updater, Trigger::epochs(epochs), out, model);
  trainer.extend(std::make_shared<Evaluator>(std::make_shared<SerialIterator>(eval_subset, eval_batch, false, false),
                                             eval));
  if (rank == kEncoderRank) {
    std::printf("seq2seq_model_parallel: %lld train / %lld held-out pairs (%lld evaluated per epoch); vocabulary "
                "%lld -> %lld; # unit: %lld  # layer: %lld  # minibatch: %lld  # epoch: %lld  # dtype: %s\n",
                static_cast<long long>(data.train->size()), static_cast<long long>(data.test->size()),
                static_cast<long long>(eval_subset->size()), static_cast<long long>(options.source_vocab),
                static_cast<long long>(options.target_vocab), static_cast<long long>(options.units),
                static_cast<long long>(options.layers), batchsize, epochs, precision.name.c_str());
    auto log = std::make_shared<LogReport>();
    trainer.extend(log);
    trainer.extend(std::make_shared<PrintReport>(
        log, std::vector<std::string>{"epoch", "main/loss", "main/accuracy", "validation/main/accuracy",
                                      "validation/main/exact_match", "elapsed_time"}));
    trainer.extend(std::make_shared<ProgressBar>());
    // <out>/loss.png and accuracy.png (and .svg, .dat) every epoch (needs gnuplot); the
    // evaluation reports no loss, only accuracies.
    trainer.extend(std::make_shared<PlotReport>(std::vector<std::string>{"main/loss"}, "epoch", Trigger::epochs(1),
                                                "loss.png"));
    trainer.extend(std::make_shared<PlotReport>(
        std::vector<std::string>{"main/accuracy", "validation/main/accuracy", "validation/main/exact_match"}, "epoch",
        Trigger::epochs(1), "accuracy.png"));
  }
  trainer.extend(std::make_shared<ShowTranslations>(comm, encoder, decoder, data, 4, max_length), Trigger::epochs(1));
  trainer.extend(create_multi_node_snapshot_writer(comm), Trigger::epochs(1));

  const std::string resume = flags.get_string("resume");
  TANDEM_CHECK(resume.empty() || resume == "latest", "seq2seq_model_parallel: --resume takes 'latest' (the newest "
               "snapshot that both ranks completed)");
  if (!resume.empty()) {
    trainer.load_snapshot(latest_complete_snapshot(*comm, out).path);
    if (rank == kEncoderRank) std::printf("resumed at iteration %lld\n", static_cast<long long>(trainer.iteration()));
  }
  // Training and evaluation (the final one too) in the chosen precision.
  const AutocastScope autocast(precision.autocast);
  trainer.run();

  // The whole held-out set, both ranks taking part.
  Evaluator final_evaluator(std::make_shared<SerialIterator>(data.test, eval_batch, false, false), eval);
  const Observation final_metrics = final_evaluator.evaluate();
  if (rank == kEncoderRank)
    std::printf("final held-out exact match: %.4f  token accuracy: %.4f  (%lld pairs never trained on)\n",
                final_metrics.at("exact_match"), final_metrics.at("accuracy"),
                static_cast<long long>(data.test->size()));
  return 0;
}
