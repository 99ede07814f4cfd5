#include "comm/pipeline/planning.h"

#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace tandem {
namespace pipeline {

std::vector<PlanningRow> planning_table(const PlanningOptions& options) {
  TANDEM_CHECK(options.stages_per_rank >= 1, "planning_table: stages_per_rank must be >= 1, got ",
               options.stages_per_rank);
  const int v = options.stages_per_rank;
  SimulationOptions whole;
  whole.stage_costs = {options.stage};
  whole.link = options.link;
  whole.recompute = options.recompute;
  SimulationOptions chunk = whole;
  chunk.stage_costs[0].forward_s /= v;
  chunk.stage_costs[0].backward_s /= v;
  chunk.stage_costs[0].stored_bytes /= v;

  std::vector<PlanningRow> rows;
  for (int depth : options.depths) {
    TANDEM_CHECK(depth >= 1, "planning_table: pipeline depth must be >= 1, got ", depth);
    for (int m = depth; m <= options.max_microbatches; m *= 2) {
      PlanningRow row;
      row.depth = depth;
      row.microbatches = m;
      const SimulationResult g = simulate(gpipe(depth, m), whole);
      const SimulationResult f = simulate(one_f_one_b(depth, m), whole);
      const SimulationResult i = simulate(interleaved_1f1b(depth, v, m), chunk);
      row.gpipe_bubble = g.bubble_fraction;
      row.one_f_one_b_bubble = f.bubble_fraction;
      row.interleaved_bubble = i.bubble_fraction;
      row.gpipe_step_s = g.step_s;
      row.one_f_one_b_step_s = f.step_s;
      row.interleaved_step_s = i.step_s;
      row.gpipe_peak_bytes = g.max_peak_stored_bytes();
      row.one_f_one_b_peak_bytes = f.max_peak_stored_bytes();
      row.interleaved_peak_bytes = i.max_peak_stored_bytes();
      rows.push_back(row);
    }
  }
  return rows;
}

namespace {

std::string percent(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f%%", 100 * fraction);
  return buffer;
}

std::string mebibytes(std::int64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", static_cast<double>(bytes) / (1 << 20));
  return buffer;
}

}  // namespace

std::string format_planning_table(const PlanningOptions& options,
                                  const std::vector<PlanningRow>& rows) {
  const StageCost& c = options.stage;
  const int v = options.stages_per_rank;
  std::ostringstream out;
  char assumed[512];
  std::snprintf(assumed, sizeof assumed,
                "Equal stages: forward %g ms, backward %g ms, output %g MiB and %g MiB stored per "
                "microbatch%s; link %g us + bytes / %g GB/s. P ranks; GPipe and 1F1B: one stage "
                "per rank; interleaved: %d stages per rank of 1/%d the cost. Ideal: "
                "(P-1)/(M+P-1). Memory: peak stored activations on the busiest rank, MiB.\n\n",
                c.forward_s * 1e3, c.backward_s * 1e3,
                static_cast<double>(c.activation_bytes) / (1 << 20),
                static_cast<double>(c.stored_bytes) / (1 << 20),
                options.recompute ? " (recomputed: only stage inputs kept)" : "",
                options.link.latency_s * 1e6, options.link.bandwidth_bytes_per_s / 1e9, v, v);
  out << assumed;
  out << "| P | M | ideal bubble | GPipe bubble | 1F1B bubble | interleaved bubble | "
         "GPipe memory | 1F1B memory | interleaved memory |\n"
      << "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const PlanningRow& row : rows) {
    const double ideal =
        static_cast<double>(row.depth - 1) / (row.microbatches + row.depth - 1);
    out << "| " << row.depth << " | " << row.microbatches << " | " << percent(ideal) << " | "
        << percent(row.gpipe_bubble) << " | " << percent(row.one_f_one_b_bubble) << " | "
        << percent(row.interleaved_bubble) << " | " << mebibytes(row.gpipe_peak_bytes) << " | "
        << mebibytes(row.one_f_one_b_peak_bytes) << " | " << mebibytes(row.interleaved_peak_bytes)
        << " |\n";
  }
  return out.str();
}

}  // namespace pipeline
}  // namespace tandem
