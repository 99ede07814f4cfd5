#include "comm/pipeline/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tandem {
namespace pipeline {

namespace {

std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

// Seconds in the unit that keeps the numbers readable.
struct TimeUnit {
  const char* name;
  double per_second;
};
TimeUnit time_unit(double seconds) {
  if (seconds >= 1) return {"s", 1};
  if (seconds >= 1e-3) return {"ms", 1e3};
  return {"us", 1e6};
}

std::string mebibytes(std::int64_t bytes) { return format("%.1f MiB", static_cast<double>(bytes) / (1 << 20)); }

}  // namespace

std::string format_timeline(const Schedule& schedule, const SimulationResult& result, int max_width) {
  TANDEM_CHECK(max_width >= 10, "format_timeline: max_width must be at least 10, got ", max_width);
  const bool with_stage = schedule.stages > schedule.ranks;
  double shortest = 0;
  std::size_t longest_label = 1;
  for (const RankResult& rank : result.ranks) {
    for (const TimedAction& t : rank.actions) {
      const double d = t.end_s - t.start_s;
      if (d > 0 && (shortest == 0 || d < shortest)) shortest = d;
      longest_label = std::max(longest_label, t.action.label(with_stage).size());
    }
  }
  // Columns per second: the shortest action gets its label and a space, within max_width.
  int width = max_width;
  if (result.step_s > 0 && shortest > 0) {
    const double wanted = std::ceil(result.step_s / shortest * (longest_label + 1));
    width = static_cast<int>(std::min<double>(wanted, max_width));
  }
  const double scale = result.step_s > 0 ? width / result.step_s : 0;
  const TimeUnit unit = time_unit(result.step_s);

  std::ostringstream out;
  out << "timeline: 0 .. " << format("%.3f", result.step_s * unit.per_second) << " " << unit.name << ", one column = "
      << format("%.4g", (width > 0 && result.step_s > 0 ? result.step_s / width : 0) * unit.per_second) << " "
      << unit.name << "; F<m>/B<m>: forward/backward of microbatch m" << (with_stage ? " (/s<stage>)" : "")
      << ", '.': idle\n";
  const std::string rank_width = std::to_string(schedule.ranks - 1);
  for (int r = 0; r < schedule.ranks; ++r) {
    std::string row(width, '.');
    for (const TimedAction& t : result.ranks[r].actions) {
      int begin = static_cast<int>(std::lround(t.start_s * scale));
      int end = static_cast<int>(std::lround(t.end_s * scale));
      begin = std::min(begin, width - 1);
      end = std::min(std::max(end, begin + 1), width);
      // Without room for the stage, the microbatch alone (then as much of it as fits).
      std::string label = t.action.label(with_stage);
      if (static_cast<int>(label.size()) >= end - begin) label = t.action.label(false);
      for (int c = begin; c < end; ++c) {
        const std::size_t i = static_cast<std::size_t>(c - begin);
        row[c] = i < label.size() ? label[i] : ' ';
      }
    }
    std::string name = "rank " + std::to_string(r);
    name.resize(5 + rank_width.size(), ' ');
    out << name << " |" << row << "|\n";
  }
  return out.str();
}

std::string format_summary(const Schedule& schedule, const SimulationResult& result) {
  const TimeUnit unit = time_unit(result.step_s);
  std::ostringstream out;
  out << "schedule " << schedule.describe() << ": deadlock-free (every receive matched in order)\n"
      << "step time " << format("%.3f", result.step_s * unit.per_second) << " " << unit.name << ", bubble "
      << format("%.2f", 100 * result.bubble_fraction) << "% (" << result.messages.size() << " messages between ranks)\n"
      << "bubble rate (idle over compute) " << format("%.2f", 100 * result.bubble_rate) << "%, within each rank's span "
      << format("%.2f", 100 * result.span_bubble_rate) << "%\n";
  out << "rank     busy       idle        peak stored activations (microbatch-stages)\n";
  for (int r = 0; r < schedule.ranks; ++r) {
    const RankResult& rank = result.ranks[r];
    char line[160];
    std::snprintf(line, sizeof line, "%-6d %8.3f %-2s %8.3f %-2s  %14s (%d)\n", r, rank.busy_s * unit.per_second,
                  unit.name, (result.step_s - rank.busy_s) * unit.per_second, unit.name,
                  mebibytes(rank.peak_stored_bytes).c_str(), rank.peak_in_flight);
    out << line;
  }
  return out.str();
}

std::string chrome_trace_json(const Schedule& schedule, const SimulationResult& result) {
  using nlohmann::json;
  const bool with_stage = schedule.stages > schedule.ranks;
  json events = json::array();
  for (int r = 0; r < schedule.ranks; ++r) {
    const std::string name = "rank " + std::to_string(r);
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", r}, {"tid", r}, {"args", {{"name", name}}}});
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", r}, {"tid", r}, {"args", {{"name", name}}}});
    const std::vector<TimedAction>& actions = result.ranks[r].actions;
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const TimedAction& t = actions[i];
      const char* category = t.action.kind == ActionKind::forward    ? "forward"
                             : t.action.kind == ActionKind::backward ? "backward"
                                                                     : "weight";
      events.push_back({{"name", t.action.label(with_stage)},
                        {"cat", category},
                        {"ph", "X"},
                        {"ts", t.start_s * 1e6},
                        {"dur", (t.end_s - t.start_s) * 1e6},
                        {"pid", r},
                        {"tid", r},
                        {"args", {{"stage", t.action.stage}, {"microbatch", t.action.microbatch}, {"action", i}}}});
    }
  }
  json trace = {{"traceEvents", events},
                {"displayTimeUnit", "ms"},
                {"otherData",
                 {{"schedule", schedule.name},
                  {"ranks", schedule.ranks},
                  {"stages", schedule.stages},
                  {"microbatches", schedule.microbatches},
                  {"step_us", result.step_s * 1e6},
                  {"bubble_fraction", result.bubble_fraction},
                  {"bubble_rate", result.bubble_rate},
                  {"span_bubble_rate", result.span_bubble_rate}}}};
  return trace.dump(1);
}

void write_chrome_trace(const std::string& path, const Schedule& schedule, const SimulationResult& result) {
  std::ofstream file(path);
  TANDEM_CHECK(file, "write_chrome_trace: cannot open '", path, "' for writing");
  file << chrome_trace_json(schedule, result) << "\n";
  file.close();
  TANDEM_CHECK(file, "write_chrome_trace: writing '", path, "' failed");
}

}  // namespace pipeline
}  // namespace tandem
