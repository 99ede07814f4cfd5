// Planning a pipeline far larger than the machine at hand: the simulated bubble and peak stored
// activations per rank of GPipe, 1F1B and interleaved 1F1B over a grid of pipeline depths and
// microbatch counts, with equal stages. What `bazel run //tools:simulate_pipeline -- --table`
// prints (and docs/pipelines.md shows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/pipeline/simulator.h"

namespace tandem {
namespace pipeline {

struct PlanningOptions {
  StageCost stage;  // every stage of the P-stage cut (one stage per rank)
  LinkModel link;
  bool recompute = false;
  std::vector<int> depths = {8, 16, 32, 64};  // P: ranks, and stages for GPipe and 1F1B
  int max_microbatches = 256;                 // M = P, 2P, 4P, ... up to this
  // Interleaved 1F1B on the same P ranks, with the model cut into v * P stages: each one
  // costs 1/v of a stage above (times, stored bytes); its output has the same size.
  int stages_per_rank = 2;
};

struct PlanningRow {
  int depth = 0;         // P
  int microbatches = 0;  // M
  double gpipe_bubble = 0, one_f_one_b_bubble = 0, interleaved_bubble = 0;
  double gpipe_step_s = 0, one_f_one_b_step_s = 0, interleaved_step_s = 0;
  // The largest peak over ranks (rank 0's for 1F1B).
  std::int64_t gpipe_peak_bytes = 0, one_f_one_b_peak_bytes = 0, interleaved_peak_bytes = 0;
};

std::vector<PlanningRow> planning_table(const PlanningOptions& options);

// A Markdown table, with a line saying what was assumed.
std::string format_planning_table(const PlanningOptions& options,
                                  const std::vector<PlanningRow>& rows);

}  // namespace pipeline
}  // namespace tandem
