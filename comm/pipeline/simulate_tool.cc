#include "comm/pipeline/simulate_tool.h"

#include <cmath>
#include <cstdlib>

#include <CLI/CLI.hpp>

#include "comm/pipeline/planning.h"
#include "comm/pipeline/report.h"
#include "core/error.h"

namespace tandem {
namespace pipeline {

namespace {

constexpr double kMiB = 1 << 20;

struct Flags {
  std::string schedule = "1f1b";
  int ranks = 4;
  int microbatches = 8;
  int stages_per_rank = 0;  // 0: 1, or 2 for "interleaved"
  std::vector<double> forward_ms = {1};
  std::vector<double> backward_ms = {2};
  std::vector<double> weight_ms = {0};
  std::vector<double> activation_mb = {1};
  std::vector<double> stored_mb;  // empty: the same as activation_mb
  std::vector<double> queued_mb;  // empty: the same as stored_mb
  double latency_us = 10;
  double bandwidth_gbps = 10;
  bool recompute = false;
  std::string trace;
  bool table = false;
  int width = 120;
};

// One value per stage, or one for all.
double pick(const std::vector<double>& values, int stage) { return values.size() == 1 ? values[0] : values[stage]; }

std::vector<StageCost> stage_costs(const Flags& f, int stages) {
  const std::vector<double>& stored = f.stored_mb.empty() ? f.activation_mb : f.stored_mb;
  const std::vector<double>& queued = f.queued_mb.empty() ? stored : f.queued_mb;
  const std::pair<const char*, const std::vector<double>*> lists[] = {
      {"--forward-ms", &f.forward_ms},       {"--backward-ms", &f.backward_ms}, {"--weight-ms", &f.weight_ms},
      {"--activation-mb", &f.activation_mb}, {"--stored-mb", &stored},          {"--queued-mb", &queued}};
  for (const auto& [flag, values] : lists) {
    TANDEM_CHECK(values->size() == 1 || static_cast<int>(values->size()) == stages, flag, " has ", values->size(),
                 " values for ", stages, " stages (give one per stage, or one for all)");
  }
  const int n = f.forward_ms.size() == 1 && f.backward_ms.size() == 1 && f.weight_ms.size() == 1 &&
                        f.activation_mb.size() == 1 && stored.size() == 1 && queued.size() == 1
                    ? 1
                    : stages;
  std::vector<StageCost> costs;
  for (int s = 0; s < n; ++s) {
    costs.push_back({pick(f.forward_ms, s) * 1e-3, pick(f.backward_ms, s) * 1e-3,
                     std::llround(pick(f.activation_mb, s) * kMiB), std::llround(pick(stored, s) * kMiB),
                     pick(f.weight_ms, s) * 1e-3, std::llround(pick(queued, s) * kMiB)});
  }
  return costs;
}

// Under `bazel run` the tool runs in its runfiles; relative paths are the user's.
std::string user_path(const std::string& path) {
  const char* dir = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || !dir) return path;
  return std::string(dir) + "/" + path;
}

int run(const Flags& f, std::ostream& out) {
  LinkModel link{f.latency_us * 1e-6, f.bandwidth_gbps * 1e9};
  if (f.table) {
    PlanningOptions plan;
    const std::vector<StageCost> costs = stage_costs(f, 1);
    plan.stage = costs[0];
    plan.link = link;
    plan.recompute = f.recompute;
    out << format_planning_table(plan, planning_table(plan));
    return 0;
  }
  const int v = f.stages_per_rank > 0 ? f.stages_per_rank
                                      : (f.schedule.rfind("interleaved", 0) == 0 || f.schedule == "zbv" ? 2 : 1);
  const Schedule schedule = schedule_by_name(f.schedule, f.ranks, v, f.microbatches);
  SimulationOptions options;
  options.stage_costs = stage_costs(f, schedule.stages);
  options.link = link;
  options.recompute = f.recompute;
  const SimulationResult result = simulate(schedule, options);
  out << format_summary(schedule, result) << "\n" << format_timeline(schedule, result, f.width);
  if (!f.trace.empty()) {
    const std::string path = user_path(f.trace);
    write_chrome_trace(path, schedule, result);
    out << "wrote the Chrome trace to " << path << " (open it in chrome://tracing or https://ui.perfetto.dev)\n";
  }
  return 0;
}

}  // namespace

int simulate_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Flags f;
  CLI::App app(
      "Simulates a pipeline-parallel schedule: proves it deadlock-free, predicts its step time, "
      "bubble and peak stored activations per rank, prints a per-rank timeline and writes a "
      "Chrome trace.",
      "simulate");
  app.add_option("--schedule", f.schedule,
                 "gpipe, 1f1b or interleaved; with -dw (1f1b-dw): weight gradients deferred to the step's end; "
                 "zero bubble: zb-h1, zb-h2, zbv")
      ->capture_default_str();
  app.add_option("--ranks", f.ranks, "pipeline ranks")->capture_default_str();
  app.add_option("--microbatches", f.microbatches, "microbatches per step")->capture_default_str();
  app.add_option("--stages-per-rank", f.stages_per_rank,
                 "stages per rank (interleaved; default 2 there and for zbv, 1 otherwise)");
  app.add_option("--forward-ms", f.forward_ms,
                 "forward time per stage and microbatch, ms "
                 "(one value, or one per stage: 1,1,2,1)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--backward-ms", f.backward_ms, "backward time, ms (one, or one per stage)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--weight-ms", f.weight_ms,
                 "the weight gradients' part of --backward-ms, ms (one, or one per stage): what the weight "
                 "actions of a -dw or zero-bubble schedule take")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--activation-mb", f.activation_mb,
                 "a stage's output per microbatch, MiB (sent forward; its gradient back)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--stored-mb", f.stored_mb,
                 "activations kept from forward to backward per microbatch, MiB (default: "
                 "--activation-mb)")
      ->delimiter(',');
  app.add_option("--queued-mb", f.queued_mb,
                 "what a backward keeps for the weight actions of a -dw schedule per microbatch, MiB "
                 "(default: --stored-mb)")
      ->delimiter(',');
  app.add_option("--latency-us", f.latency_us, "link latency, microseconds")->capture_default_str();
  app.add_option("--bandwidth-gbps", f.bandwidth_gbps, "link bandwidth, GB/s (10^9 bytes per second; 0: unlimited)")
      ->capture_default_str();
  app.add_flag("--recompute", f.recompute,
               "activation recomputation: keep only stage inputs, backward reruns the forward");
  app.add_option("--trace", f.trace, "write a Chrome trace (JSON) here");
  app.add_flag("--table", f.table,
               "print the planning table (P = 8..64, M = P..256; gpipe, 1f1b, interleaved) "
               "for these stage costs instead");
  app.add_option("--width", f.width, "timeline width, columns")->capture_default_str();

  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) { return app.exit(e, out, err); }
  try {
    return run(f, out);
  } catch (const Error& e) {
    err << "simulate: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace pipeline
}  // namespace tandem
