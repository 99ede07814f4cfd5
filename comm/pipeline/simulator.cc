#include "comm/pipeline/simulator.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace tandem {
namespace pipeline {

std::int64_t SimulationResult::max_peak_stored_bytes() const {
  std::int64_t peak = 0;
  for (const RankResult& r : ranks) peak = std::max(peak, r.peak_stored_bytes);
  return peak;
}

int SimulationResult::max_peak_in_flight() const {
  int peak = 0;
  for (const RankResult& r : ranks) peak = std::max(peak, r.peak_in_flight);
  return peak;
}

namespace {

std::vector<StageCost> costs_per_stage(const Schedule& s, const SimulationOptions& options) {
  const std::vector<StageCost>& given = options.stage_costs;
  TANDEM_CHECK(given.size() == 1 || static_cast<int>(given.size()) == s.stages, "simulate: ", given.size(),
               " stage costs for ", s.stages, " stages (give one per stage, or one for all)");
  for (std::size_t i = 0; i < given.size(); ++i) {
    const StageCost& c = given[i];
    TANDEM_CHECK(std::isfinite(c.forward_s) && std::isfinite(c.backward_s) && c.forward_s >= 0 && c.backward_s >= 0 &&
                     std::isfinite(c.weight_s) && c.weight_s >= 0 && c.weight_s <= c.backward_s &&
                     c.activation_bytes >= 0 && c.stored_bytes >= 0 && c.queued_bytes >= -1,
                 "simulate: stage cost ", i, " has forward ", c.forward_s, " s, backward ", c.backward_s,
                 " s (weight gradients ", c.weight_s, " s of it), activation ", c.activation_bytes, " bytes, stored ",
                 c.stored_bytes,
                 " bytes: times must be finite and >= 0, the weight gradients' at most the backward's, "
                 "sizes >= 0");
  }
  const LinkModel& link = options.link;
  TANDEM_CHECK(std::isfinite(link.latency_s) && link.latency_s >= 0 && std::isfinite(link.bandwidth_bytes_per_s) &&
                   link.bandwidth_bytes_per_s >= 0,
               "simulate: the link's latency (", link.latency_s, " s) and bandwidth (", link.bandwidth_bytes_per_s,
               " bytes/s) must be finite and >= 0 (bandwidth 0: "
               "unlimited)");
  if (!options.action_seconds.empty()) {
    TANDEM_CHECK(static_cast<int>(options.action_seconds.size()) == s.ranks, "simulate: action_seconds has ",
                 options.action_seconds.size(), " lists for ", s.ranks, " ranks (one per rank, or none)");
    for (int r = 0; r < s.ranks; ++r) {
      const std::vector<double>& times = options.action_seconds[static_cast<std::size_t>(r)];
      TANDEM_CHECK(times.size() == s.actions[static_cast<std::size_t>(r)].size(), "simulate: action_seconds of rank ",
                   r, " has ", times.size(), " durations for its ", s.actions[static_cast<std::size_t>(r)].size(),
                   " actions");
      for (double t : times)
        TANDEM_CHECK(std::isfinite(t) && t >= 0, "simulate: rank ", r, " has an action duration of ", t,
                     " s (finite and >= 0)");
    }
  }
  if (given.size() == 1) return std::vector<StageCost>(s.stages, given[0]);
  return given;
}

// A channel is one stage boundary in one direction (one tag): messages in the order sent.
struct Channel {
  struct Entry {
    int microbatch;
    double arrival_s;
  };
  std::vector<Entry> sent;
  std::size_t received = 0;
};

class Simulation {
 public:
  Simulation(const Schedule& s, const SimulationOptions& options)
      : s_(s),
        costs_(costs_per_stage(s, options)),
        link_(options.link),
        recompute_(options.recompute),
        action_seconds_(options.action_seconds),
        channels_(2 * s.stages),
        end_(2, std::vector<double>(static_cast<std::size_t>(s.stages) * s.microbatches, -1)),
        link_free_(static_cast<std::size_t>(s.ranks) * s.ranks, 0),
        position_(s.ranks, 0),
        live_(s.ranks, 0),
        in_flight_(s.ranks, 0),
        deferred_(s.stages, false) {
    result_.ranks.resize(s.ranks);
    for (const std::vector<Action>& list : s.actions)
      for (const Action& a : list)
        if (a.kind == ActionKind::weight) deferred_[a.stage] = true;
  }

  SimulationResult run() {
    std::size_t remaining = 0;
    for (const auto& list : s_.actions) remaining += list.size();
    bool progress = true;
    while (remaining > 0 && progress) {
      progress = false;
      for (int r = 0; r < s_.ranks; ++r) {
        while (position_[r] < s_.actions[r].size() && try_run(r)) {
          ++position_[r];
          --remaining;
          progress = true;
        }
      }
    }
    if (remaining > 0) fail_deadlock();
    double busy = 0, span_idle = 0;
    for (const RankResult& r : result_.ranks) {
      result_.step_s = std::max(result_.step_s, r.end_s);
      busy += r.busy_s;
      if (!r.actions.empty()) span_idle += r.end_s - r.actions.front().start_s - r.busy_s;
    }
    result_.bubble_fraction = result_.step_s > 0 ? 1 - busy / (s_.ranks * result_.step_s) : 0;
    result_.bubble_rate = busy > 0 ? (s_.ranks * result_.step_s - busy) / busy : 0;
    result_.span_bubble_rate = busy > 0 ? span_idle / busy : 0;
    return std::move(result_);
  }

 private:
  std::size_t key(int stage, int microbatch) const {
    return static_cast<std::size_t>(stage) * s_.microbatches + microbatch;
  }
  double& end_of(const Action& a) {  // forwards and backwards (weight actions produce nothing)
    return end_[a.kind == ActionKind::forward ? 0 : 1][key(a.stage, a.microbatch)];
  }
  std::int64_t kept_bytes(int stage) const {
    if (!recompute_) return costs_[stage].stored_bytes;
    return costs_[stage > 0 ? stage - 1 : 0].activation_bytes;
  }

  // Runs rank r's next action if its input is there; false if it has to wait.
  bool try_run(int r) {
    const Action& a = s_.actions[r][position_[r]];
    double ready = 0;
    if (std::optional<Message> in = received_by(s_, a)) {
      Channel& channel = channels_[message_tag(*in)];
      if (channel.received == channel.sent.size()) return false;
      const Channel::Entry& got = channel.sent[channel.received];
      // validate()'s ordering rule makes this hold; checked here as the runtime would see it.
      TANDEM_CHECK(got.microbatch == a.microbatch, "simulate: pipeline schedule ", s_.describe(), ": rank ", r,
                   ", action ", position_[r], " (", a.describe(), ") receives microbatch ", got.microbatch,
                   " instead of ", a.microbatch);
      ++channel.received;
      ready = got.arrival_s;
    } else if (std::optional<Action> producer = producer_of(s_, a)) {
      const double done = end_of(*producer);  // same rank: through memory
      if (done < 0) return false;
      ready = done;
    }
    const StageCost& cost = costs_[a.stage];
    const bool fwd = a.kind == ActionKind::forward, weights = a.kind == ActionKind::weight;
    const bool split = deferred_[a.stage];
    double duration =
        fwd ? cost.forward_s : cost.backward_s - (split ? cost.weight_s : 0) + (recompute_ ? cost.forward_s : 0);
    if (weights) duration = cost.weight_s;
    if (!action_seconds_.empty()) duration = action_seconds_[r][position_[r]];
    RankResult& rank = result_.ranks[r];
    const double start = std::max(rank.end_s, ready);
    const double end = start + duration;
    rank.actions.push_back({a, start, end});
    rank.busy_s += duration;
    rank.end_s = end;
    if (!weights) end_of(a) = end;

    // Memory: the microbatch's whole stored_bytes are live while the action runs.
    const std::int64_t kept = kept_bytes(a.stage);
    const std::int64_t queued = cost.queued_bytes >= 0 ? cost.queued_bytes : cost.stored_bytes;
    if (weights) {  // its microbatch gives back what its backward kept for it
      live_[r] -= queued;
    } else if (fwd) {
      rank.peak_stored_bytes = std::max(rank.peak_stored_bytes, live_[r] + cost.stored_bytes);
      live_[r] += kept;
      rank.peak_in_flight = std::max(rank.peak_in_flight, ++in_flight_[r]);
    } else {
      rank.peak_stored_bytes = std::max(rank.peak_stored_bytes, live_[r] - kept + cost.stored_bytes);
      live_[r] -= kept;
      --in_flight_[r];
      if (split) live_[r] += queued;  // kept until its weight action
    }

    if (std::optional<Message> out = sent_by(s_, a)) {
      const std::int64_t bytes = costs_[fwd ? a.stage : a.stage - 1].activation_bytes;
      const double transmit = link_.bandwidth_bytes_per_s > 0 ? bytes / link_.bandwidth_bytes_per_s : 0;
      double& link_free = link_free_[static_cast<std::size_t>(out->from_rank) * s_.ranks + out->to_rank];
      const double leaves = std::max(end, link_free);
      link_free = leaves + transmit;
      const double arrival = leaves + transmit + link_.latency_s;
      channels_[message_tag(*out)].sent.push_back({a.microbatch, arrival});
      result_.messages.push_back({*out, bytes, end, arrival});
    }
    return true;
  }

  // What rank r's next action waits for, and where that comes from.
  struct Wait {
    Action action;    // the blocked action
    Action producer;  // the action whose result it needs
    int producer_rank;
    int producer_index;  // in the producer rank's list
    std::optional<Message> message;
  };
  Wait wait_of(int r) const {
    const Action& a = s_.actions[r][position_[r]];
    const Action producer = *producer_of(s_, a);  // a first-stage forward never waits
    const int q = s_.rank_of_stage(producer.stage);
    const auto& list = s_.actions[q];
    const int index = static_cast<int>(std::find(list.begin(), list.end(), producer) - list.begin());
    return {a, producer, q, index, received_by(s_, a)};
  }

  // Every unfinished rank waits for an action of an unfinished rank (validate() makes every
  // producer exist, and one not yet run is at or after its rank's position), so following the
  // waits from any blocked rank ends in a cycle. The error describes that cycle, starting from
  // the rank that has waited longest, then names the ranks blocked behind it.
  [[noreturn]] void fail_deadlock() const {
    std::vector<int> blocked;
    for (int r = 0; r < s_.ranks; ++r) {
      if (position_[r] < s_.actions[r].size()) blocked.push_back(r);
    }
    auto waited_longer = [&](int a, int b) {  // a rank waits from the end of its last action
      return result_.ranks[a].end_s < result_.ranks[b].end_s ||
             (result_.ranks[a].end_s == result_.ranks[b].end_s && a < b);
    };
    const int first = *std::min_element(blocked.begin(), blocked.end(), waited_longer);
    std::vector<int> path;
    int r = first;
    while (std::find(path.begin(), path.end(), r) == path.end()) {
      path.push_back(r);
      r = wait_of(r).producer_rank;
    }
    std::vector<int> cycle(std::find(path.begin(), path.end(), r), path.end());
    std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end(), waited_longer), cycle.end());

    std::ostringstream out;
    out << "pipeline schedule " << s_.describe() << " deadlocks: ";
    for (std::size_t i = 0; i < cycle.size(); ++i) {
      const int q = cycle[i];
      const Wait w = wait_of(q);
      out << (i ? "; rank " : "rank ") << q << " is blocked at action " << position_[q] << " (" << w.action.describe()
          << "), waiting for ";
      if (w.message) {
        out << w.message->describe() << ", which rank " << w.producer_rank << " sends only after its action "
            << w.producer_index << " (" << w.producer.describe() << ")";
      } else {
        out << "the result of its own action " << w.producer_index << " (" << w.producer.describe()
            << "), which comes later in its order";
      }
    }
    out << ". Cycle: ";
    for (int q : cycle) out << "rank " << q << " -> ";
    out << "rank " << cycle.front() << ".";
    std::vector<int> behind;
    for (int q : blocked) {
      if (std::find(cycle.begin(), cycle.end(), q) == cycle.end()) behind.push_back(q);
    }
    if (!behind.empty()) {
      out << " Blocked behind it:";
      const std::size_t shown = std::min<std::size_t>(behind.size(), 4);
      for (std::size_t i = 0; i < shown; ++i) {
        const int q = behind[i];
        out << (i ? "," : "") << " rank " << q << " at action " << position_[q] << " ("
            << s_.actions[q][position_[q]].describe() << ")";
      }
      if (shown < behind.size()) out << " and " << behind.size() - shown << " more ranks";
      out << ".";
    }
    TANDEM_FAIL(out.str());
  }

  const Schedule& s_;
  std::vector<StageCost> costs_;
  LinkModel link_;
  bool recompute_;
  const std::vector<std::vector<double>>& action_seconds_;
  std::vector<Channel> channels_;         // by message_tag
  std::vector<std::vector<double>> end_;  // [kind][stage, microbatch]: end time, -1: not yet
  std::vector<double> link_free_;         // [from * ranks + to]
  std::vector<std::size_t> position_;     // next action per rank
  std::vector<std::int64_t> live_;        // kept bytes per rank now
  std::vector<int> in_flight_;
  std::vector<bool> deferred_;  // per stage: the schedule has weight actions for it
  SimulationResult result_;
};

}  // namespace

SimulationResult simulate(const Schedule& schedule, const SimulationOptions& options) {
  validate(schedule);
  return Simulation(schedule, options).run();
}

void check_deadlock_free(const Schedule& schedule) {
  SimulationOptions unit;
  unit.stage_costs = {StageCost{1, 1, 0, 0}};
  simulate(schedule, unit);
}

}  // namespace pipeline
}  // namespace tandem
