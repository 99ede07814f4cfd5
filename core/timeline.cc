#include "core/timeline.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

namespace tandem::timeline {

using nlohmann::json;

namespace {

std::mutex g_mutex;
std::vector<Span>& g_spans = *new std::vector<Span>();  // never destroyed: written at exit
std::atomic<int> g_next_thread{0};
thread_local int t_thread = -1;
thread_local std::int64_t t_stage = -1, t_microbatch = -1;
std::atomic<std::int64_t> g_iteration{-1};
std::atomic<bool> g_write_at_exit{true};

void write_at_exit() {
  if (!g_write_at_exit || !enabled() || output_path().empty()) return;
  const json doc = chrome_trace({spans()}, {"process"});
  std::ofstream out(output_path());
  out << doc.dump() << "\n";
  if (!out) std::fprintf(stderr, "tandem: could not write the timeline to %s\n", output_path().c_str());
}

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> flag = [] {
    const char* path = std::getenv("TANDEM_TIMELINE");
    const bool on = path && *path;
    if (on) std::atexit(write_at_exit);
    return on;
  }();
  return flag;
}

}  // namespace

bool enabled() { return enabled_flag().load(std::memory_order_relaxed); }
void set_enabled(bool on) { enabled_flag() = on; }

std::string output_path() {
  const char* path = std::getenv("TANDEM_TIMELINE");
  return path ? path : "";
}

std::int64_t now_us() {
  static const std::int64_t skew = [] {
    const char* text = std::getenv("TANDEM_CLOCK_SKEW_US");
    return text && *text ? std::atoll(text) : 0LL;
  }();
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
             .count() +
         skew;
}

int thread_index() {
  if (t_thread < 0) t_thread = g_next_thread++;
  return t_thread;
}

void record(Span span) {
  span.thread = thread_index();
  if (span.iteration < 0) span.iteration = g_iteration.load(std::memory_order_relaxed);
  if (span.stage < 0) {
    span.stage = t_stage;
    span.microbatch = t_microbatch;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_spans.push_back(std::move(span));
}

std::vector<Span> spans() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_spans;
}

void clear() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_spans.clear();
}

void set_iteration(std::int64_t iteration) { g_iteration = iteration; }
std::int64_t iteration() { return g_iteration; }
std::int64_t stage() { return t_stage; }
std::int64_t microbatch() { return t_microbatch; }

StageScope::StageScope(std::int64_t stage, std::int64_t microbatch) : stage_(t_stage), microbatch_(t_microbatch) {
  t_stage = stage;
  t_microbatch = microbatch;
}

StageScope::~StageScope() {
  t_stage = stage_;
  t_microbatch = microbatch_;
}

SpanScope::SpanScope(const char* category, std::string name) : on_(enabled()), category_(category) {
  if (!on_) return;
  name_ = std::move(name);
  begin_us_ = now_us();
}

SpanScope::~SpanScope() {
  if (!on_) return;
  Span span;
  span.name = std::move(name_);
  span.category = category_;
  span.begin_us = begin_us_;
  span.end_us = now_us();
  span.detail = std::move(detail_);
  record(std::move(span));
}

json to_json(const std::vector<Span>& spans) {
  json out = json::array();
  for (const Span& s : spans)
    out.push_back(json::array({s.name, s.category, s.begin_us, s.end_us, s.thread, s.iteration, s.stage, s.microbatch,
                               s.flow_out, s.flow_in, s.detail, s.in_flight}));
  return out;
}

std::vector<Span> from_json(const json& doc) {
  std::vector<Span> out;
  for (const json& a : doc) {
    Span s;
    s.name = a.at(0);
    s.category = a.at(1);
    s.begin_us = a.at(2);
    s.end_us = a.at(3);
    s.thread = a.at(4);
    s.iteration = a.at(5);
    s.stage = a.at(6);
    s.microbatch = a.at(7);
    s.flow_out = a.at(8);
    s.flow_in = a.at(9);
    s.detail = a.at(10);
    s.in_flight = a.at(11);
    out.push_back(std::move(s));
  }
  return out;
}

json chrome_trace(const std::vector<std::vector<Span>>& per_rank, const std::vector<std::string>& rank_names) {
  std::int64_t origin = INT64_MAX;
  for (const auto& spans : per_rank)
    for (const Span& s : spans) origin = std::min(origin, s.begin_us);
  if (origin == INT64_MAX) origin = 0;
  json events = json::array();
  for (std::size_t rank = 0; rank < per_rank.size(); ++rank) {
    const int pid = static_cast<int>(rank);
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", rank_names.at(rank)}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"args", {{"sort_index", pid}}}});
    std::uint64_t async_id = 0;
    for (const Span& s : per_rank[rank]) {
      json args = json::object();
      if (s.iteration >= 0) args["iteration"] = s.iteration;
      if (s.stage >= 0) args["stage"] = s.stage;
      if (s.microbatch >= 0) args["microbatch"] = s.microbatch;
      if (!s.detail.empty()) args["detail"] = s.detail;
      const std::int64_t ts = s.begin_us - origin;
      const std::int64_t dur = std::max<std::int64_t>(s.end_us - s.begin_us, 0);
      if (s.in_flight) {
        // Overlaps the thread's own spans: an async slice (a row of its own in the viewers).
        const std::string id = std::to_string(rank) + ":" + std::to_string(async_id++);
        events.push_back({{"ph", "b"}, {"name", s.name}, {"cat", s.category}, {"id", id}, {"pid", pid},
                          {"tid", s.thread}, {"ts", ts}, {"args", args}});
        events.push_back({{"ph", "e"}, {"name", s.name}, {"cat", s.category}, {"id", id}, {"pid", pid},
                          {"tid", s.thread}, {"ts", ts + dur}});
      } else {
        events.push_back({{"ph", "X"}, {"name", s.name}, {"cat", s.category}, {"pid", pid}, {"tid", s.thread},
                          {"ts", ts}, {"dur", dur}, {"args", args}});
      }
      // A flow starts where the message was posted (bound to the thread's span there) and ends
      // inside the receive's span (a timestamp on a span's edge could bind to the enclosing one).
      if (s.flow_out)
        events.push_back({{"ph", "s"}, {"name", "message"}, {"cat", "flow"}, {"id", s.flow_out}, {"pid", pid},
                          {"tid", s.thread}, {"ts", ts}});
      if (s.flow_in)
        events.push_back({{"ph", "f"}, {"bp", "e"}, {"name", "message"}, {"cat", "flow"}, {"id", s.flow_in},
                          {"pid", pid}, {"tid", s.thread}, {"ts", ts + std::max<std::int64_t>(dur - 1, 0)}});
    }
  }
  return json{{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

void set_write_at_exit(bool write) { g_write_at_exit = write; }

}  // namespace tandem::timeline
