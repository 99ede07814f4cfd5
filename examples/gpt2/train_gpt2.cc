// GPT-2 on the King James Bible (Debian's bible-kjv), tokenised with GPT-2's tokenizer
// (data/tokenizer), trained tensor x pipeline x data parallel (with ZeRO) over the ranks of an MPI
// job: ranks = --tp x --pp x data-parallel replicas. The default model is GPT-2 small (124M);
// --layers, --dim, --heads and --context make smaller ones.
//
// The text: the 66 books, every 11th (Judges, 2 Kings, Esther, Ecclesiastes, Ezekiel, Jonah)
// held out for validation (--validation-every), each book a document after an <|endoftext|>;
// tokenised once and cached (data/token_corpus.h, --cache). --data FILE trains on any UTF-8 text
// instead (its paragraphs as documents). Training sequences are consecutive windows of
// --seq-len tokens of the training books, shuffled with --seed.
//
// The same flags give the same model and training on any number of ranks (the weights are
// seeded by layer, every rank iterates the same global batches, each data replica computes its
// rows): the losses of 1 process, tp 2, pp 2, dp 2 with ZeRO 3 and tp 2 x pp 2 agree to f32
// rounding. AdamW as GPT-2 trained (PyTorch's AdamW: betas 0.9 and 0.95, decay on the matrices and
// embeddings only), the learning rate warmed up linearly over --warmup steps and then decayed
// by a cosine to --min-lr-ratio x --lr at the last step, gradients clipped to a global norm of
// --clip (the norm over the whole model, however it is split). The token embedding and the
// head are one tensor: with pipeline stages, the first and last stage each hold it and add their
// gradients every step (comm/model_parallel/tied_parameters.h; under zbv both stages are on rank 0,
// which adds them itself).
//
// Rank 0 prints a progress bar and a row per --eval-interval steps (training and validation
// loss), writes <out>/log and <out>/loss.png, and at the end --sample tokens after --prompt,
// drawn with --temperature and --top-k through a key/value cache (on a one-process copy of the
// model, loaded from a checkpoint of the run when it is split over ranks).
//
//   bazel build -c opt //examples/gpt2:train_gpt2
//   bazel-bin/examples/gpt2/train_gpt2 --steps 50                                   # 124M, 1 process
//   bazel-bin/examples/gpt2/train_gpt2 --layers 2 --dim 128 --heads 4 --context 128 --seq-len 64
//   /usr/bin/mpiexec.mpich -n 4 bazel-bin/examples/gpt2/train_gpt2 --tp 2 --pp 2 --microbatches 4
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/gpt2/train_gpt2 --pp 2 --schedule zbv --microbatches 4
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/gpt2/train_gpt2 --zero 3
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "comm/checkpoint/training_checkpoint.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "comm/model_parallel/gradient_norm.h"
#include "comm/model_parallel/tied_parameters.h"
#include "comm/pipeline/layout.h"
#include "comm/pipeline/pipeline.h"
#include "comm/pipeline/schedule.h"
#include "core/memory_stats.h"
#include "data/data.h"
#include "data/text_corpus.h"
#include "data/token_corpus.h"
#include "data/tokenizer/gpt2_tokenizer.h"
#include "examples/common/flags.h"
#include "examples/gpt2/gpt2_model.h"
#include "examples/lm/replica_batches.h"
#include "examples/mnist/multi_rank.h"
#include "layers/optimizers/adam.h"
#include "training/extensions/evaluator.h"
#include "training/extensions/plot_report.h"
#include "training/extensions/reporting.h"
#include "training/lr_schedule.h"
#include "training/trainer.h"

using namespace tandem;

namespace {

constexpr const char* kProgram = "train_gpt2";

std::string read_file(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK(in, kProgram, ": cannot read ", flag, " ", path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The documents to train on: the Bible's books (printed by `bible`, or read from --kjv-file), or
// the paragraphs of --data.
std::vector<TextDocument> documents(const std::string& data, const std::string& kjv_file) {
  if (data.empty()) return split_kjv_books(kjv_file.empty() ? read_kjv_text() : read_file(kjv_file, "--kjv-file"));
  std::vector<TextDocument> out;
  const std::vector<std::string> texts = split_documents(read_file(data, "--data"));
  for (std::size_t i = 0; i < texts.size(); ++i) out.push_back({data + " #" + std::to_string(i + 1), texts[i]});
  return out;
}

// The wall time of each step (from one step's report to the next), for the speed line at the
// end: the median over the steps after the first two (warm-up), so occasional evaluations and
// saves between steps do not count.
class StepTimer : public Extension {
 public:
  std::string name() const override { return "StepTimer"; }
  void observe(Trainer&, const Observation&) override {
    const auto now = std::chrono::steady_clock::now();
    if (seen_++ > 0) ms_.push_back(std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
  }
  void operator()(Trainer&) override {}
  // The median step in ms, or 0 before three steps.
  double median_ms() const {
    if (ms_.size() < 3) return 0;
    std::vector<double> t(ms_.begin() + 1, ms_.end());
    std::sort(t.begin(), t.end());
    return t.size() % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]);
  }
  std::size_t timed() const { return ms_.size() < 3 ? 0 : ms_.size() - 1; }

 private:
  std::chrono::steady_clock::time_point last_;
  std::int64_t seen_ = 0;
  std::vector<double> ms_;
};

// The first `batches` whole batches of `dataset` (all when 0).
DatasetPtr first_batches(DatasetPtr dataset, long long batches, long long batchsize) {
  long long n = dataset->size() / batchsize * batchsize;
  if (batches > 0) n = std::min(n, batches * batchsize);
  TANDEM_CHECK(n >= batchsize, kProgram, ": the validation text holds ", dataset->size(),
               " sequences, fewer than one batch of ", batchsize);
  return n == dataset->size() ? dataset : split_dataset(dataset, n).first;
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags(kProgram,
                        "GPT-2 on the King James Bible, tensor x pipeline x data parallel with ZeRO.\n"
                        "Run with: /usr/bin/mpiexec.mpich -n N train_gpt2 [flags] (or without mpiexec: 1 rank)");
  flags.add_string("data", "", "a UTF-8 text file to train on (empty: the King James Bible, by book)");
  flags.add_string("kjv-file", "",
                   "the King James Bible as `bible \"Gen1:1-Rev22:21\"` prints it, from a file (for a machine without "
                   "bible-kjv; empty: run bible)");
  flags.add_string("cache", "", "the tokenised text's cache file (empty: the user's cache folder)");
  flags.add_int("validation-every", 11, "every N-th document (book) is held out for validation");
  flags.add_string("tokenizer", "", "the folder of GPT-2's encoder.json and vocab.bpe (empty: the installed one)");
  flags.add_int("layers", 12, "transformer blocks (GPT-2 small: 12)");
  flags.add_int("dim", 768, "model width (GPT-2 small: 768)");
  flags.add_int("heads", 12, "attention heads (a multiple of --tp)");
  flags.add_int("context", 1024, "positions the model knows (wpe's rows)");
  flags.add_int("vocabulary-multiple", 128, "wte's rows padded to a multiple of this (1: none)");
  flags.add_int("seq-len", 256, "tokens per training sequence (at most --context)");
  flags.add_int("batchsize", 8, "sequences per batch (global: split over the data-parallel replicas)");
  flags.add_int("steps", 200, "training steps");
  flags.add_double("lr", 6e-4, "the peak learning rate");
  flags.add_double("min-lr-ratio", 0.1, "the learning rate at the last step, as a fraction of --lr");
  flags.add_int("warmup", 20, "steps of linear warmup");
  flags.add_double("weight-decay", 0.1, "AdamW's decoupled weight decay (matrices and embeddings)");
  flags.add_double("beta2", 0.95, "AdamW's beta2");
  flags.add_double("clip", 1.0, "clip the gradients' global norm to this (0: no clipping)");
  flags.add_int("tp", 1, "tensor-parallel ranks per stage");
  flags.add_int("pp", 1, "pipeline ranks");
  flags.add_int("cp", 1, "context-parallel ranks: each sequence's positions split over them (comm/context_parallel)");
  flags.add_int("cp-ulysses", 1,
                "context parallelism's all-to-all groups: 1 ring attention, --cp all-to-all (Ulysses), between: both");
  flags.add_string("cp-layout", "balanced",
                   "how positions split over the --cp ranks: balanced (2 chunks each, causal work even) or contiguous");
  flags.add_int("microbatches", 1, "microbatches per batch (per replica)");
  flags.add_string("schedule", "1f1b",
                   "pipeline schedule: gpipe, 1f1b or interleaved (each also with -dw), or a zero-bubble one: zb-h1, "
                   "zb-h2 or zbv (2 stages per rank in a V: rank 0 holds the first and the last, both ends of the "
                   "tied embedding)");
  flags.add_int("stages-per-rank", 1,
                "pipeline stages per rank (more than 1 with --schedule interleaved; zbv: 2, its default)");
  flags.add_int("sequence-parallel", 0,
                "1: Megatron's sequence parallelism with --tp (layer norms, residuals and the head's norm on each "
                "tensor rank's positions only)");
  flags.add_int("zero", 0,
                "ZeRO stage over the data-parallel replicas (1: optimizer state, 2: and gradients, 3: and parameters)");
  flags.add_int("eval-interval", 20, "steps between validation runs and log rows");
  flags.add_int("val-batches", 4, "validation batches per evaluation (0: the whole validation text)");
  flags.add_int("sample", 64, "tokens to sample from the trained model at the end (0: none)");
  flags.add_double("temperature", 0.8, "sampling temperature (0: greedy)");
  flags.add_int("top-k", 40, "sample among the k most likely tokens (0: all)");
  flags.add_string("prompt", "In the beginning", "the text the sample continues");
  flags.add_int("progress", 1, "print a progress bar (0: only the table)");
  flags.add_string("out", "result", "directory for the log and plots (rank r > 0: <out>/rank<r>)");
  examples::add_checkpoint_flags(flags);
  flags.add_int("seed", 0, "random seed (initialisation, batch order, sampling)");
  flags.add_int("gpu", -1, "GPU to use, -1 for the CPU (needs a build with --config=cuda)");
  const int status = examples::parse_command_line(
      flags, argc, argv, kProgram,
      {"layers", "dim", "heads", "context", "seq-len", "batchsize", "steps", "tp", "pp", "cp", "cp-ulysses",
       "microbatches", "stages-per-rank", "eval-interval", "vocabulary-multiple"});
  if (status >= 0) return status;
  // The text, tokenised once, read before MPI starts (bible runs in a child process): every rank
  // reads the same cache (or makes the same tokens).
  const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(flags.get_string("tokenizer"));
  const std::string data = flags.get_string("data");
  std::string cache = flags.get_string("cache");
  if (cache.empty()) cache = data.empty() ? default_kjv_cache_path() : "";
  const std::vector<TextDocument> docs = documents(data, flags.get_string("kjv-file"));
  auto world = create_communicator("naive");
  const int rank = world->rank();
  const long long tp = flags.get_int("tp"), pp = flags.get_int("pp"), batchsize = flags.get_int("batchsize"),
                  microbatches = flags.get_int("microbatches"), per_rank = examples::pipeline_stages_per_rank(flags),
                  steps = flags.get_int("steps"), eval_interval = flags.get_int("eval-interval"),
                  seq_len = flags.get_int("seq-len");
  const auto seed = static_cast<std::uint64_t>(flags.get_int("seed"));
  const long long cp = flags.get_int("cp");
  TANDEM_CHECK(cp >= 1 && world->size() % (tp * pp * cp) == 0, kProgram, ": --tp ", tp, " x --pp ", pp, " x --cp ", cp,
               " must divide the ", world->size(), " rank(s)");
  const long long dp = world->size() / (tp * pp * cp);
  const std::string cp_layout = flags.get_string("cp-layout");
  if (cp > 1) {
    TANDEM_CHECK(cp_layout == "balanced" || cp_layout == "contiguous", kProgram,
                 ": --cp-layout must be balanced or contiguous, got '", cp_layout, "'");
    const long long pieces = cp_layout == "balanced" ? 2 * cp : cp;
    TANDEM_CHECK(seq_len % pieces == 0, kProgram, ": --seq-len ", seq_len, " must split into ", pieces,
                 " equal pieces for --cp ", cp, " (", cp_layout, "), so that every rank's mean loss weighs alike");
    TANDEM_CHECK(flags.get_int("sequence-parallel") == 0, kProgram,
                 ": --cp and --sequence-parallel both split the sequence: use one");
  }
  TANDEM_CHECK(batchsize % dp == 0 && microbatches <= batchsize / dp, kProgram, ": --batchsize ", batchsize,
               " must split evenly over the ", dp, " data-parallel replica(s), each with at least --microbatches ",
               microbatches, " sequences");
  TANDEM_CHECK(seq_len <= flags.get_int("context"), kProgram, ": --seq-len ", seq_len, " exceeds --context ",
               flags.get_int("context"));

  const int validation_every = static_cast<int>(flags.get_int("validation-every"));
  const TokenCorpus corpus = cache.empty() ? make_token_corpus(docs, tokenizer, validation_every)
                                           : load_or_make_token_corpus(docs, tokenizer, validation_every, cache);
  DatasetPtr train = make_sequence_dataset(corpus.train, seq_len, seq_len);
  DatasetPtr validation = make_sequence_dataset(corpus.validation, seq_len, seq_len);

  examples::GPT2Config config;
  config.vocabulary = tokenizer.vocabulary_size();
  const long long multiple = std::max<long long>(1, flags.get_int("vocabulary-multiple"));
  config.padded_vocabulary = (config.vocabulary + multiple - 1) / multiple * multiple;
  config.context = flags.get_int("context");
  config.dim = flags.get_int("dim");
  config.heads = flags.get_int("heads");
  config.layers = flags.get_int("layers");
  config.seed = seed;
  config.sequence_parallel = flags.get_int("sequence-parallel") != 0;
  TANDEM_CHECK(!config.sequence_parallel || tp > 1, kProgram,
               ": --sequence-parallel splits the sequence over the "
               "tensor-parallel ranks: it needs --tp 2 or more");
  // Every error in schedule_by_name is the same on every rank (the same flags).
  const pipeline::Schedule schedule = pipeline::schedule_by_name(
      flags.get_string("schedule"), static_cast<int>(pp), static_cast<int>(per_rank), static_cast<int>(microbatches));
  const long long stages = pp * per_rank;
  TANDEM_CHECK(config.layers >= stages, kProgram, ": --layers ", config.layers, " cannot fill ", stages,
               " pipeline stages: every stage needs a block");

  const pipeline::ParallelLayout layout =
      pipeline::make_parallel_layout(world, static_cast<int>(tp), static_cast<int>(pp));
  // Context parallelism inside the data group: its ranks d cp .. (d + 1) cp - 1 split replica d's
  // sequences (examples/lm/replica_batches.h); gradients average over the whole data group.
  std::shared_ptr<ContextParallel> context_parallel;
  if (cp > 1) {
    const int ranks = static_cast<int>(cp);
    context_parallel = std::make_shared<ContextParallel>(
        layout.data->split(layout.data_rank / ranks, layout.data_rank),
        cp_layout == "balanced" ? SequenceLayout::balanced(seq_len, ranks) : SequenceLayout::contiguous(seq_len, ranks),
        static_cast<int>(flags.get_int("cp-ulysses")));
    config.context_parallel = context_parallel;
  }
  const CommunicatorPtr tensor_group = tp > 1 ? layout.tensor : nullptr;
  // This rank's stages, where the schedule places them (zbv's V: stage_rank r holds r and 2 pp - 1 - r).
  std::vector<LinkPtr> my_stages = examples::make_gpt2_stages(config, static_cast<int>(stages),
                                                              schedule.stages_of_rank(layout.stage_rank), tensor_group);
  const Device device = examples::training_device(flags, kProgram, world->intra_rank());
  world->set_device(device);
  for (LinkPtr& stage : my_stages) stage->to(device);
  auto pipe = std::make_shared<pipeline::Pipeline>(layout.pipeline, schedule, my_stages);

  // AdamW as PyTorch's (adam.h): decay lr x wd on the "W" parameters (matrices, embeddings).
  const double lr = flags.get_double("lr");
  AdamOptions adam_options;
  adam_options.alpha = lr;
  adam_options.beta1 = 0.9;
  adam_options.beta2 = flags.get_double("beta2");
  adam_options.eps = 1e-8;
  adam_options.eps_on_corrected_v = true;
  adam_options.weight_decay_rate = lr * flags.get_double("weight-decay");
  adam_options.decays = [](const std::string& name) {
    return name.size() >= 2 && name.compare(name.size() - 2, 2, "/W") == 0;
  };
  auto adam = std::make_shared<Adam>(adam_options);
  std::shared_ptr<Optimizer> optimizer = adam;
  const int zero = static_cast<int>(flags.get_int("zero"));
  // The gradients average over the data group: the replicas and, inside each, its --cp ranks.
  const long long data_ranks = dp * cp;
  TANDEM_CHECK(zero >= 0 && zero <= 3 && (zero == 0 || data_ranks > 1), kProgram, ": --zero ", zero,
               " needs 1 to 3 and more than one data-parallel rank (here ", data_ranks, ")");
  // The tied embedding: the copies on the first and last stage add their gradients before the
  // data-parallel average, which therefore waits for backward to end (no overlap).
  // So do the sequence-parallel parameters' parts, summed over the tensor group. The copies are on
  // two ranks of the pipeline (their tie group), or both on one (zbv's V: rank 0 holds the first
  // and the last stage), which then sums them itself: its tie group is none.
  const bool tied_stages = stages > 1;
  if (data_ranks > 1) {
    DataParallelOptions parallel;
    parallel.zero = zero;
    parallel.overlap = !tied_stages && !config.sequence_parallel;
    optimizer = create_multi_node_optimizer(optimizer, layout.data, parallel);
  }
  std::vector<std::string> tied_paths;
  std::set<std::string> not_counted;
  if (tied_stages) {
    for (const auto& [path, param] : pipe->namedparams()) {
      const std::string name = path.rfind('/', 0) == 0 ? path.substr(1) : path;
      for (int s : {0, static_cast<int>(stages) - 1})
        if (name == std::to_string(s) + "/wte/W") {
          tied_paths.push_back(path);
          if (s != 0) not_counted.insert(path);
        }
    }
    const bool holds = !tied_paths.empty(), holds_both = tied_paths.size() == 2;
    // Collective over the pipeline: every rank splits, the holders of one copy form the group.
    const CommunicatorPtr tie_group = layout.pipeline->split(holds ? 0 : 1, layout.pipeline->rank());
    TANDEM_CHECK(!holds_both || tie_group->size() == 1, kProgram, ": stage rank ", layout.stage_rank,
                 " holds both copies of the tied embedding, yet ", tie_group->size() - 1,
                 " other rank(s) hold one too");
    if (holds) tie_parameters(*optimizer, holds_both ? nullptr : tie_group, tied_paths);
  }
  if (config.sequence_parallel) {
    std::vector<std::string> parts;
    for (const int s : pipe->stage_ids())
      for (const std::string& path :
           std::static_pointer_cast<examples::GPT2Stage>(pipe->stage(s))->sequence_parallel_parameters())
        parts.push_back(std::to_string(s) + "/" + path);
    sum_gradients_over(*optimizer, layout.tensor, parts);
  }
  optimizer->setup(pipe);
  const CommunicatorPtr model_group = tp * pp > 1 ? world->split(layout.data_rank, rank) : nullptr;
  const double clip = flags.get_double("clip");
  if (clip > 0)
    optimizer->add_hook(model_parallel_gradient_clipping(clip, *optimizer, tensor_group, model_group, not_counted));

  // Every rank iterates the same global batches; each replica computes its rows. The learning
  // rate follows the schedule of the update about to be made (optimizer.t(): resumes continue it).
  const long long warmup = std::min<long long>(flags.get_int("warmup"), steps - 1);
  const double min_ratio = flags.get_double("min-lr-ratio");
  const LossFunction replica_step = examples::replica_loss(pipe, layout, context_parallel);
  const LossFunction step = [=](const Example& batch) {
    adam->hyperparam.eta = warmup_cosine(adam->t(), warmup, steps, min_ratio);
    LossResult result = replica_step(batch);
    result.observation["lr"] = lr * adam->hyperparam.eta;
    return result;
  };
  auto train_iter = std::make_shared<SerialIterator>(train, batchsize, true, true, seed);
  auto updater = std::make_shared<StandardUpdater>(train_iter, optimizer, step);
  Trainer trainer(updater, Trigger::iterations(steps), examples::rank_out(flags, rank), pipe);
  auto val_iter = std::make_shared<SerialIterator>(first_batches(validation, flags.get_int("val-batches"), batchsize),
                                                   batchsize, false, false);
  trainer.extend(examples::replica_evaluator(val_iter, pipe, layout, context_parallel),
                 Trigger::iterations(eval_interval));

  long long parameters = 0;
  for (const LinkPtr& stage : my_stages) parameters += stage->count_params();
  if (rank == 0) {
    std::printf("%s: %s: %zu train / %zu validation tokens (%zu / %zu documents), cache %s\n", kProgram,
                data.empty() ? "King James Bible" : data.c_str(), corpus.train.size(), corpus.validation.size(),
                corpus.train_documents.size(), corpus.validation_documents.size(),
                cache.empty() ? "none" : cache.c_str());
    std::printf(
        "model: GPT-2, %lld blocks x %lld wide, %lld heads, context %lld, vocabulary %lld (%lld rows); "
        "%lld parameters, rank 0 holds %lld; ranks %d = tp %lld x pp %lld x cp %lld x dp %lld, zero %d%s; %s; batch "
        "%lld x "
        "%lld tokens, %lld steps, AdamW lr %g (warmup %lld, cosine to x%g), clip %g\n",
        static_cast<long long>(config.layers), static_cast<long long>(config.dim), static_cast<long long>(config.heads),
        static_cast<long long>(config.context), static_cast<long long>(config.vocabulary),
        static_cast<long long>(config.rows()), static_cast<long long>(config.parameters()), parameters, world->size(),
        tp, pp, cp, dp, zero, config.sequence_parallel ? ", sequence parallel" : "", schedule.describe().c_str(),
        batchsize, seq_len, steps, lr, warmup, min_ratio, clip);
    std::fflush(stdout);
    auto log = std::make_shared<LogReport>(Trigger::iterations(eval_interval));
    trainer.extend(log);
    trainer.extend(
        std::make_shared<PrintReport>(
            log, std::vector<std::string>{"iteration", "main/loss", "validation/main/loss", "main/lr", "elapsed_time"}),
        Trigger::iterations(eval_interval));
    trainer.extend(std::make_shared<PlotReport>(std::vector<std::string>{"main/loss", "validation/main/loss"},
                                                "iteration", Trigger::iterations(eval_interval), "loss.png"));
    if (flags.get_int("progress") != 0) trainer.extend(std::make_shared<ProgressBar>(1));
  }
  char layout_text[160];
  std::snprintf(layout_text, sizeof layout_text, "tp %lld x pp %lld x cp %lld x dp %lld, zero %d, %s%s", tp, pp, cp, dp,
                zero, schedule.describe().c_str(), config.sequence_parallel ? ", sequence parallel" : "");
  const auto checkpoint_writer = examples::setup_checkpoints(trainer, world, flags, kProgram, layout_text);
  auto timer = std::make_shared<StepTimer>();
  trainer.extend(timer, Trigger::iterations(1));
  trainer.run();
  examples::print_checkpoint_summary(checkpoint_writer.get(), rank);
  if (rank == 0) {
    std::printf("memory: %s\n", host_memory_fields(host_memory_stats()).c_str());
    // One line in the benchmarks' format (bench/bench_util.h), for bench/gpt2_124m_bench.sh.
    const double ms = timer->median_ms();
    if (ms > 0) {
      const char* threads = std::getenv("OMP_NUM_THREADS");
      std::printf(
          "name=tandem.train_gpt2.ranks%d lib=tandem threads=%s ranks=%d tp=%lld pp=%lld cp=%lld dp=%lld zero=%d "
          "microbatches=%lld batch=%lld seqlen=%lld d=%lld heads=%lld layers=%lld vocab=%lld iters=%zu "
          "median_ms=%.4f tokens_per_s=%.1f peak_rss_mb=%.1f\n",
          world->size(), threads ? threads : "default", world->size(), tp, pp, cp, dp, zero, microbatches, batchsize,
          seq_len, static_cast<long long>(config.dim), static_cast<long long>(config.heads),
          static_cast<long long>(config.layers), static_cast<long long>(config.vocabulary), timer->timed(), ms,
          static_cast<double>(batchsize * seq_len) / (ms * 1e-3),
          static_cast<double>(host_memory_stats().peak_rss) / 1e6);
    }
  }

  // A sample from a one-process copy of the model: the model itself, or one loaded from a
  // checkpoint of the run (any layout loads into one process).
  const long long length = flags.get_int("sample");
  if (length > 0) {
    std::shared_ptr<examples::GPT2Stage> whole;
    if (world->size() == 1 && stages == 1) {
      whole = std::static_pointer_cast<examples::GPT2Stage>(my_stages[0]);
    } else {
      const std::string directory =
          save_training_checkpoint(*world, trainer, examples::rank_out(flags, 0) + "/sample_checkpoint");
      const CommunicatorPtr self = world->split(rank, 0);
      if (rank == 0) {
        examples::GPT2Config whole_config = config;
        whole_config.context_parallel = nullptr;  // the whole sequence in one process
        whole = std::make_shared<examples::GPT2Stage>(whole_config, 0, 1);
        load_model_checkpoint(*self, *whole, directory);
      }
    }
    if (rank == 0) {
      Generator generator(seed + 1);
      const std::vector<std::int32_t> prompt = tokenizer.encode(flags.get_string("prompt"));
      const std::vector<std::int32_t> tokens = examples::gpt2_generate(
          *whole, prompt, length, flags.get_double("temperature"), flags.get_int("top-k"), generator);
      std::printf("--- sample (temperature %g, top-k %lld) ---\n%s%s\n---\n", flags.get_double("temperature"),
                  static_cast<long long>(flags.get_int("top-k")), flags.get_string("prompt").c_str(),
                  tokenizer.decode(tokens).c_str());
    }
  }
  return 0;
}
