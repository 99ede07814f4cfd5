// A GPT-style character language model on real English text (Debian's fortunes, or --data),
// trained with tensor x pipeline x data parallelism over the ranks of an MPI job:
// ranks = --tp x --pp x data-parallel replicas (comm/pipeline/layout.h, make_parallel_layout).
// The model (char_lm_model.h) is cut into --pp x --stages-per-rank pipeline stages, each split
// over the --tp ranks of its tensor group; --microbatches per batch in the order of --schedule.
//
// The same flags give the same model and the same training on any number of ranks: every rank
// builds its part with initialisers seeded by layer, every rank iterates the same global
// batches (--batchsize, shuffled with --seed), and data replica d computes rows
// [d b / dp, (d + 1) b / dp) of each, so the replicas' averaged gradients are the whole batch's;
// the reported loss is averaged over the replicas too. With 1 rank it is plain training (with
// --microbatches > 1, gradient accumulation).
//
//   bazel build -c opt //examples/lm:train_char_lm
//   bazel-bin/examples/lm/train_char_lm                                   # 1 process (run time: docs/training.md)
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/lm/train_char_lm --tp 2
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/lm/train_char_lm --pp 2 --microbatches 4
//   /usr/bin/mpiexec.mpich -n 4 bazel-bin/examples/lm/train_char_lm --tp 2 --pp 2 --microbatches 4
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/lm/train_char_lm --pp 2 --schedule zbv --microbatches 4
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/lm/train_char_lm       # 2 data-parallel replicas
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/lm/train_char_lm --experts 8   # 4 experts per rank
//   bazel-bin/examples/lm/train_char_lm --dtype mixed_bf16   # products in bf16 (training/mixed_precision.h)
//
// --experts E makes every block's MLP a mixture of E experts (comm/moe/mixture_of_experts.h),
// spread over groups of --expert-parallel data replicas (default: all of them); the shared
// parameters are averaged over the replicas, each expert over the replicas that hold it.
// Rank 0 prints the corpus (and its unigram baseline in bits per character), a progress bar and
// a row per --eval-interval iterations (training and validation loss and bits per character),
// then the loss on the whole validation text and a --sample-length sample from the trained
// model (seeded; --temperature 0: greedy). <out>/log is the JSON log, <out>/loss.png its losses
// plotted, <out>/vocabulary.txt the characters; snapshots every --snapshot-interval iterations,
// --resume latest continues.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "comm/moe/mixture_of_experts.h"
#include "comm/multi_node_training/multi_node_snapshot.h"
#include "comm/pipeline/layout.h"
#include "comm/pipeline/pipeline.h"
#include "comm/pipeline/schedule.h"
#include "core/memory_stats.h"
#include "data/data.h"
#include "data/text_corpus.h"
#include "examples/common/flags.h"
#include "examples/lm/char_lm_model.h"
#include "examples/lm/replica_batches.h"
#include "examples/mnist/multi_rank.h"
#include "layers/optimizers/adam.h"
#include "training/extensions/evaluator.h"
#include "training/extensions/plot_report.h"
#include "training/extensions/reporting.h"
#include "training/mixed_precision.h"
#include "training/precision_report.h"
#include "training/recompute_budget.h"
#include "training/trainer.h"

using namespace tandem;

namespace {

constexpr const char* kProgram = "train_char_lm";

// The first `examples` examples of `dataset`, rounded down to whole batches (at least one).
DatasetPtr whole_batches(DatasetPtr dataset, long long examples, long long batchsize) {
  long long n = examples <= 0 ? dataset->size() : std::min<long long>(examples, dataset->size());
  n = std::max(batchsize, n / batchsize * batchsize);
  TANDEM_CHECK(n <= dataset->size(), kProgram, ": the validation text has ", dataset->size(),
               " sequences, fewer than one batch of ", batchsize);
  return n == dataset->size() ? dataset : split_dataset(dataset, n).first;
}

// Draws `length` characters after `prompt` from the pipeline, one evaluate per character (every
// rank of the job takes part; the last stage draws, the observation brings it to every rank).
std::string sample(pipeline::Pipeline& pipe, const CharVocabulary& vocabulary, const std::string& prompt,
                   long long length, long long context, double temperature, std::uint64_t seed) {
  Generator generator(seed);
  std::vector<std::int32_t> ids = vocabulary.encode(prompt);
  for (long long i = 0; i < length; ++i) {
    const std::int64_t n = std::min<std::int64_t>(static_cast<std::int64_t>(ids.size()), context);
    const std::vector<std::int32_t> window(ids.end() - n, ids.end());
    const Tensor x = from_vector(window, {1, n});
    for (int s : pipe.stage_ids())
      if (s == static_cast<int>(pipe.schedule().stages) - 1)
        std::static_pointer_cast<examples::CharLMStage>(pipe.stage(s))->sample_next(temperature, &generator);
    const pipeline::StepResult r = pipe.evaluate(std::vector<Tensor>{x, x});
    ids.push_back(static_cast<std::int32_t>(r.observation.at("next")));
  }
  return vocabulary.decode(std::vector<std::int32_t>(ids.end() - length, ids.end()));
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags(kProgram,
                        "A GPT-style character language model on English text, tensor x pipeline x data parallel.\n"
                        "Run with: /usr/bin/mpiexec.mpich -n N train_char_lm [flags] (or without mpiexec: 1 rank)");
  flags.add_string("data", "", "a UTF-8 text file to train on (empty: Debian's fortunes, /usr/share/games/fortunes)");
  flags.add_int("context", 64, "characters per training sequence (the model's longest context)");
  flags.add_int("dim", 128, "model width");
  flags.add_int("heads", 4, "attention heads (a multiple of --tp)");
  flags.add_int("layers", 4, "transformer blocks");
  flags.add_int("batchsize", 32, "sequences per batch (global: split over the data-parallel replicas)");
  flags.add_int("iterations", 1500, "training iterations");
  flags.add_double("lr", 2e-3, "Adam's learning rate");
  flags.add_int("tp", 1, "tensor-parallel ranks per stage");
  flags.add_int("pp", 1, "pipeline ranks");
  flags.add_int("cp", 1, "context-parallel ranks: each sequence's positions split over them (comm/context_parallel)");
  flags.add_int("cp-ulysses", 1,
                "context parallelism's all-to-all groups: 1 ring attention, --cp all-to-all (Ulysses), between: both");
  flags.add_string("cp-layout", "balanced",
                   "how positions split over the --cp ranks: balanced (2 chunks each, causal work even) or contiguous");
  flags.add_string("recompute", "none",
                   "activation checkpointing in every block: none, mlp, attention or block (both branches)");
  flags.add_double("recompute-budget", 0,
                   "MB: recompute the fewest blocks' branches that keep a step's measured peak of activations and "
                   "gradients within this (training/recompute_budget.h; 0: off)");
  flags.add_int("microbatches", 1, "microbatches per batch (per replica)");
  flags.add_string("schedule", "1f1b",
                   "pipeline schedule: gpipe, 1f1b or interleaved, each also with -dw (1f1b-dw: the weight gradients "
                   "computed at the step's end, one product per weight over the whole batch), or a zero-bubble one: "
                   "zb-h1, zb-h2 or zbv (2 stages per rank in a V: rank 0 holds the first and the last)");
  flags.add_int("stages-per-rank", 1,
                "pipeline stages per rank (more than 1 with --schedule interleaved; zbv: 2, its default)");
  flags.add_int("experts", 0, "mixture of experts: every block's MLP becomes this many MLPs (0: dense)");
  flags.add_int("top-k", 1, "experts per character (1 or 2)");
  flags.add_double("capacity-factor", 0, "expert capacity per rank as a multiple of the even share (0: dropless)");
  flags.add_double("load-balance", 0.01, "weight of the experts' load-balancing loss");
  flags.add_double("z-loss", 0.001, "weight of the router z-loss");
  flags.add_int("expert-parallel", 0, "ranks per expert-parallel group, within the data-parallel replicas (0: all)");
  flags.add_int("eval-interval", 100, "iterations between validation runs and log entries");
  flags.add_int("val-examples", 256, "validation sequences evaluated every --eval-interval (0: all)");
  flags.add_int("snapshot-interval", 500, "iterations between snapshots");
  flags.add_int("sample-length", 300, "characters sampled from the trained model at the end (0: none)");
  flags.add_double("temperature", 0.8, "sampling temperature (0: greedy)");
  flags.add_string("prompt", "\n", "the text the sample continues");
  flags.add_int("progress", 1, "print a progress bar (0: only the table)");
  flags.add_int("final-eval", 1, "evaluate the whole validation text at the end (0: skip)");
  flags.add_string("out", "result", "directory for the log, the vocabulary and snapshots (rank r > 0: <out>/rank<r>)");
  flags.add_string("resume", "", "'latest': continue from the newest snapshot that every rank completed");
  flags.add_int("zero", 0,
                "data parallelism: ZeRO stage (1: optimizer state, 2: and gradients, 3: and parameters sharded over "
                "the replicas)");
  examples::add_checkpoint_flags(flags);
  flags.add_int("seed", 0, "random seed (initialisation, batch order, sampling)");
  flags.add_int("gpu", -1, "GPU to use, -1 for the CPU (needs a build with --config=cuda)");
  examples::add_dtype_flag(flags);
  flags.add_int("precision-report", 0,
                "before training, print the N tensors of the first batch's step that differ most between f32 and "
                "--dtype's 16 bits, and the first beyond tolerance (training/precision_report.h; 0: none)");
  const int status = examples::parse_command_line(
      flags, argc, argv, kProgram,
      {"context", "dim", "heads", "layers", "batchsize", "iterations", "tp", "pp", "cp", "cp-ulysses", "microbatches",
       "stages-per-rank", "eval-interval", "snapshot-interval", "top-k"});
  if (status >= 0) return status;
  auto world = create_communicator("naive");
  const int rank = world->rank();
  const long long tp = flags.get_int("tp"), pp = flags.get_int("pp"), batchsize = flags.get_int("batchsize"),
                  microbatches = flags.get_int("microbatches"), per_rank = examples::pipeline_stages_per_rank(flags),
                  iterations = flags.get_int("iterations"), eval_interval = flags.get_int("eval-interval");
  const auto seed = static_cast<std::uint64_t>(flags.get_int("seed"));
  const long long cp = flags.get_int("cp");
  TANDEM_CHECK(world->size() % (tp * pp * cp) == 0, kProgram, ": --tp ", tp, " x --pp ", pp, " x --cp ", cp,
               " must divide the ", world->size(), " rank(s)");
  const long long dp = world->size() / (tp * pp * cp);
  TANDEM_CHECK(batchsize % dp == 0 && microbatches <= batchsize / dp, kProgram, ": --batchsize ", batchsize,
               " must split evenly over the ", dp, " data-parallel replica(s), each with at least --microbatches ",
               microbatches, " sequences");

  // The text: every rank reads and splits it alike (no randomness).
  const std::string data = flags.get_string("data");
  const TextCorpus corpus = data.empty() ? make_text_corpus(read_fortunes()) : load_text_file(data);
  examples::CharLMConfig config;
  config.vocabulary = corpus.vocabulary.size();
  config.context = flags.get_int("context");
  config.dim = flags.get_int("dim");
  config.heads = flags.get_int("heads");
  config.layers = flags.get_int("layers");
  config.seed = seed;
  config.experts = flags.get_int("experts");
  config.top_k = static_cast<int>(flags.get_int("top-k"));
  config.capacity_factor = flags.get_double("capacity-factor");
  config.load_balance_coef = flags.get_double("load-balance");
  config.z_loss_coef = flags.get_double("z-loss");
  const long long ep = flags.get_int("expert-parallel") > 0 ? flags.get_int("expert-parallel") : dp;
  if (config.experts > 0) {
    TANDEM_CHECK(dp % ep == 0 && config.experts % ep == 0, kProgram, ": --expert-parallel ", ep, " must divide the ",
                 dp, " data-parallel replica(s) and the ", config.experts, " --experts");
    TANDEM_CHECK(pp == 1 || (config.load_balance_coef == 0 && config.z_loss_coef == 0), kProgram,
                 ": the experts' auxiliary losses reach the loss on the last pipeline stage only; with --pp ", pp,
                 " pass --load-balance 0 --z-loss 0");
  }
  // Every error in schedule_by_name is the same on every rank (the same flags).
  const pipeline::Schedule schedule = pipeline::schedule_by_name(
      flags.get_string("schedule"), static_cast<int>(pp), static_cast<int>(per_rank), static_cast<int>(microbatches));
  const long long stages = pp * per_rank;
  TANDEM_CHECK(config.layers >= stages, kProgram, ": --layers ", config.layers, " cannot fill ", stages,
               " pipeline stages: every stage needs a block");
  const std::string cp_layout = flags.get_string("cp-layout");
  if (cp > 1) {
    TANDEM_CHECK(cp_layout == "balanced" || cp_layout == "contiguous", kProgram,
                 ": --cp-layout must be balanced or contiguous, got '", cp_layout, "'");
    const long long pieces = cp_layout == "balanced" ? 2 * cp : cp;
    TANDEM_CHECK(config.context % pieces == 0, kProgram, ": --context ", config.context, " must split into ", pieces,
                 " equal pieces for --cp ", cp, " (", cp_layout, "), so that every rank's mean loss weighs alike");
    TANDEM_CHECK(config.experts == 0, kProgram, ": --cp with --experts is not supported yet");
  }
  DatasetPtr train = make_sequence_dataset(corpus.train, config.context, config.context);
  DatasetPtr validation = make_sequence_dataset(corpus.validation, config.context, config.context);

  const Device device = examples::training_device(flags, kProgram, world->intra_rank());
  world->set_device(device);
  const pipeline::ParallelLayout layout =
      pipeline::make_parallel_layout(world, static_cast<int>(tp), static_cast<int>(pp));
  // Context parallelism inside the data group: its ranks d cp .. (d + 1) cp - 1 split replica d's
  // sequences (replica_batches.h); gradients average over the whole data group.
  std::shared_ptr<ContextParallel> context_parallel;
  if (cp > 1) {
    const SequenceLayout positions = cp_layout == "balanced"
                                         ? SequenceLayout::balanced(config.context, static_cast<int>(cp))
                                         : SequenceLayout::contiguous(config.context, static_cast<int>(cp));
    context_parallel =
        std::make_shared<ContextParallel>(layout.data->split(layout.data_rank / static_cast<int>(cp), layout.data_rank),
                                          positions, static_cast<int>(flags.get_int("cp-ulysses")));
    config.context_parallel = context_parallel;
  }
  // Experts over groups of --expert-parallel data replicas (the ranks that hold the same stage
  // and tensor share): each group holds every expert once.
  ExpertLayout experts;
  if (config.experts > 0) {
    experts = make_expert_layout(layout.data, static_cast<int>(ep));
    config.expert_group = experts.expert_parallel;
  }
  // This rank's stages, where the schedule places them (zbv's V: stage_rank r holds r and 2 pp - 1 - r).
  std::vector<LinkPtr> my_stages = examples::make_char_lm_stages(
      config, static_cast<int>(stages), schedule.stages_of_rank(layout.stage_rank), tp > 1 ? layout.tensor : nullptr);
  for (LinkPtr& stage : my_stages) stage->to(device);
  auto pipe = std::make_shared<pipeline::Pipeline>(layout.pipeline, schedule, my_stages);

  // Activation checkpointing: a fixed choice for every block, or the fewest branches that fit a
  // budget, measured on the first batch's step (before the optimizer exists: its data-parallel
  // overlap would act on the measuring steps' gradients). Every rank takes the same decisions.
  const std::string recompute = flags.get_string("recompute");
  TANDEM_CHECK(recompute == "none" || recompute == "mlp" || recompute == "attention" || recompute == "block", kProgram,
               ": --recompute must be none, mlp, attention or block, got '", recompute, "'");
  std::vector<TransformerBlock*> blocks;
  for (const LinkPtr& stage : my_stages)
    for (TransformerBlock* block : std::static_pointer_cast<examples::CharLMStage>(stage)->transformer_blocks())
      blocks.push_back(block);
  for (TransformerBlock* block : blocks)
    block->set_recompute(
        {recompute == "attention" || recompute == "block", recompute == "mlp" || recompute == "block"});
  std::string recompute_plan;
  if (flags.get_double("recompute-budget") > 0) {
    SerialIterator first(train, batchsize, false, false);
    const Example batch = first.next();
    const LossFunction measured = examples::replica_loss(pipe, layout, context_parallel);
    const RecomputePlan plan = plan_recompute(
        *pipe, blocks, static_cast<std::int64_t>(flags.get_double("recompute-budget") * 1e6), [&] { measured(batch); },
        device, [&](bool fits) { return world->allreduce(full({}, fits ? 0.0 : 1.0, DType::f64)).item() == 0; });
    recompute_plan = plan.describe() + " (rank 0; " + std::to_string(plan.measurements) + " measured steps)";
  }

  std::shared_ptr<Optimizer> optimizer = std::make_shared<Adam>(flags.get_double("lr"));
  const int zero = static_cast<int>(flags.get_int("zero"));
  // The gradients average over the data group: the replicas and, inside each, its --cp ranks.
  const long long data_ranks = dp * cp;
  TANDEM_CHECK(zero <= 3 && (zero == 0 || (data_ranks > 1 && config.experts == 0)), kProgram, ": --zero ", zero,
               " needs 1 to 3, more than one data-parallel rank (here ", data_ranks, ") and no --experts");
  if (dp > 1 && config.experts > 0) {
    optimizer = create_multi_node_optimizer(optimizer, moe_parameter_groups(*pipe, layout.data, experts));
  } else if (zero > 0) {
    DataParallelOptions parallel;
    parallel.zero = zero;
    optimizer = create_multi_node_optimizer(optimizer, layout.data, parallel);
  } else if (data_ranks > 1) {
    optimizer = create_multi_node_optimizer(optimizer, layout.data);
  }
  const TrainingPrecision precision = training_precision(flags.get_string("dtype"));
  convert_model(*pipe, precision);
  optimizer->setup(pipe);
  // Every rank skips a step whose gradients overflowed on any rank (mixed_f16).
  apply_precision(*optimizer, precision, [world](double count) {
    return world->size() == 1 ? count : world->allreduce(full({}, count, DType::f64)).item();
  });
  pipe->set_loss_scaler(optimizer->loss_scaler());
  // Every rank iterates the same global batches; each replica computes its rows.
  auto train_iter = std::make_shared<SerialIterator>(train, batchsize, true, true, seed);
  auto updater =
      std::make_shared<StandardUpdater>(train_iter, optimizer, examples::replica_loss(pipe, layout, context_parallel));
  Trainer trainer(updater, Trigger::iterations(iterations), examples::rank_out(flags, rank), pipe);
  auto val_iter = std::make_shared<SerialIterator>(whole_batches(validation, flags.get_int("val-examples"), batchsize),
                                                   batchsize, false, false);
  trainer.extend(examples::replica_evaluator(val_iter, pipe, layout, context_parallel),
                 Trigger::iterations(eval_interval));

  const double unigram = unigram_bits_per_character(corpus.train, corpus.validation, corpus.vocabulary.size());
  long long parameters = 0;
  for (const LinkPtr& stage : my_stages) parameters += stage->count_params();
  if (rank == 0) {
    std::printf(
        "%s: %s: %lld train / %lld validation characters (%lld / %lld documents), %lld distinct; unigram "
        "baseline %.3f bits/char on validation\n",
        kProgram, data.empty() ? "fortunes" : data.c_str(), static_cast<long long>(corpus.train.size()),
        static_cast<long long>(corpus.validation.size()), static_cast<long long>(corpus.train_documents),
        static_cast<long long>(corpus.validation_documents), static_cast<long long>(config.vocabulary), unigram);
    std::printf(
        "model: %lld blocks x %lld wide, %lld heads, context %lld; rank 0 holds %lld parameters; ranks %d = "
        "tp %lld x pp %lld x cp %lld x dp %lld; %s; batch %lld, %lld iterations, Adam lr %g, dtype %s\n",
        static_cast<long long>(config.layers), static_cast<long long>(config.dim), static_cast<long long>(config.heads),
        static_cast<long long>(config.context), parameters, world->size(), tp, pp, cp, dp, schedule.describe().c_str(),
        batchsize, iterations, flags.get_double("lr"), precision.name.c_str());
    if (!recompute_plan.empty()) std::printf("recompute: %s\n", recompute_plan.c_str());
    if (config.experts > 0) {
      char mode[64] = "dropless";
      if (config.capacity_factor > 0) std::snprintf(mode, sizeof mode, "capacity factor %g", config.capacity_factor);
      std::printf(
          "experts: %lld per block, top-%d, %s, over groups of %lld rank(s) (%lld per rank); "
          "load-balancing loss x %g, z-loss x %g\n",
          static_cast<long long>(config.experts), config.top_k, mode, ep, static_cast<long long>(config.experts / ep),
          config.load_balance_coef, config.z_loss_coef);
    }
    std::fflush(stdout);
    corpus.vocabulary.write(flags.get_string("out") + "/vocabulary.txt");
    auto log = std::make_shared<LogReport>(Trigger::iterations(eval_interval));
    trainer.extend(log);
    std::vector<std::string> columns = {"iteration", "main/loss", "main/bpc", "validation/main/loss",
                                        "validation/main/bpc"};
    if (config.experts > 0) columns.push_back("main/moe/max_load");
    if (config.capacity_factor > 0) columns.push_back("main/moe/dropped");
    columns.push_back("elapsed_time");
    trainer.extend(std::make_shared<PrintReport>(log, columns), Trigger::iterations(eval_interval));
    // <out>/loss.png (and .svg, .dat): the losses at each evaluation (needs gnuplot).
    trainer.extend(std::make_shared<PlotReport>(std::vector<std::string>{"main/loss", "validation/main/loss"},
                                                "iteration", Trigger::iterations(eval_interval), "loss.png"));
    if (flags.get_int("progress") != 0) trainer.extend(std::make_shared<ProgressBar>(10));
  }
  trainer.extend(create_multi_node_snapshot_writer(world), Trigger::iterations(flags.get_int("snapshot-interval")));
  examples::resume(trainer, *world, flags, kProgram);
  // Sharded checkpoints (comm/checkpoint): saved by every rank in parallel, loaded under any layout.
  char layout_text[160];
  std::snprintf(layout_text, sizeof layout_text,
                "tp %lld x pp %lld x cp %lld x dp %lld, zero %d, %s, experts %lld over %lld", tp, pp, cp, dp, zero,
                schedule.describe().c_str(), static_cast<long long>(config.experts), config.experts > 0 ? ep : 0LL);
  const auto checkpoint_writer = examples::setup_checkpoints(trainer, world, flags, kProgram, layout_text);
  if (flags.get_int("precision-report") > 0) {
    TANDEM_CHECK(precision.autocast, kProgram,
                 ": --precision-report compares --dtype mixed_bf16 or mixed_f16 with f32");
    // The first batch, as the trainer will take it (every rank the same batch; each its part).
    const LossFunction step_loss = examples::replica_loss(pipe, layout, context_parallel);
    SerialIterator first(train, batchsize, false, false);
    const Example batch = first.next();
    const PrecisionReport report = precision_report(
        *pipe, [&] { step_loss(batch); }, *precision.autocast);
    if (rank == 0) std::printf("%s", report.text(static_cast<std::size_t>(flags.get_int("precision-report"))).c_str());
  }
  // Training, evaluation and sampling in the chosen precision.
  const AutocastScope autocast(precision.autocast);
  trainer.run();

  // The whole validation text (in whole batches), then a sample.
  if (flags.get_int("final-eval") != 0) {
    auto all_val = std::make_shared<SerialIterator>(whole_batches(validation, 0, batchsize), batchsize, false, false);
    const Observation final_metrics = examples::replica_evaluator(all_val, pipe, layout, context_parallel)->evaluate();
    if (rank == 0) {
      std::printf("validation (%lld characters): loss %.4f, %.3f bits/char (unigram baseline %.3f)\n",
                  static_cast<long long>(whole_batches(validation, 0, batchsize)->size() * config.context),
                  final_metrics.at("loss"), final_metrics.at("bpc"), unigram);
      std::fflush(stdout);
    }
  }
  examples::print_checkpoint_summary(checkpoint_writer.get(), rank);
  // Where rank 0's memory went (core/memory_stats.h): the figures docs/mixed-precision.md quotes.
  if (rank == 0) std::printf("memory: %s\n", host_memory_fields(host_memory_stats()).c_str());
  const long long length = flags.get_int("sample-length");
  if (length > 0 && cp > 1 && rank == 0) std::printf("(no sample: sampling runs on whole sequences, not under --cp)\n");
  if (length > 0 && cp == 1) {
    const std::string text = sample(*pipe, corpus.vocabulary, flags.get_string("prompt"), length, config.context,
                                    flags.get_double("temperature"), seed + 1);
    if (rank == 0)
      std::printf("--- sample (temperature %g) ---\n%s%s\n---\n", flags.get_double("temperature"),
                  flags.get_string("prompt").c_str(), text.c_str());
  }
  return 0;
}
