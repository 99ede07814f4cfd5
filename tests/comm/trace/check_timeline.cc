// check_timeline FILE RANKS [CLOCK_TOLERANCE_US]: checks a job's timeline (core/timeline.h) for
// timeline_test.sh and tests/comm/hosts: valid JSON in the Chrome-trace format, one named process
// per rank, spans that nest on every thread (a span that starts inside another ends inside it),
// every flow start paired with one flow end on another rank and no later than it (ranks' clocks
// aligned), and the forward, backward, communication, pipeline and iteration
// spans a pipelined training run must have, with the iteration and microbatch as arguments.
// Prints what it counted; exits 1 with the reason when a check fails.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

using nlohmann::json;

namespace {
int failures = 0;
void check(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what.c_str());
    ++failures;
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: check_timeline FILE RANKS [CLOCK_TOLERANCE_US]\n");
    return 2;
  }
  const int ranks = std::stoi(argv[2]);
  // How far a receive may seem to end before its send began (the clocks of different hosts,
  // aligned to within a few microseconds; 1 on one host, for the flow end's 1 us inside its span).
  const long long tolerance_us = argc == 4 ? std::stoll(argv[3]) : 1;
  json doc;
  try {
    std::ifstream(argv[1]) >> doc;
  } catch (const std::exception& e) {
    std::printf("FAIL: %s is not valid JSON: %s\n", argv[1], e.what());
    return 1;
  }
  check(doc.contains("traceEvents") && doc["traceEvents"].is_array(), "no traceEvents array");
  std::set<int> named;
  std::map<std::pair<int, int>, std::vector<std::pair<long long, long long>>> spans;  // (pid, tid) -> [ts, end)
  std::map<std::string, int> categories;
  std::map<unsigned long long, std::vector<int>> flow_starts, flow_ends;  // id -> pids
  std::map<unsigned long long, long long> flow_start_ts, flow_end_ts;
  int with_iteration = 0, with_microbatch = 0, async_begins = 0, async_ends = 0;
  for (const json& e : doc["traceEvents"]) {
    const std::string ph = e.at("ph");
    const int pid = e.at("pid");
    check(pid >= 0 && pid < ranks, "an event of process " + std::to_string(pid));
    if (ph == "M" && e.at("name") == "process_name") named.insert(pid);
    if (ph == "X") {
      const long long ts = e.at("ts"), dur = e.at("dur");
      check(dur >= 0, "a negative duration");
      spans[{pid, e.at("tid").get<int>()}].push_back({ts, ts + dur});
      ++categories[e.at("cat")];
      if (e.at("args").contains("iteration")) ++with_iteration;
      if (e.at("args").contains("microbatch")) ++with_microbatch;
    }
    if (ph == "b") {  // an async slice: a message in flight beside the thread's spans
      ++categories[e.at("cat")];
      ++async_begins;
    }
    if (ph == "e") ++async_ends;
    if (ph == "s") {
      flow_starts[e.at("id")].push_back(pid);
      flow_start_ts[e.at("id")] = e.at("ts");
    }
    if (ph == "f") {
      flow_ends[e.at("id")].push_back(pid);
      flow_end_ts[e.at("id")] = e.at("ts");
    }
  }
  check(static_cast<int>(named.size()) == ranks, "named processes: " + std::to_string(named.size()));
  // Nesting: sorted by start (longer first on ties), each span lies inside the innermost open one.
  int crossings = 0;
  for (auto& [track, list] : spans) {
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<long long> open_ends;
    for (const auto& [begin, end] : list) {
      while (!open_ends.empty() && open_ends.back() <= begin) open_ends.pop_back();
      if (!open_ends.empty() && end > open_ends.back()) ++crossings;
      open_ends.push_back(end);
    }
  }
  check(crossings == 0, std::to_string(crossings) + " span(s) end outside the span they start in");
  int paired = 0, received_before_sent = 0;
  for (const auto& [id, starts] : flow_starts) {
    const auto ends = flow_ends.find(id);
    const bool ok = starts.size() == 1 && ends != flow_ends.end() && ends->second.size() == 1 &&
                    ends->second[0] != starts[0];
    check(ok, "flow " + std::to_string(id) + " is not one send paired with one receive on another rank");
    paired += ok ? 1 : 0;
    // Causality: a message is received after it was sent, on the (aligned) clocks of the trace.
    if (ok && flow_end_ts[id] + tolerance_us < flow_start_ts[id]) ++received_before_sent;
  }
  check(flow_ends.size() == flow_starts.size(), "flow ends without a start");
  check(received_before_sent == 0,
        std::to_string(received_before_sent) + " message(s) received before they were sent (clocks not aligned?)");
  check(async_begins == async_ends, "async slices that begin and do not end");
  check(categories["comm"] > 0 && paired > 0, "no messages between ranks");
  for (const char* category : {"forward", "backward", "pipeline", "train"})
    check(categories[category] > 0, std::string("no ") + category + " span");
  check(with_iteration > 0 && with_microbatch > 0, "no span carries the iteration and the microbatch");
  std::printf("check_timeline: %d rank(s); spans: forward %d, backward %d, comm %d, pipeline %d, train %d; %d message "
              "flow(s) paired; %d span(s) with the iteration, %d with the microbatch\n",
              static_cast<int>(named.size()), categories["forward"], categories["backward"], categories["comm"],
              categories["pipeline"], categories["train"], paired, with_iteration, with_microbatch);
  return failures == 0 ? 0 : 1;
}
