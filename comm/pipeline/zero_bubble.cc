#include "comm/pipeline/zero_bubble.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace tandem {
namespace pipeline {
namespace {

// How much a rank may keep: at most `before_backward[r]` of one stage's microbatches between their
// forward and B, and at most `before_weight[r]` stage-microbatches (all its stages) between
// forward and W.
struct MemoryLimits {
  std::vector<int> before_backward;  // per rank
  std::vector<int> before_weight;    // per rank
};

// The list scheduler of zero_bubble.h on unit times. Times are whole units, so ties are exact.
class ListScheduler {
 public:
  ListScheduler(Schedule& s, MemoryLimits limits)
      : s_(s),
        limits_(std::move(limits)),
        stages_of_(s.ranks),
        next_forward_(s.stages, 0),
        next_backward_(s.stages, 0),
        before_backward_(s.stages, 0),
        before_weight_(s.ranks, 0),
        pending_weights_(s.ranks),
        free_at_(s.ranks, 0),
        tried_(s.ranks, false),
        remaining_(s.ranks, 0),
        forward_end_(static_cast<std::size_t>(s.stages) * s.microbatches, kUnknown),
        backward_end_(static_cast<std::size_t>(s.stages) * s.microbatches, kUnknown) {
    for (int stage = 0; stage < s.stages; ++stage) {
      const int r = s.rank_of_stage(stage);
      stages_of_[r].push_back(stage);
      remaining_[r] += 3 * s.microbatches;
    }
    // Deepest stage first among a rank's candidates.
    for (auto& stages : stages_of_) std::sort(stages.rbegin(), stages.rend());
  }

  void run() {
    while (true) {
      int r = -1;  // the free rank with work left, earliest first, untried before tried
      for (int q = 0; q < s_.ranks; ++q) {
        if (remaining_[q] == 0) continue;
        if (r < 0 || std::make_pair(free_at_[q], tried_[q]) < std::make_pair(free_at_[r], tried_[r])) r = q;
      }
      if (r < 0) return;
      if (!step(r)) wait(r);
    }
  }

 private:
  static constexpr long kUnknown = -1;
  std::size_t key(int stage, int microbatch) const {
    return static_cast<std::size_t>(stage) * s_.microbatches + microbatch;
  }
  // When the input of the next forward / backward of `stage` is there; kUnknown if not yet known.
  long forward_input(int stage) const {
    const int m = next_forward_[stage];
    return stage == 0 ? 0 : forward_end_[key(stage - 1, m)];
  }
  long backward_input(int stage) const {
    const int m = next_backward_[stage];
    return stage == s_.stages - 1 ? forward_end_[key(stage, m)] : backward_end_[key(stage + 1, m)];
  }
  bool forward_allowed(int r, int stage) const {
    return next_forward_[stage] < s_.microbatches && before_backward_[stage] < limits_.before_backward[r] &&
           before_weight_[r] < limits_.before_weight[r];
  }

  // Runs rank r's preferred action at free_at_[r]; false if none is possible now.
  bool step(int r) {
    const long now = free_at_[r];
    for (int stage : stages_of_[r]) {
      if (!forward_allowed(r, stage)) continue;
      const long input = forward_input(stage);
      if (input == kUnknown || input > now) continue;
      const int m = next_forward_[stage]++;
      forward_end_[key(stage, m)] = now + 1;
      ++before_backward_[stage];
      ++before_weight_[r];
      return record(r, forward(stage, m));
    }
    int best = -1;
    for (int stage : stages_of_[r]) {
      if (next_backward_[stage] >= s_.microbatches) continue;
      const long input = backward_input(stage);
      if (input == kUnknown || input > now) continue;
      if (best < 0 || next_backward_[stage] < next_backward_[best]) best = stage;
    }
    if (best >= 0) {
      const int m = next_backward_[best]++;
      backward_end_[key(best, m)] = now + 1;
      --before_backward_[best];
      pending_weights_[r].push_back(weight(best, m));
      return record(r, backward(best, m));
    }
    if (!pending_weights_[r].empty()) {
      const Action w = pending_weights_[r].front();
      pending_weights_[r].pop_front();
      --before_weight_[r];
      return record(r, w);
    }
    return false;
  }

  bool record(int r, const Action& a) {
    s_.actions[r].push_back(a);
    ++free_at_[r];
    --remaining_[r];
    std::fill(tried_.begin(), tried_.end(), false);  // something changed: every rank may try again
    return true;
  }

  // Rank r can do nothing at free_at_[r]: it waits for the next input it knows of, or for the
  // next moment another rank finishes something.
  void wait(int r) {
    const long now = free_at_[r];
    long next = std::numeric_limits<long>::max();
    for (int stage : stages_of_[r]) {
      if (forward_allowed(r, stage)) {
        const long input = forward_input(stage);
        if (input != kUnknown && input > now) next = std::min(next, input);
      }
      if (next_backward_[stage] < s_.microbatches) {
        const long input = backward_input(stage);
        if (input != kUnknown && input > now) next = std::min(next, input);
      }
    }
    bool other_may_act_now = false;
    for (int q = 0; q < s_.ranks; ++q) {
      if (q == r || remaining_[q] == 0) continue;
      if (free_at_[q] > now) next = std::min(next, free_at_[q]);
      if (free_at_[q] == now && !tried_[q]) other_may_act_now = true;
    }
    if (other_may_act_now) {
      tried_[r] = true;
      return;
    }
    // Unreachable with the built-in limits (tests/comm/pipeline/zero_bubble_test sweeps them).
    TANDEM_CHECK(next != std::numeric_limits<long>::max(), "pipeline schedule ", s_.describe(), ": rank ", r,
                 " can run nothing at time ", now, " under the schedule's memory limits (", limits_.before_backward[r],
                 " microbatches per stage before B, ", limits_.before_weight[r], " before W)");
    free_at_[r] = next;
    tried_[r] = false;
  }

  Schedule& s_;
  MemoryLimits limits_;
  std::vector<std::vector<int>> stages_of_;
  std::vector<int> next_forward_, next_backward_, before_backward_, before_weight_;
  std::vector<std::deque<Action>> pending_weights_;
  std::vector<long> free_at_;
  std::vector<bool> tried_;
  std::vector<long> remaining_;
  std::vector<long> forward_end_, backward_end_;
};

Schedule zero_bubble(const char* name, int ranks, int stages_per_rank, int microbatches, const MemoryLimits& limits,
                     std::vector<int> stage_ranks) {
  TANDEM_CHECK(ranks >= 1, name, ": ranks must be at least 1, got ", ranks);
  TANDEM_CHECK(microbatches >= 1, name, ": microbatches must be at least 1, got ", microbatches);
  Schedule s;
  s.name = name;
  s.ranks = ranks;
  s.stages = ranks * stages_per_rank;
  s.microbatches = microbatches;
  s.actions.resize(static_cast<std::size_t>(ranks));
  s.stage_ranks = std::move(stage_ranks);
  ListScheduler(s, limits).run();
  return s;
}

}  // namespace

Schedule zb_h1(int ranks, int microbatches) {
  MemoryLimits limits;
  for (int r = 0; r < ranks; ++r) {
    limits.before_backward.push_back(ranks - r);
    limits.before_weight.push_back(ranks);
  }
  return zero_bubble("zb-h1", ranks, 1, microbatches, limits, {});
}

Schedule zb_h2(int ranks, int microbatches) {
  MemoryLimits limits;
  for (int r = 0; r < ranks; ++r) {
    limits.before_backward.push_back(2 * ranks - 1 - 2 * r);
    limits.before_weight.push_back(2 * ranks - 1);
  }
  return zero_bubble("zb-h2", ranks, 1, microbatches, limits, {});
}

Schedule zbv(int ranks, int microbatches) {
  MemoryLimits limits;
  std::vector<int> stage_ranks;
  for (int r = 0; r < ranks; ++r) {
    limits.before_backward.push_back(2 * ranks);
    limits.before_weight.push_back(2 * ranks);
  }
  for (int stage = 0; stage < 2 * ranks; ++stage) stage_ranks.push_back(stage < ranks ? stage : 2 * ranks - 1 - stage);
  return zero_bubble("zbv", ranks, 2, microbatches, limits, std::move(stage_ranks));
}

}  // namespace pipeline
}  // namespace tandem
