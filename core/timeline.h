// The timeline: what every rank did when, as one Chrome-trace / Perfetto JSON file for the whole
// job (TANDEM_TIMELINE=<file>; open it in https://ui.perfetto.dev or chrome://tracing).
//
// While it is on, each process records spans: the forward and backward of every differentiable
// function (autograd), every communication (comm/trace's flight recorder, with a flow arrow from
// each send to its receive), pipeline actions and training iterations. Each span carries the
// iteration, pipeline stage and microbatch it belongs to. At the end of an MPI job the ranks send
// their spans to rank 0, which writes the file (comm/transport); a single process writes it at
// exit. Off (TANDEM_TIMELINE unset): one predictable branch per function, nothing recorded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::timeline {

struct Span {
  std::string name;      // "linear", "backward linear", "send f32[32, 100] to 1"
  std::string category;  // "forward", "backward", "comm", "pipeline", "train"
  std::int64_t begin_us = 0, end_us = 0;  // wall clock, microseconds since the epoch
  int thread = 0;        // this process's thread index (0: the first that recorded)
  std::int64_t iteration = -1, stage = -1, microbatch = -1;
  // Flow arrows between processes: a send's span starts the flow, its receive's span ends it.
  std::uint64_t flow_out = 0, flow_in = 0;
  // A span that overlaps the thread's other work (an isend from posting to completion): written
  // as an async slice, so that the thread's spans still nest.
  bool in_flight = false;
  std::string detail;    // shown as an argument (a call site, a tensor)
};

// Whether spans are recorded: TANDEM_TIMELINE is set (read once), or set_enabled.
bool enabled();
void set_enabled(bool on);
// TANDEM_TIMELINE's file, or "".
std::string output_path();

void record(Span span);
// Spans recorded so far (oldest first), leaving them recorded.
std::vector<Span> spans();
void clear();

// What the spans recorded on this thread belong to.
void set_iteration(std::int64_t iteration);
std::int64_t iteration();
std::int64_t stage();
std::int64_t microbatch();
class StageScope {  // a pipeline action: its stage and microbatch
 public:
  StageScope(std::int64_t stage, std::int64_t microbatch);
  ~StageScope();
  StageScope(const StageScope&) = delete;
  StageScope& operator=(const StageScope&) = delete;

 private:
  std::int64_t stage_, microbatch_;
};

// Records a span from construction to destruction (nothing when the timeline is off).
class SpanScope {
 public:
  SpanScope(const char* category, std::string name);
  ~SpanScope();
  SpanScope(const SpanScope&) = delete;
  SpanScope& operator=(const SpanScope&) = delete;
  void set_detail(std::string detail) { detail_ = std::move(detail); }

 private:
  bool on_;
  const char* category_;
  std::string name_, detail_;
  std::int64_t begin_us_ = 0;
};

// The wall clock in microseconds since the epoch, plus TANDEM_CLOCK_SKEW_US where set (a host
// whose clock is off, for the tests of the alignment across hosts in comm/transport/flight_dumps.cc).
std::int64_t now_us();
int thread_index();

// Spans as JSON (to send between processes) and back.
nlohmann::json to_json(const std::vector<Span>& spans);
std::vector<Span> from_json(const nlohmann::json& doc);

// One Chrome-trace document: a track (pid) per rank named by `rank_names`, a thread track per
// recording thread, complete events ("X") for spans, flow events from each flow_out to the span
// with the same flow_in, times relative to the earliest span.
nlohmann::json chrome_trace(const std::vector<std::vector<Span>>& per_rank, const std::vector<std::string>& rank_names);
// Writes this process's spans to output_path() at exit unless an MPI job takes over (which
// writes every rank's from rank 0): call with false from the job's writer.
void set_write_at_exit(bool write);

}  // namespace tandem::timeline
