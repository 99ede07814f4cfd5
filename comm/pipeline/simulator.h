// A timed simulation of a pipeline schedule (schedule.h): when each action starts and ends on
// its rank, when each message is sent and arrives, the step time, the bubble and the peak
// memory of stored activations per rank. The simulation runs every rank's list in order and
// matches every receive with the sends on its channel in order, so a schedule it completes
// cannot deadlock under the runtime's rules (buffered sends, blocking receives); one it cannot
// complete is an error that follows the waits from the rank blocked longest to the cycle
// behind them, naming for each rank of the cycle its blocked action (and microbatch), the
// message it waits for (from which stage and rank) and the action that would send it, then the
// ranks blocked behind the cycle.
//
// The model:
// - An action starts when its rank has finished its previous action and its input is there:
//   the message's arrival, or (stages on the same rank) the end of the producing action. It
//   lasts forward_s, or backward_s (forward_s + backward_s with recompute). Where the schedule
//   has weight actions for the stage (zero-bubble schedules, defer_weight_gradients), its
//   backward (B) lasts backward_s - weight_s and each weight action (W) weight_s.
// - Sends cost the sender nothing (non-blocking). A message leaves at the end of the action
//   that sends it and arrives after latency_s + bytes / bandwidth_bytes_per_s. Each ordered
//   pair of ranks has one link carrying one message at a time, in the order they are sent: a
//   message waits for the link while an earlier one is still being transmitted.
// - Activations and gradients of stage s's output both have activation_bytes of stage s.
// - Memory: between its forward and its backward, a microbatch keeps stored_bytes on its stage
//   (with recompute only the stage's input: activation_bytes of stage s - 1, for stage 0 its own
//   activation_bytes, as for a transformer's hidden states). While a stage's forward or backward
//   runs, the whole stored_bytes of that microbatch are live (being made, recomputed or used),
//   so the peak counts them on top of what is kept. A stage with weight actions keeps a
//   microbatch's queued_bytes after its backward, until that microbatch's weight action (its
//   linear layers' inputs and output gradients). Weights, gradients of weights and message
//   buffers are not counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/pipeline/schedule.h"

namespace tandem {
namespace pipeline {

struct StageCost {
  double forward_s = 1;
  double backward_s = 2;              // the whole backward: input and weight gradients
  std::int64_t activation_bytes = 0;  // of the stage's output per microbatch (its gradient too)
  std::int64_t stored_bytes = 0;      // kept from forward to backward per microbatch
  double weight_s = 0;                // the weight gradients' share of backward_s (weight actions)
  std::int64_t queued_bytes = -1;     // kept from backward to weight action; -1: stored_bytes
};

struct LinkModel {
  double latency_s = 0;
  double bandwidth_bytes_per_s = 0;  // 0: unlimited (a message takes latency_s only)
};

struct SimulationOptions {
  std::vector<StageCost> stage_costs = {StageCost{}};  // one per stage, or one for all
  LinkModel link;
  bool recompute = false;  // activation recomputation (see the model above)
  // Empty, or per rank one duration per action of its list (recompute included): replaces the
  // stage costs' times, e.g. with a measured step's own compute times (MeasuredStep), so that
  // the simulation is that step with nothing but its compute and its dependencies. Memory and
  // messages still come from stage_costs.
  std::vector<std::vector<double>> action_seconds;
};

struct TimedAction {
  Action action;
  double start_s = 0, end_s = 0;
};

struct TimedMessage {
  Message message;
  std::int64_t bytes = 0;
  double send_s = 0;     // end of the sending action
  double arrival_s = 0;  // when the receiver may use it
};

struct RankResult {
  std::vector<TimedAction> actions;  // in the rank's order
  double busy_s = 0;                 // sum of its actions' durations
  double end_s = 0;                  // when its last action ends
  std::int64_t peak_stored_bytes = 0;
  int peak_in_flight = 0;  // most (stage, microbatch) pairs between forward and backward
};

struct SimulationResult {
  std::vector<RankResult> ranks;
  std::vector<TimedMessage> messages;  // in the order they are sent, per sending rank
  double step_s = 0;                   // when the last action ends (everything starts at 0)
  double bubble_fraction = 0;          // 1 - sum of busy / (ranks * step)
  // The zero-bubble paper's measure: the ranks' idle time over their compute, (ranks * step -
  // sum of busy) / sum of busy; 1F1B's is (P-1)/M with equal stage times.
  double bubble_rate = 0;
  // The same counting only the idle time inside each rank's span, from its first action's start
  // to its last action's end: what steps that overlap (no synchronisation between them) pay.
  double span_bubble_rate = 0;
  std::int64_t max_peak_stored_bytes() const;
  int max_peak_in_flight() const;
};

// Validates the schedule (validate) and simulates it. Throws tandem::Error for an invalid
// schedule, invalid costs, or a schedule that deadlocks.
SimulationResult simulate(const Schedule& schedule, const SimulationOptions& options = {});

// Proves the schedule deadlock-free: validates it and runs it with unit costs and a free link.
// Throws tandem::Error naming the blocked ranks, actions and the cycle otherwise.
void check_deadlock_free(const Schedule& schedule);

}  // namespace pipeline
}  // namespace tandem
