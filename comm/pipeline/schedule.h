// Pipeline-parallel schedules: which rank runs which stage's forward and backward for which
// microbatch, in what order. A schedule is plain data, checked (validate) and simulated
// (simulator.h) here; the runtime that runs it over MPI takes the same data and does exactly
// the communication described below, so what the simulator proves holds for the runtime.
//
// Stages and ranks. A model is cut into `stages` consecutive stages; stage s runs on rank
// rank_of_stage(s): s % ranks unless the schedule places its stages itself (stage_ranks). With
// stages == ranks that is one stage per rank; with stages == v * ranks each rank holds v stages
// ("model chunks"), round-robin: on 4 ranks with 8 stages, rank 1 holds stages 1 and 5
// (Megatron's interleaved layout). The V-shaped schedules (zbv) place stage s on rank s for the
// first half and on rank 2P - 1 - s for the second: rank 0 holds the first and the last stage.
//
// The communication a schedule implies (the runtime does exactly this):
//   forward(s, m),  s > 0:          receives stage s-1's output for m from rank_of_stage(s-1)
//   forward(s, m),  s < stages-1:   sends its output for m to rank_of_stage(s+1)
//   backward(s, m), s < stages-1:   receives the gradient of its output from rank_of_stage(s+1)
//   backward(s, m), s > 0:          sends the gradient of its input to rank_of_stage(s-1)
// Between two stages on the same rank the data passes through memory: no message, but the
// producer must still come first in that rank's order. Receives come before the action's
// computation and block; sends come after it and do not block (buffered, completed in order
// later). Each stage boundary (s, s+1) has one channel per direction (one tag: message_tag), so
// the k-th activation stage s sends is the k-th one stage s+1 receives; likewise gradients.
//
// The ordering rule validate() enforces for that (exact, not just sufficient): wherever
// stages s and s+1 are on different ranks, stage s+1 runs its forwards in the same microbatch
// order as stage s runs its forwards, and stage s runs its backwards in the same microbatch
// order as stage s+1 runs its backwards. (The built-in schedules run every stage's forwards
// and backwards in increasing microbatch order, which satisfies it.)
//
// Action numbers in error messages count from 0 in the rank's list.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tandem {
namespace pipeline {

// backward = the stage's whole backward for m, or only its input gradients (B) where the schedule
// has weight actions for the stage; weight = the weight gradients of m's backward on the stage
// (W), which nobody waits for: zero-bubble schedules run them where a rank would otherwise wait.
// What B keeps for its W (the linear layers' inputs and output gradients) is freed by the W.
enum class ActionKind { forward, backward, weight };

struct Action {
  ActionKind kind;
  int stage;
  int microbatch;

  // "forward of microbatch 3 on stage 1"; "weight gradients of microbatch 7 on stage 1"
  std::string describe() const;
  // "F3" / "B3" / "W7", with the stage when a rank holds several: "F3/s5".
  std::string label(bool with_stage = false) const;
  bool operator==(const Action& other) const {
    return kind == other.kind && stage == other.stage && microbatch == other.microbatch;
  }
  bool operator!=(const Action& other) const { return !(*this == other); }
};

Action forward(int stage, int microbatch);
Action backward(int stage, int microbatch);
// The weight gradients of microbatch's backward on `stage`.
Action weight(int stage, int microbatch);

struct Schedule {
  std::string name;
  int ranks = 0;
  int stages = 0;
  int microbatches = 0;
  std::vector<std::vector<Action>> actions;  // per rank, in the order it runs them
  // The rank of each stage; empty: stage s on rank s % ranks.
  std::vector<int> stage_ranks;
  // A run of one stage's adjacent weight actions is computed as one product per weight over their
  // microbatches (outside deterministic mode): faster for small microbatches, equal to rounding
  // only. Set by defer_weight_gradients; the zero-bubble schedules compute each W alone, so
  // their gradients are bit-identical to 1F1B's.
  bool combine_weights = false;

  int rank_of_stage(int stage) const {
    return stage_ranks.empty() ? stage % ranks : stage_ranks[static_cast<std::size_t>(stage)];
  }
  // The stages rank r holds, in increasing order (what it passes to Pipeline).
  std::vector<int> stages_of_rank(int rank) const;
  // "1f1b (4 ranks, 4 stages, 8 microbatches)"
  std::string describe() const;
};

// --- The messages a schedule implies -------------------------------------------------------

enum class MessageKind { activation, gradient };

struct Message {
  MessageKind kind;
  int microbatch;
  int from_stage, to_stage;  // to_stage = from_stage + 1 for activations, - 1 for gradients
  int from_rank, to_rank;
  // "the activation of microbatch 2 from stage 0 on rank 0"
  std::string describe() const;
};

// What the action receives before it runs, and sends after; std::nullopt when it receives
// (sends) nothing or when the other stage is on the same rank (memory).
std::optional<Message> received_by(const Schedule& schedule, const Action& action);
std::optional<Message> sent_by(const Schedule& schedule, const Action& action);

// The action whose result the action reads: forward(s-1, m) for forward(s, m), backward(s+1, m)
// for backward(s, m); std::nullopt for the first stage's forward, the last stage's backward
// (which reads the loss of its own forward) and weight actions (which read what their rank's
// earlier backwards queued: no message).
std::optional<Action> producer_of(const Schedule& schedule, const Action& action);

// One tag per stage boundary and direction, the same on both ranks: activations from stage s
// carry 2s, gradients to stage s carry 2s + 1.
int message_tag(const Message& message);

// --- Checks --------------------------------------------------------------------------------

// Structural checks, each failure a tandem::Error naming the schedule, the rank and the action:
// sizes (ranks, stages, microbatches >= 1; one action list per rank), the placement (stage_ranks:
// empty or one rank in range per stage), stage and microbatch in range, every action on
// rank_of_stage of its stage, every forward and every backward exactly once, each backward after
// its forward, and the ordering rule above. Weight actions: a stage has none (its backwards
// compute its weight gradients) or one per microbatch, each after that microbatch's backward,
// in the order of the stage's backwards (so weight gradients are summed in the same order as
// without weight actions). Deadlocks are found by the simulator (check_deadlock_free).
void validate(const Schedule& schedule);

// --- Built-in schedules (each validated and deadlock-free; tests/comm/pipeline) ---------------

// GPipe: every rank runs all forwards, then all backwards, each in increasing microbatch order.
// Peak stored activations: all M microbatches on every rank.
Schedule gpipe(int ranks, int microbatches);

// 1F1B (PipeDream-Flush, Megatron's non-interleaved schedule): rank r runs
// min(ranks - r - 1, M) warm-up forwards, then alternates one forward and one backward, then
// runs the remaining backwards. The same bubble as GPipe, at most min(ranks - r, M) microbatches
// stored on rank r.
Schedule one_f_one_b(int ranks, int microbatches);

// Megatron-LM's interleaved 1F1B: each rank holds stages_per_rank (v) stages, stage s on rank
// s % ranks. Microbatches go through the chunks in groups of `ranks`; rank r warms up with
// (ranks - r - 1) * 2 + (v - 1) * ranks forwards (all of them when microbatches == ranks), then
// alternates, then cools down, as in forward_backward_pipelining_with_interleaving. As Megatron
// requires, microbatches must be a multiple of ranks (an error otherwise). v == 1 is 1F1B.
Schedule interleaved_1f1b(int ranks, int stages_per_rank, int microbatches);

// The schedule with its stages' weight gradients taken out of the backwards and computed at the
// end of each rank's list, stage by stage in stage order, each stage's weight actions in the
// order of its backwards: named "<name>-dw". The runtime computes a run of consecutive weight
// actions of one stage as one product per weight (outside deterministic mode). The backwards that the next stage waits
// for get shorter (the bubble shrinks, as in zero-bubble schedules), and each weight's gradient becomes one product
// over the whole batch instead of one per microbatch (autograd/weight_gradient_queue.h): for
// small microbatches the larger saving. The price is memory: every microbatch's layer inputs
// and output gradients are kept until the end of the step (1F1B's saving is lost).
// Applied to a schedule that already has weight actions: an error.
Schedule defer_weight_gradients(const Schedule& schedule);

// "gpipe", "1f1b" (stages_per_rank must be 1) or "interleaved", each also with "-dw"
// (defer_weight_gradients), or a zero-bubble schedule (zero_bubble.h): "zb-h1", "zb-h2"
// (stages_per_rank 1) or "zbv" (stages_per_rank 2); any other name is an error listing these.
Schedule schedule_by_name(const std::string& name, int ranks, int stages_per_rank, int microbatches);
std::vector<std::string> schedule_names();

}  // namespace pipeline
}  // namespace tandem
