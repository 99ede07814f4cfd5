// Views of a simulated schedule (simulator.h): a text timeline and summary for the terminal, and
// a Chrome trace (chrome://tracing, https://ui.perfetto.dev) with one complete event per action.
#pragma once

#include <string>

#include "comm/pipeline/simulator.h"

namespace tandem {
namespace pipeline {

// One row per rank, actions placed by time: "F3" is the forward of microbatch 3, "B3" its
// backward ("F3/s5" on stage 5 when ranks hold several stages), '.' is idle. The time scale is
// chosen so that the shortest action has room for its label and a space, within max_width
// columns; where an action has less room, its label loses the stage, then is cut short.
std::string format_timeline(const Schedule& schedule, const SimulationResult& result,
                            int max_width = 120);

// The step time, bubble and per-rank busy time, idle time and peak stored activations.
std::string format_summary(const Schedule& schedule, const SimulationResult& result);

// {"traceEvents": [...]}: per action a complete event (ph "X", ts and dur in microseconds,
// name "F3"/"B3", cat "forward"/"backward", pid = tid = rank, args: stage, microbatch, action
// index), plus metadata events naming each rank ("rank 0", ...).
std::string chrome_trace_json(const Schedule& schedule, const SimulationResult& result);
void write_chrome_trace(const std::string& path, const Schedule& schedule,
                        const SimulationResult& result);

}  // namespace pipeline
}  // namespace tandem
