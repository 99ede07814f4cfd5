#include "examples/mnist/multi_rank.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <vector>

#include "comm/multi_node_training/multi_node_snapshot.h"

namespace tandem::examples {

std::string rank_out(const Flags& flags, int rank) {
  return flags.get_string("out") + (rank == 0 ? "" : "/rank" + std::to_string(rank));
}

void resume(Trainer& trainer, Communicator& comm, const Flags& flags, const std::string& program) {
  const std::string resume = flags.get_string("resume");
  if (resume.empty()) return;
  TANDEM_CHECK(resume == "latest", program, ": --resume takes 'latest' (the newest snapshot that every rank "
               "completed), not '", resume, "'");
  trainer.load_snapshot(latest_complete_snapshot(comm, trainer.out()).path);
  if (comm.rank() == 0) std::printf("resumed at iteration %lld\n", static_cast<long long>(trainer.iteration()));
}

void add_checkpoint_flags(Flags& flags) {
  flags.add_int("checkpoint-interval", 0,
                "iterations between sharded checkpoints, loadable under another layout (0: none)");
  flags.add_string("checkpoint-dir", "",
                   "where sharded checkpoints go; every rank writes there (empty: <out>/checkpoints)");
  flags.add_int("checkpoint-keep", 0, "sharded checkpoints kept (0: all)");
  flags.add_int("checkpoint-async", 0, "1: write checkpoints while training goes on");
  flags.add_string("resume-checkpoint", "",
                   "'latest' (in --checkpoint-dir) or a step_<N> directory: continue from a sharded checkpoint");
  flags.add_string("init-checkpoint", "", "a step_<N> directory whose model weights (only) start the training");
  flags.add_string("checkpoint-ignore", "",
                   "comma-separated name prefixes of a checkpoint's tensors to leave unloaded (e.g. random/)");
}

std::shared_ptr<CheckpointWriter> setup_checkpoints(Trainer& trainer, const CommunicatorPtr& comm, const Flags& flags,
                                                    const std::string& program, const std::string& layout) {
  const std::string root = flags.get_string("checkpoint-dir").empty() ? flags.get_string("out") + "/checkpoints"
                                                                      : flags.get_string("checkpoint-dir");
  const long long interval = flags.get_int("checkpoint-interval");
  TANDEM_CHECK(interval >= 0 && flags.get_int("checkpoint-keep") >= 0, program,
               ": --checkpoint-interval and --checkpoint-keep must be 0 or more");
  std::shared_ptr<CheckpointWriter> writer;
  if (interval > 0) {
    CheckpointWriterOptions options;
    options.root = root;
    options.keep = static_cast<int>(flags.get_int("checkpoint-keep"));
    options.async = flags.get_int("checkpoint-async") != 0;
    options.info["layout"] = layout;
    options.info["program"] = program;
    writer = std::make_shared<CheckpointWriter>(comm, options);
    trainer.extend(writer, Trigger::iterations(interval));
  }
  const int rank = comm->rank();
  if (!flags.get_string("init-checkpoint").empty()) {
    const std::shared_ptr<void> whole = trainer.gather_parameters();  // ZeRO-3: sharded again after
    load_model_checkpoint(*comm, trainer.model(), flags.get_string("init-checkpoint"));
    if (rank == 0) std::printf("model weights from %s\n", flags.get_string("init-checkpoint").c_str());
  }
  std::string from = flags.get_string("resume-checkpoint");
  if (!from.empty()) {
    if (from == "latest") {
      from = latest_sharded_checkpoint(*comm, root);
      TANDEM_CHECK(!from.empty(), program, ": --resume-checkpoint latest: no complete checkpoint in ", root);
    }
    CheckpointLoadOptions load;
    std::istringstream ignore(flags.get_string("checkpoint-ignore"));
    for (std::string prefix; std::getline(ignore, prefix, ',');)
      if (!prefix.empty()) load.ignore.push_back(prefix);
    CheckpointLoadStats stats;
    const auto started = std::chrono::steady_clock::now();
    const std::int64_t step = load_training_checkpoint(*comm, trainer, from, load, &stats);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const CheckpointManifest manifest = read_sharded_checkpoint_manifest(*comm, from);
    if (rank == 0)
      std::printf(
          "resumed from checkpoint %s at iteration %lld (saved by %d ranks: %s); rank 0 read %.2f MB in %.3f s\n",
          from.c_str(), static_cast<long long>(step), manifest.ranks,
          manifest.info.count("layout") ? manifest.info.at("layout").c_str() : "?", stats.bytes_read / 1e6, seconds);
  }
  return writer;
}

void print_checkpoint_summary(const CheckpointWriter* writer, int rank) {
  if (!writer || rank != 0 || writer->saves() == 0) return;
  // The training time each save took: the first, and the median of the others.
  std::vector<double> later(writer->stall_seconds().begin() + 1, writer->stall_seconds().end());
  std::sort(later.begin(), later.end());
  std::printf(
      "checkpoints: %d saved (%s); rank 0's last file %.2f MB; training stalled %.1f ms by the first save, "
      "%.1f ms (median) by the others\n",
      writer->saves(), writer->options().async ? "async" : "sync", writer->last_bytes() / 1e6,
      1e3 * writer->stall_seconds().front(), later.empty() ? 0.0 : 1e3 * later[later.size() / 2]);
}

void print_final_metrics(const Observation& metrics, int rank) {
  if (rank == 0) std::printf("final test accuracy: %.4f  loss: %.4f\n", metrics.at("accuracy"), metrics.at("loss"));
}

}  // namespace tandem::examples
