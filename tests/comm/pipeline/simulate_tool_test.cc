// The views of a simulation (timeline, summary, Chrome trace), the planning table, and the
// `simulate` tool's command line as `bazel run //tools:simulate_pipeline` runs it.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "comm/pipeline/planning.h"
#include "comm/pipeline/report.h"
#include "comm/pipeline/simulate_tool.h"

using namespace tandem;
using namespace tandem::pipeline;
using Catch::Matchers::Contains;

namespace {

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

struct ToolRun {
  int status;
  std::string out, err;
};

ToolRun run_tool(std::vector<std::string> args) {
  args.insert(args.begin(), "simulate");
  std::ostringstream out, err;
  const int status = simulate_main(args, out, err);
  return {status, out.str(), err.str()};
}

SimulationOptions unit_stages() {
  SimulationOptions options;
  options.stage_costs = {StageCost{1e-3, 2e-3, 1 << 20, 1 << 20}};
  return options;
}

}  // namespace

TEST_CASE("the Chrome trace parses back with one complete event per action") {
  const Schedule s = interleaved_1f1b(2, 2, 4);
  const SimulationResult r = simulate(s, unit_stages());
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(s, r));
  int complete = 0;
  for (const auto& event : trace.at("traceEvents")) {
    if (event.at("ph") != "X") continue;
    ++complete;
    const int rank = event.at("pid");
    REQUIRE(event.at("tid") == rank);
    const int index = event.at("args").at("action");
    const TimedAction& t = r.ranks[rank].actions[index];
    REQUIRE(event.at("name") == t.action.label(true));
    REQUIRE(event.at("cat") == (t.action.kind == ActionKind::forward ? "forward" : "backward"));
    REQUIRE(event.at("args").at("stage") == t.action.stage);
    REQUIRE(event.at("args").at("microbatch") == t.action.microbatch);
    REQUIRE(event.at("ts").get<double>() == Approx(t.start_s * 1e6));
    REQUIRE(event.at("dur").get<double>() == Approx((t.end_s - t.start_s) * 1e6));
  }
  REQUIRE(complete == 2 * 2 * 2 * 4);  // 2 ranks x 2 stages x 4 microbatches x (F, B)
  REQUIRE(trace.at("otherData").at("bubble_fraction").get<double>() == Approx(r.bubble_fraction));

  const std::string path = temp_path("trace.json");
  write_chrome_trace(path, s, r);
  std::ifstream file(path);
  REQUIRE(nlohmann::json::parse(file) == trace);
}

TEST_CASE("the text timeline places every action by time, one row per rank") {
  const Schedule s = gpipe(2, 2);
  const SimulationResult r = simulate(s, unit_stages());
  const std::string text = format_timeline(s, r);
  INFO(text);
  // Step 9 ms, shortest action 1 ms, labels of 2 characters: 3 columns per ms.
  REQUIRE_THAT(text, Contains("rank 0 |F0 F1 .........B0    B1    |"));
  REQUIRE_THAT(text, Contains("rank 1 |...F0 F1 B0    B1    ......|"));
  // Squeezed: 2 columns per ms, then 10/9; labels are cut to what fits.
  REQUIRE_THAT(format_timeline(s, r, 18), Contains("rank 0 |F0F1......B0  B1  |"));
  REQUIRE_THAT(format_timeline(s, r, 10), Contains("rank 1 |.FFB0 B1..|"));
  const std::string summary = format_summary(s, r);
  REQUIRE_THAT(summary, Contains("step time 9.000 ms, bubble 33.33%"));
}

TEST_CASE("the planning table simulates every row") {
  PlanningOptions plan;
  plan.stage = {1e-3, 2e-3, 1 << 20, 1 << 20};
  plan.depths = {4, 8};
  plan.max_microbatches = 16;
  const std::vector<PlanningRow> rows = planning_table(plan);
  REQUIRE(rows.size() == 3 + 2);  // P = 4: M = 4, 8, 16; P = 8: M = 8, 16
  const PlanningRow& row = rows[1];
  REQUIRE((row.depth == 4 && row.microbatches == 8));
  REQUIRE(std::abs(row.gpipe_bubble - 3.0 / 11) < 1e-12);
  REQUIRE(std::abs(row.one_f_one_b_bubble - 3.0 / 11) < 1e-12);
  REQUIRE(std::abs(row.interleaved_bubble - 3.0 / 19) < 1e-12);
  REQUIRE(row.gpipe_peak_bytes == 8 << 20);
  REQUIRE(row.one_f_one_b_peak_bytes == 4 << 20);
  const std::string table = format_planning_table(plan, rows);
  REQUIRE_THAT(table, Contains("| 4 | 8 | 27.3% | 27.3% | 27.3% | 15.8% | 8.0 | 4.0 |"));
}

TEST_CASE("the simulate tool prints the summary and timeline and writes the trace") {
  const std::string path = temp_path("tool_trace.json");
  const ToolRun run = run_tool({"--schedule", "gpipe", "--ranks", "4", "--microbatches", "4", "--latency-us", "0",
                                "--bandwidth-gbps", "0", "--trace", path});
  INFO(run.out << run.err);
  REQUIRE(run.status == 0);
  REQUIRE_THAT(run.out, Contains("schedule 'gpipe' (4 ranks, 4 stages, 4 microbatches): "
                                 "deadlock-free"));
  REQUIRE_THAT(run.out, Contains("step time 21.000 ms, bubble 42.86%"));
  REQUIRE_THAT(run.out, Contains("rank 3 |"));
  std::ifstream file(path);
  const nlohmann::json trace = nlohmann::json::parse(file);
  REQUIRE(trace.at("otherData").at("microbatches") == 4);

  SECTION("interleaved, per-stage costs, recomputation") {
    const ToolRun inter =
        run_tool({"--schedule", "interleaved", "--ranks", "2", "--microbatches", "4", "--forward-ms", "1,1,1,1",
                  "--backward-ms", "2", "--latency-us", "0", "--bandwidth-gbps", "0", "--recompute"});
    INFO(inter.out << inter.err);
    REQUIRE(inter.status == 0);
    REQUIRE_THAT(inter.out, Contains("(2 ranks, 4 stages, 4 microbatches)"));
    REQUIRE_THAT(inter.out, Contains("step time 36.000 ms"));  // 27 with backward 3 instead of 2
  }
  SECTION("zero-bubble schedules: zbv holds two stages per rank by default") {
    ToolRun v = run_tool({"--schedule", "zbv", "--ranks", "4", "--microbatches", "8", "--forward-ms", "1",
                          "--backward-ms", "2", "--weight-ms", "1", "--latency-us", "0", "--bandwidth-gbps", "0"});
    INFO(v.out << v.err);
    REQUIRE(v.status == 0);
    REQUIRE_THAT(v.out, Contains("'zbv' (4 ranks, 8 stages, 8 microbatches)"));
    REQUIRE_THAT(v.out, Contains("bubble rate (idle over compute) 6.25%"));
  }
  SECTION("errors are one line") {
    ToolRun bad = run_tool({"--schedule", "zero-bubble"});
    REQUIRE(bad.status == 1);
    REQUIRE_THAT(bad.err, Contains("simulate: unknown pipeline schedule 'zero-bubble'"));
    bad = run_tool({"--schedule", "interleaved", "--ranks", "4", "--microbatches", "6"});
    REQUIRE(bad.status == 1);
    REQUIRE_THAT(bad.err, Contains("must be a multiple of the number of ranks"));
    bad = run_tool({"--ranks", "4", "--forward-ms", "1,2"});
    REQUIRE(bad.status == 1);
    REQUIRE_THAT(bad.err, Contains("--forward-ms has 2 values for 4 stages"));
    bad = run_tool({"--no-such-flag"});
    REQUIRE(bad.status != 0);
    REQUIRE_FALSE(bad.err.empty());
  }
  SECTION("--help") {
    const ToolRun help = run_tool({"--help"});
    REQUIRE(help.status == 0);
    REQUIRE_THAT(help.out, Contains("--bandwidth-gbps"));
  }
}

TEST_CASE("the README's pipeline snippet runs", "[readme]") {
  // As in docs/pipelines.md ("Pipeline schedules and the simulator"), printing into a string.
  Schedule s = interleaved_1f1b(/*ranks=*/4, /*stages_per_rank=*/2, /*microbatches=*/8);
  validate(s);
  check_deadlock_free(s);
  SimulationOptions options;
  options.stage_costs = {StageCost{/*forward_s=*/1e-3, /*backward_s=*/2e-3,
                                   /*activation_bytes=*/1 << 20, /*stored_bytes=*/8 << 20}};
  options.link = {/*latency_s=*/10e-6, /*bandwidth_bytes_per_s=*/10e9};
  SimulationResult r = simulate(s, options);
  std::ostringstream out;
  out << format_summary(s, r) << format_timeline(s, r);
  write_chrome_trace(temp_path("pipeline.json"), s, r);
  REQUIRE(s.rank_of_stage(5) == 1);
  REQUIRE(r.bubble_fraction > 3.0 / 19);                    // the ideal, plus the link
  REQUIRE(r.ranks[0].peak_stored_bytes == 11 * (8 << 20));  // Megatron's warm-up on rank 0

  Schedule mine{"mine",
                /*ranks=*/2,
                /*stages=*/2,
                /*microbatches=*/2,
                {{forward(0, 0), backward(0, 0), forward(0, 1), backward(0, 1)},
                 {forward(1, 0), backward(1, 0), forward(1, 1), backward(1, 1)}}};
  check_deadlock_free(mine);
}
