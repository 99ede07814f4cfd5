#include "comm/pipeline/schedule.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "comm/pipeline/zero_bubble.h"
#include "core/error.h"

namespace tandem {
namespace pipeline {

std::string Action::describe() const {
  if (kind == ActionKind::weight)
    return detail::concat("weight gradients of microbatch ", microbatch, " on stage ", stage);
  return detail::concat(kind == ActionKind::forward ? "forward" : "backward", " of microbatch ", microbatch,
                        " on stage ", stage);
}

std::string Action::label(bool with_stage) const {
  const char* letter = kind == ActionKind::forward ? "F" : kind == ActionKind::backward ? "B" : "W";
  std::string text = detail::concat(letter, microbatch);
  if (with_stage) text += detail::concat("/s", stage);
  return text;
}

Action forward(int stage, int microbatch) { return {ActionKind::forward, stage, microbatch}; }
Action backward(int stage, int microbatch) { return {ActionKind::backward, stage, microbatch}; }
Action weight(int stage, int microbatch) { return {ActionKind::weight, stage, microbatch}; }

std::vector<int> Schedule::stages_of_rank(int rank) const {
  std::vector<int> held;
  for (int stage = 0; stage < stages; ++stage)
    if (rank_of_stage(stage) == rank) held.push_back(stage);
  return held;
}

std::string Schedule::describe() const {
  return detail::concat("'", name, "' (", ranks, ranks == 1 ? " rank, " : " ranks, ", stages,
                        stages == 1 ? " stage, " : " stages, ", microbatches,
                        microbatches == 1 ? " microbatch)" : " microbatches)");
}

std::string Message::describe() const {
  return detail::concat(kind == MessageKind::activation ? "the activation" : "the gradient", " of microbatch ",
                        microbatch, " from stage ", from_stage, " on rank ", from_rank);
}

std::optional<Action> producer_of(const Schedule& schedule, const Action& action) {
  if (action.kind == ActionKind::weight) return std::nullopt;
  if (action.kind == ActionKind::forward) {
    if (action.stage == 0) return std::nullopt;
    return forward(action.stage - 1, action.microbatch);
  }
  if (action.stage == schedule.stages - 1) return std::nullopt;
  return backward(action.stage + 1, action.microbatch);
}

std::optional<Message> received_by(const Schedule& schedule, const Action& action) {
  std::optional<Action> producer = producer_of(schedule, action);
  if (!producer) return std::nullopt;
  const int from = schedule.rank_of_stage(producer->stage);
  const int to = schedule.rank_of_stage(action.stage);
  if (from == to) return std::nullopt;
  const MessageKind kind = action.kind == ActionKind::forward ? MessageKind::activation : MessageKind::gradient;
  return Message{kind, action.microbatch, producer->stage, action.stage, from, to};
}

std::optional<Message> sent_by(const Schedule& schedule, const Action& action) {
  if (action.kind == ActionKind::weight) return std::nullopt;
  const bool forward_kind = action.kind == ActionKind::forward;
  const int to_stage = forward_kind ? action.stage + 1 : action.stage - 1;
  if (to_stage < 0 || to_stage >= schedule.stages) return std::nullopt;
  const int from = schedule.rank_of_stage(action.stage);
  const int to = schedule.rank_of_stage(to_stage);
  if (from == to) return std::nullopt;
  return Message{forward_kind ? MessageKind::activation : MessageKind::gradient,
                 action.microbatch,
                 action.stage,
                 to_stage,
                 from,
                 to};
}

int message_tag(const Message& message) {
  return message.kind == MessageKind::activation ? 2 * message.from_stage : 2 * message.to_stage + 1;
}

namespace {

std::string order_text(const std::vector<int>& microbatches) {
  std::ostringstream out;
  const std::size_t shown = std::min<std::size_t>(microbatches.size(), 8);
  for (std::size_t i = 0; i < shown; ++i) out << (i ? ", " : "") << microbatches[i];
  if (shown < microbatches.size()) out << ", ...";
  return out.str();
}

// The ordering rule between a sending and a receiving stage on different ranks: the receiver's
// k-th receive on the boundary's channel gets the sender's k-th send.
void check_same_order(const Schedule& schedule, ActionKind kind, int sender, int receiver,
                      const std::vector<std::vector<int>>& order, const std::vector<std::vector<int>>& position) {
  const std::vector<int>& sent = order[sender];
  const std::vector<int>& received = order[receiver];
  for (std::size_t k = 0; k < sent.size(); ++k) {
    if (sent[k] == received[k]) continue;
    const bool fwd = kind == ActionKind::forward;
    const Action wrong{kind, receiver, received[k]};
    const int rank = schedule.rank_of_stage(receiver);
    TANDEM_FAIL("pipeline schedule ", schedule.describe(), ": rank ", rank, ", action ",
                position[receiver][received[k]], " (", wrong.describe(), ") would receive ",
                fwd ? "the activation" : "the gradient", " of microbatch ", sent[k], ": stage ", sender, " on rank ",
                schedule.rank_of_stage(sender), " sends its ", fwd ? "activations" : "gradients",
                " in microbatch order ", order_text(sent), " but stage ", receiver, " receives them in order ",
                order_text(received), " (one channel per stage boundary: both stages must run their ",
                fwd ? "forwards" : "backwards", " in the same microbatch order)");
  }
}

// A stage's weight actions, if it has any: one per microbatch, each after its microbatch's
// backward on the same rank, in the order of the stage's backwards.
void check_weight_actions(const Schedule& s, const std::string& who) {
  const int M = s.microbatches;
  for (int r = 0; r < s.ranks; ++r) {
    const std::vector<Action>& list = s.actions[static_cast<std::size_t>(r)];
    std::map<int, std::vector<int>> backwards, weights;  // stage -> microbatches in list order
    std::map<std::pair<int, int>, int> weight_index;     // (stage, microbatch) -> action number
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[static_cast<std::size_t>(i)];
      if (a.kind == ActionKind::backward) backwards[a.stage].push_back(a.microbatch);
      if (a.kind != ActionKind::weight) continue;
      auto [it, added] = weight_index.emplace(std::make_pair(a.stage, a.microbatch), i);
      TANDEM_CHECK(added, who, ": rank ", r, " runs the ", a.describe(), " twice, as actions ", it->second, " and ", i);
      const std::vector<int>& done = backwards[a.stage];
      TANDEM_CHECK(std::find(done.begin(), done.end(), a.microbatch) != done.end(), who, ": rank ", r, ", action ", i,
                   " (", a.describe(), ") comes before the backward of microbatch ", a.microbatch, " on stage ",
                   a.stage, ": a weight action takes what that backward leaves it, so it must follow it");
      std::vector<int>& order = weights[a.stage];
      const std::size_t k = order.size();
      TANDEM_CHECK(done[k] == a.microbatch, who, ": rank ", r, ", action ", i, " (", a.describe(), ") is stage ",
                   a.stage, "'s weight action number ", k, ", but its backward number ", k, " is microbatch ", done[k],
                   ": a stage's weight actions follow the order of its backwards, so ",
                   "its weight gradients are summed in the same order whatever the schedule");
      order.push_back(a.microbatch);
    }
    for (const auto& [stage, order] : weights) {
      if (static_cast<int>(order.size()) == M) continue;
      int missing = 0;
      while (weight_index.count({stage, missing})) ++missing;
      TANDEM_FAIL(who, ": rank ", r, " never runs the ", weight(stage, missing).describe(), ": a stage with weight ",
                  "actions needs one per microbatch, or those weight gradients are never computed");
    }
  }
}

}  // namespace

void validate(const Schedule& s) {
  const std::string who = "pipeline schedule " + s.describe();
  TANDEM_CHECK(s.ranks >= 1 && s.stages >= 1 && s.microbatches >= 1, who,
               ": ranks, stages and microbatches must all be at least 1");
  TANDEM_CHECK(static_cast<int>(s.actions.size()) == s.ranks, who, ": has ", s.actions.size(), " action lists for ",
               s.ranks, " ranks (one list per rank)");
  TANDEM_CHECK(s.stage_ranks.empty() || static_cast<int>(s.stage_ranks.size()) == s.stages, who, ": places ",
               s.stage_ranks.size(), " stages on ranks (stage_ranks) but has ", s.stages,
               " (give one rank per stage, or none for stage s on rank s % ranks)");
  for (int stage = 0; stage < static_cast<int>(s.stage_ranks.size()); ++stage)
    TANDEM_CHECK(s.stage_ranks[stage] >= 0 && s.stage_ranks[stage] < s.ranks, who, ": places stage ", stage,
                 " on rank ", s.stage_ranks[stage], ", outside 0..", s.ranks - 1);

  // Where each (kind, stage, microbatch) runs: its index in its rank's list, -1 if nowhere.
  const int M = s.microbatches;
  std::vector<std::vector<int>> index[2];
  for (auto& per_kind : index) per_kind.assign(s.stages, std::vector<int>(M, -1));
  // Microbatch order per stage and kind, for the ordering rule.
  std::vector<std::vector<int>> order[2];
  for (auto& per_kind : order) per_kind.assign(s.stages, {});

  for (int r = 0; r < s.ranks; ++r) {
    for (int i = 0; i < static_cast<int>(s.actions[r].size()); ++i) {
      const Action& a = s.actions[r][i];
      TANDEM_CHECK(a.stage >= 0 && a.stage < s.stages, who, ": rank ", r, ", action ", i, " names stage ", a.stage,
                   ", outside 0..", s.stages - 1);
      TANDEM_CHECK(a.microbatch >= 0 && a.microbatch < M, who, ": rank ", r, ", action ", i, " names microbatch ",
                   a.microbatch, ", outside 0..", M - 1);
      TANDEM_CHECK(s.rank_of_stage(a.stage) == r, who, ": rank ", r, ", action ", i, " (", a.describe(),
                   ") is on the wrong rank: stage ", a.stage, " runs on rank ", s.rank_of_stage(a.stage),
                   " (stage s on rank s % ", s.ranks, ")");
      if (a.kind == ActionKind::weight) continue;  // checked below
      const int k = a.kind == ActionKind::forward ? 0 : 1;
      int& seen = index[k][a.stage][a.microbatch];
      TANDEM_CHECK(seen < 0, who, ": rank ", r, " runs the ", a.describe(), " twice, as actions ", seen, " and ", i);
      seen = i;
      order[k][a.stage].push_back(a.microbatch);
    }
  }
  for (int k = 0; k < 2; ++k) {
    for (int stage = 0; stage < s.stages; ++stage) {
      for (int m = 0; m < M; ++m) {
        if (index[k][stage][m] >= 0) continue;
        const Action missing{k == 0 ? ActionKind::forward : ActionKind::backward, stage, m};
        TANDEM_FAIL(who, ": rank ", s.rank_of_stage(stage), " never runs the ", missing.describe(),
                    " (every stage runs one forward and one backward per ", "microbatch)");
      }
    }
  }
  for (int stage = 0; stage < s.stages; ++stage) {
    for (int m = 0; m < M; ++m) {
      const int f = index[0][stage][m], b = index[1][stage][m];
      TANDEM_CHECK(b > f, who, ": rank ", s.rank_of_stage(stage), ", action ", b, " (", backward(stage, m).describe(),
                   ") comes before action ", f, " (", forward(stage, m).describe(),
                   "): a backward must follow its forward");
    }
  }
  check_weight_actions(s, who);
  for (int stage = 0; stage + 1 < s.stages; ++stage) {
    if (s.rank_of_stage(stage) == s.rank_of_stage(stage + 1)) continue;  // memory, no channel
    check_same_order(s, ActionKind::forward, stage, stage + 1, order[0], index[0]);
    check_same_order(s, ActionKind::backward, stage + 1, stage, order[1], index[1]);
  }
}

// --- Built-in schedules ----------------------------------------------------------------------

namespace {

void check_sizes(const char* what, int ranks, int microbatches) {
  TANDEM_CHECK(ranks >= 1, what, ": ranks must be at least 1, got ", ranks);
  TANDEM_CHECK(microbatches >= 1, what, ": microbatches must be at least 1, got ", microbatches);
}

Schedule empty_schedule(std::string name, int ranks, int stages, int microbatches) {
  Schedule s;
  s.name = std::move(name);
  s.ranks = ranks;
  s.stages = stages;
  s.microbatches = microbatches;
  s.actions.resize(ranks);
  return s;
}

}  // namespace

Schedule gpipe(int ranks, int microbatches) {
  check_sizes("gpipe", ranks, microbatches);
  Schedule s = empty_schedule("gpipe", ranks, ranks, microbatches);
  for (int r = 0; r < ranks; ++r) {
    for (int m = 0; m < microbatches; ++m) s.actions[r].push_back(forward(r, m));
    for (int m = 0; m < microbatches; ++m) s.actions[r].push_back(backward(r, m));
  }
  return s;
}

Schedule one_f_one_b(int ranks, int microbatches) {
  check_sizes("1f1b", ranks, microbatches);
  Schedule s = empty_schedule("1f1b", ranks, ranks, microbatches);
  for (int r = 0; r < ranks; ++r) {
    std::vector<Action>& list = s.actions[r];
    const int warmup = std::min(ranks - r - 1, microbatches);
    int next_forward = 0, next_backward = 0;
    while (next_forward < warmup) list.push_back(forward(r, next_forward++));
    while (next_forward < microbatches) {
      list.push_back(forward(r, next_forward++));
      list.push_back(backward(r, next_backward++));
    }
    while (next_backward < microbatches) list.push_back(backward(r, next_backward++));
  }
  return s;
}

Schedule interleaved_1f1b(int ranks, int v, int microbatches) {
  check_sizes("interleaved", ranks, microbatches);
  TANDEM_CHECK(v >= 1, "interleaved: stages per rank must be at least 1, got ", v);
  if (v == 1) {
    Schedule s = one_f_one_b(ranks, microbatches);
    s.name = "interleaved";
    return s;
  }
  TANDEM_CHECK(microbatches % ranks == 0, "interleaved: the number of microbatches (", microbatches,
               ") must be a multiple of the number of ranks (", ranks,
               "), as in Megatron-LM's interleaved schedule: microbatches go through each "
               "rank's stages in groups of ",
               ranks);
  Schedule s = empty_schedule("interleaved", ranks, ranks * v, microbatches);
  const int total = microbatches * v;  // (stage, microbatch) pairs per rank
  const int group = ranks * v;
  for (int r = 0; r < ranks; ++r) {
    // Megatron's get_model_chunk_id and microbatch numbering for the k-th forward/backward.
    auto chunk_of = [&](int k, bool fwd) {
      const int chunk = (k % group) / ranks;
      return fwd ? chunk : v - 1 - chunk;
    };
    auto microbatch_of = [&](int k) { return (k / group) * ranks + k % ranks; };
    auto action = [&](int k, bool fwd) {
      const int stage = chunk_of(k, fwd) * ranks + r;
      return fwd ? forward(stage, microbatch_of(k)) : backward(stage, microbatch_of(k));
    };
    int warmup = total;
    if (microbatches != ranks) { warmup = std::min((ranks - r - 1) * 2 + (v - 1) * ranks, total); }
    std::vector<Action>& list = s.actions[r];
    for (int k = 0; k < warmup; ++k) list.push_back(action(k, true));
    for (int k = 0; k < total - warmup; ++k) {
      list.push_back(action(k + warmup, true));
      list.push_back(action(k, false));
    }
    for (int k = total - warmup; k < total; ++k) list.push_back(action(k, false));
  }
  return s;
}

Schedule defer_weight_gradients(const Schedule& schedule) {
  for (const std::vector<Action>& list : schedule.actions)
    for (const Action& a : list)
      TANDEM_CHECK(a.kind != ActionKind::weight, "defer_weight_gradients: pipeline schedule ", schedule.describe(),
                   " already has weight actions (", a.describe(), ")");
  Schedule s = schedule;
  s.name += "-dw";
  s.combine_weights = true;
  for (std::vector<Action>& list : s.actions) {
    std::map<int, std::vector<int>> backwards;  // stage -> its backwards' microbatches, in stage order
    for (const Action& a : list)
      if (a.kind == ActionKind::backward) backwards[a.stage].push_back(a.microbatch);
    for (const auto& [stage, microbatches] : backwards)
      for (int m : microbatches) list.push_back(weight(stage, m));
  }
  return s;
}

std::vector<std::string> schedule_names() {
  return {"gpipe", "1f1b", "interleaved", "gpipe-dw", "1f1b-dw", "interleaved-dw", "zb-h1", "zb-h2", "zbv"};
}

Schedule schedule_by_name(const std::string& name, int ranks, int stages_per_rank, int microbatches) {
  const std::string suffix = "-dw";
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const std::string base = name.substr(0, name.size() - suffix.size());
    if (base == "gpipe" || base == "1f1b" || base == "interleaved")
      return defer_weight_gradients(schedule_by_name(base, ranks, stages_per_rank, microbatches));
  }
  if (name == "interleaved") return interleaved_1f1b(ranks, stages_per_rank, microbatches);
  if (name == "zb-h1" || name == "zb-h2" || name == "zbv") {
    const int held = name == "zbv" ? 2 : 1;
    TANDEM_CHECK(stages_per_rank == held, "pipeline schedule '", name, "' holds ", held,
                 held == 1 ? " stage" : " stages", " per rank, got ", stages_per_rank, " stages per rank");
    if (name == "zb-h1") return zb_h1(ranks, microbatches);
    if (name == "zb-h2") return zb_h2(ranks, microbatches);
    return zbv(ranks, microbatches);
  }
  if (name == "gpipe" || name == "1f1b") {
    TANDEM_CHECK(stages_per_rank == 1, "pipeline schedule '", name, "' holds one stage per rank, got ", stages_per_rank,
                 " stages per rank (use 'interleaved' for several)");
    return name == "gpipe" ? gpipe(ranks, microbatches) : one_f_one_b(ranks, microbatches);
  }
  std::string names;
  for (const std::string& n : schedule_names()) names += (names.empty() ? "'" : ", '") + n + "'";
  TANDEM_FAIL("unknown pipeline schedule '", name, "': the schedules are ", names);
}

}  // namespace pipeline
}  // namespace tandem
