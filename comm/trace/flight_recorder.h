// The communication flight recorder: every process keeps a ring of its last communications
// (default 2,000; TANDEM_TRACE_BUFFER_SIZE, 0 turns it off), as the user wrote them: the
// operation, forward or backward, the peer or root, tag, sequence number, dtype and shape, the
// pipeline stage and microbatch, the user's call site, the state (posted, matched, completed,
// failed) and when each state was reached.
//
// The communicators (comm/transport) record into it. When a job fails (an exception escapes
// main, a wait times out, the ranks disagree, a message is never received) or a rank gets
// SIGUSR1, each rank that can writes its ring as one self-describing JSON file to
// TANDEM_TRACE_DIR (trace_dump.h), and rank 0 prints the cross-rank report of
// comm/trace/analysis.h. Kept cheap enough to leave on: a spin lock and a few stores per entry.
// The pipeline stage and microbatch come from core/timeline.h's StageScope. With the timeline
// on, every entry that ends becomes a span of it (with a flow from each send to its receive).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/call_site.h"
#include "core/shape.h"
#include "core/spin_lock.h"
#include "core/timeline.h"

namespace tandem::trace {

enum class FlightState : std::uint8_t { posted, matched, completed, failed };
const char* state_name(FlightState state);

struct FlightEntry {
  std::int64_t id = -1;        // this process's entry number (increasing)
  std::string op;              // "allreduce", "send", "recv", "bcast_obj", "recv backward", ...
  bool collective = false;
  bool receive = false;        // point to point: this rank receives (else sends)
  bool in_flight = false;      // posted without waiting (isend, a started collective): ends later
  std::string context;         // the label of the scope it was called in ("in backward"), if any
  int comm = -1;               // the communicator's id (the same on its ranks)
  int rank = 0;                // this process's rank in that communicator
  int peer = -1;               // point to point: the other rank; collectives: the root (-1: none)
  int tag = -1;                // point to point only
  std::int64_t sequence = -1;  // point to point: per (peer, tag); collectives: per communicator
  std::string dtype;           // "" when the operation carries no tensor
  Shape shape;                 // (up to 6 extents in place: recording one allocates nothing)
  std::int64_t stage = -1, microbatch = -1;  // inside a pipeline action
  CallSite site;               // the user's call (the outermost CallSiteScope)
  CallSite direct;             // the line that called the communicator (tandem's own, inside a scope)
  FlightState state = FlightState::posted;
  std::int64_t posted_us = 0, matched_us = 0, ended_us = 0;  // wall clock, microseconds since the epoch
  std::string error;           // why it failed
};

// One communicator's members, for the dumps (the ranks' world ranks).
struct CommunicatorInfo {
  int id = -1;
  std::vector<int> world_ranks;
};

class FlightRecorder {
 public:
  static FlightRecorder& instance();
  bool enabled() const { return capacity_ > 0; }
  std::size_t capacity() const { return capacity_; }
  // Clears the ring and sets its size (0: off). For tests; the environment sets it at start.
  void reset(std::size_t capacity);

  // Stamps the entry's id, state (posted), time and pipeline context; returns its id, or -1 when off.
  // shape (when given) replaces entry.shape (saves the caller a copy).
  std::int64_t record(FlightEntry entry, const Shape* shape = nullptr);
  // Moves an entry on (nothing when it has left the ring or id is -1). Completed and failed are final.
  void set_state(std::int64_t id, FlightState state);
  void set_state(std::int64_t id, FlightState state, const std::string& error);
  // Fills in what became known after posting (a receive learns dtype and shape from the header).
  void describe(std::int64_t id, std::int64_t sequence, const std::string& dtype, const std::vector<std::int64_t>& shape);
  void add_communicator(CommunicatorInfo info);
  // The entry ends after the call that posted it (a started collective).
  void mark_in_flight(std::int64_t id);

  std::vector<FlightEntry> entries() const;  // oldest first
  std::vector<CommunicatorInfo> communicators() const;
  std::int64_t dropped() const;  // entries that left the ring

 private:
  FlightRecorder();
  FlightEntry* find(std::int64_t id);

  mutable SpinLock lock_;
  std::size_t capacity_;
  std::vector<FlightEntry> ring_;  // entry #n at n % capacity
  std::int64_t next_id_ = 0;
  std::vector<CommunicatorInfo> communicators_;
};

std::int64_t now_us();

// The timeline's span of an entry that ended, and the flow id that joins a message's send and
// receive (the same on both ranks).
timeline::Span timeline_span(const FlightEntry& entry);
std::uint64_t message_flow_id(int comm, int sender, int receiver, int tag, std::int64_t sequence);

}  // namespace tandem::trace
