// The simulator's inputs measured on a real model (the issue's --profile): after a step of a
// Pipeline, the compute time of each stage's forward and backward per microbatch, the bytes of
// its outputs and of what a microbatch keeps from forward to backward, gathered from every rank;
// and the link's latency and bandwidth, measured by a ping-pong through the communicator (its
// headers and checks included). simulate() on these predicts the step the user's model takes,
// which the benchmarks set beside the measured step (bench/pipeline_bench.cc).
//
//   pipe->step(batch);                                          // warm, then one measured step
//   LinkModel link = measure_link(*world, bytes_of_one_activation);
//   MeasuredStep measured = measure_last_step(*pipe, link);    // collective over the pipeline
//   SimulationResult predicted = simulate(pipe->schedule(), measured.options);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/pipeline/pipeline.h"
#include "comm/pipeline/simulator.h"

namespace tandem {
namespace pipeline {

struct MeasuredStep {
  SimulationOptions options;             // per stage costs (medians over microbatches), the link
  double step_s = 0;                     // the slowest rank's last step, its final exchange included
  std::vector<std::int64_t> peak_bytes;  // per rank: the most bytes alive above the step's start
  // Per rank, the compute time of each action of its list (waits left out): set it as
  // SimulationOptions::action_seconds to simulate this very step with its own times.
  std::vector<std::vector<double>> action_seconds;
};

// Collective over pipe's ranks: what every rank's last_profile() says, in stage order, with
// `link`. With recompute the backward's time is given without the forward it recomputes (the
// simulator adds it back). Error: a stage that ran no forward or backward in the last step (run
// a training step first).
MeasuredStep measure_last_step(const Pipeline& pipe, const LinkModel& link);

// Collective over pipe's ranks: the last step as it ran, in the simulator's terms, so that the
// timeline, summary and Chrome trace of report.h show the real run beside the prediction. Each
// action spans its computation, ending when it ended (the wait for its input before that shows
// as idle); busy_s sums the computations, so bubble_fraction is the share of the ranks' time
// not computing; peak_stored_bytes is the most tensor bytes alive during the step (weights and
// their gradients excluded as far as they existed before it), peak_in_flight the most
// microbatches between forward and backward.
// Times are aligned on the earliest rank's start: steady_clock is one clock per host, so on
// several hosts the ranks' rows are each right but their offsets are not.
SimulationResult measured_result(const Pipeline& pipe);

// The `bazel run //tools:simulate_pipeline -- ...` command line that simulates `schedule` with
// the measured costs (per-stage lists, MiB = 2^20 bytes, GB/s): to plan other schedules and
// microbatch counts for the same model, edit --schedule and --microbatches.
std::string simulate_command(const Schedule& schedule, const SimulationOptions& measured);

// Collective over comm: ranks 0 and 1 bounce messages of 8 bytes and of `bytes` `repeats` times;
// latency = half the small round trip, bandwidth from the difference; every rank gets the result.
// One rank: a free link.
LinkModel measure_link(Communicator& comm, std::int64_t bytes, int repeats = 20);

}  // namespace pipeline
}  // namespace tandem
