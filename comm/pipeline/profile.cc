#include "comm/pipeline/profile.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>

#include <nlohmann/json.hpp>

#include "comm/protocol/activations_and_gradients.h"
#include "core/error.h"

namespace tandem {
namespace pipeline {

using Json = nlohmann::json;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

MeasuredStep measure_last_step(const Pipeline& pipe, const LinkModel& link) {
  const StepProfile& profile = pipe.last_profile();
  Json mine = {{"step_s", profile.step_s},
               {"peak_bytes", profile.peak_bytes},
               {"stages", Json::array()},
               {"action_seconds", profile.compute_s}};
  for (int s : pipe.stage_ids()) {
    std::vector<double> forwards, backwards;
    double weights = 0;  // the stage's weight actions together (one per backward)
    for (std::size_t i = 0; i < profile.actions.size(); ++i) {
      const Action& action = profile.actions[i].action;
      if (action.stage != s) continue;
      if (action.kind == ActionKind::weight) weights += profile.compute_s[i];
      else (action.kind == ActionKind::forward ? forwards : backwards).push_back(profile.compute_s[i]);
    }
    const auto bytes = [s](const std::map<int, std::int64_t>& m) {
      auto it = m.find(s);
      return it == m.end() ? std::int64_t{0} : it->second;
    };
    mine["stages"].push_back({{"stage", s},
                              {"forwards", forwards.size()},
                              {"backwards", backwards.size()},
                              {"forward_s", median(forwards)},
                              {"backward_s", median(backwards)},
                              {"weight_s", backwards.empty() ? 0.0 : weights / double(backwards.size())},
                              {"activation_bytes", bytes(profile.output_bytes)},
                              {"stored_bytes", bytes(profile.stored_bytes)},
                              {"queued_bytes", bytes(profile.queued_bytes)}});
  }
  Communicator& comm = pipe.communicator();
  const Schedule& schedule = pipe.schedule();
  MeasuredStep out;
  out.options.link = link;
  out.options.stage_costs.assign(static_cast<std::size_t>(schedule.stages), StageCost{});
  for (const Tensor& t : comm.allgather(protocol::text_tensor(mine.dump()))) {
    const Json rank = Json::parse(protocol::tensor_text(t));
    out.step_s = std::max(out.step_s, rank["step_s"].get<double>());
    out.peak_bytes.push_back(rank["peak_bytes"]);
    out.action_seconds.push_back(rank["action_seconds"].get<std::vector<double>>());
    for (const Json& st : rank["stages"]) {
      const int s = st["stage"];
      TANDEM_CHECK(st["forwards"].get<int>() > 0 && st["backwards"].get<int>() > 0, "measure_last_step: stage ", s,
                   " ran ", st["forwards"].get<int>(), " forward(s) and ", st["backwards"].get<int>(),
                   " backward(s) in the last step: measure after a training step");
      StageCost& cost = out.options.stage_costs[static_cast<std::size_t>(s)];
      cost.forward_s = st["forward_s"];
      cost.backward_s = st["backward_s"];
      // Recompute: the measured backward ran the forward again; the simulator adds it itself.
      if (pipe.recompute()) cost.backward_s = std::max(1e-9, cost.backward_s - cost.forward_s);
      cost.forward_s = std::max(1e-9, cost.forward_s);
      cost.backward_s = std::max(1e-9, cost.backward_s);
      // With weight actions the measured backward is the input gradients' part alone.
      cost.weight_s = st["weight_s"];
      cost.backward_s += cost.weight_s;
      cost.activation_bytes = st["activation_bytes"];
      cost.stored_bytes = st["stored_bytes"];
      cost.queued_bytes = st["queued_bytes"];
    }
  }
  out.options.recompute = pipe.recompute();
  return out;
}

SimulationResult measured_result(const Pipeline& pipe) {
  const StepProfile& profile = pipe.last_profile();
  Json mine = {{"start", profile.start_clock_s}, {"peak_bytes", profile.peak_bytes}, {"actions", Json::array()}};
  for (std::size_t i = 0; i < profile.actions.size(); ++i) {
    const TimedAction& a = profile.actions[i];
    mine["actions"].push_back({static_cast<int>(a.action.kind), a.action.stage, a.action.microbatch, a.start_s, a.end_s,
                               profile.compute_s[i]});
  }
  std::vector<Json> all;
  for (const Tensor& t : pipe.communicator().allgather(protocol::text_tensor(mine.dump())))
    all.push_back(Json::parse(protocol::tensor_text(t)));
  double origin = all[0]["start"];
  for (const Json& rank : all) origin = std::min(origin, rank["start"].get<double>());
  SimulationResult result;
  double busy = 0;
  for (const Json& rank : all) {
    RankResult r;
    const double offset = rank["start"].get<double>() - origin;
    int in_flight = 0;
    for (const Json& a : rank["actions"]) {
      const Action action{static_cast<ActionKind>(a[0].get<int>()), a[1].get<int>(), a[2].get<int>()};
      // The action's computation ends it; the wait for its input before that shows as idle.
      const double end = offset + a[4].get<double>(), compute = a[5].get<double>();
      r.actions.push_back(TimedAction{action, std::max(offset + a[3].get<double>(), end - compute), end});
      r.busy_s += compute;
      in_flight += action.kind == ActionKind::forward ? 1 : action.kind == ActionKind::backward ? -1 : 0;
      r.peak_in_flight = std::max(r.peak_in_flight, in_flight);
    }
    r.peak_stored_bytes = rank["peak_bytes"];
    r.end_s = r.actions.empty() ? offset : r.actions.back().end_s;
    result.step_s = std::max(result.step_s, r.end_s);
    busy += r.busy_s;
    result.ranks.push_back(std::move(r));
  }
  if (result.step_s > 0) result.bubble_fraction = 1 - busy / (static_cast<double>(result.ranks.size()) * result.step_s);
  return result;
}

std::string simulate_command(const Schedule& schedule, const SimulationOptions& measured) {
  const auto list = [&](auto value) {
    std::ostringstream out;
    out.precision(4);
    for (std::size_t s = 0; s < measured.stage_costs.size(); ++s)
      out << (s ? "," : "") << value(measured.stage_costs[s]);
    return out.str();
  };
  constexpr double kMiB = 1024.0 * 1024.0;
  const std::vector<std::string> built_in = schedule_names();
  const bool known = std::find(built_in.begin(), built_in.end(), schedule.name) != built_in.end();
  std::ostringstream cmd;
  cmd.precision(4);
  // The tool runs the built-in schedules; a schedule of one's own is shown as the closest.
  if (!known) cmd << "# '" << schedule.name << "' is not built in; simulated here as 1f1b\n";
  const std::string name = known ? schedule.name : schedule.stages > schedule.ranks ? "interleaved" : "1f1b";
  cmd << "bazel run //tools:simulate_pipeline -- --schedule " << name << " --ranks " << schedule.ranks
      << " --stages-per-rank " << schedule.stages / schedule.ranks << " --microbatches " << schedule.microbatches
      << " --forward-ms " << list([](const StageCost& c) { return c.forward_s * 1e3; }) << " --backward-ms "
      << list([](const StageCost& c) { return c.backward_s * 1e3; }) << " --weight-ms "
      << list([](const StageCost& c) { return c.weight_s * 1e3; }) << " --activation-mb "
      << list([&](const StageCost& c) { return c.activation_bytes / kMiB; }) << " --stored-mb "
      << list([&](const StageCost& c) { return c.stored_bytes / kMiB; }) << " --queued-mb "
      << list([&](const StageCost& c) { return std::max<std::int64_t>(c.queued_bytes, 0) / kMiB; }) << " --latency-us "
      << measured.link.latency_s * 1e6 << " --bandwidth-gbps " << measured.link.bandwidth_bytes_per_s / 1e9
      << (measured.recompute ? " --recompute" : "");
  return cmd.str();
}

LinkModel measure_link(Communicator& comm, std::int64_t bytes, int repeats) {
  double result[2] = {0, 0};  // latency_s, bandwidth_bytes_per_s
  if (comm.size() >= 2 && comm.rank() <= 1) {
    const int peer = 1 - comm.rank();
    const auto round_trips = [&](std::int64_t n) {
      const Tensor message = zeros({std::max<std::int64_t>(1, n / 4)}, DType::f32);
      std::vector<double> times;
      for (int i = 0; i < repeats + 2; ++i) {
        const auto start = std::chrono::steady_clock::now();
        if (comm.rank() == 0) {
          comm.send(message, peer, 0);
          comm.recv(peer, 0);
        } else {
          comm.recv(peer, 0);
          comm.send(message, peer, 0);
        }
        if (i >= 2) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      return median(times);
    };
    const double small = round_trips(8), large = round_trips(bytes);
    result[0] = small / 2;
    const double transfer = (large - small) / 2;
    result[1] = transfer > 0 ? static_cast<double>(bytes) / transfer : 0;
  }
  const Tensor shared = comm.bcast(from_vector(std::vector<double>{result[0], result[1]}, {2}), 0);
  LinkModel link;
  link.latency_s = shared.data<double>()[0];
  link.bandwidth_bytes_per_s = shared.data<double>()[1];
  return link;
}

}  // namespace pipeline
}  // namespace tandem
