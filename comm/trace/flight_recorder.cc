#include "comm/trace/flight_recorder.h"

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/error.h"
#include "core/hash.h"
#include "core/timeline.h"

namespace tandem::trace {

namespace {

std::size_t capacity_from_environment() {
  const char* text = std::getenv("TANDEM_TRACE_BUFFER_SIZE");
  if (!text || !*text) return 2000;
  char* end = nullptr;
  const long long n = std::strtoll(text, &end, 10);
  TANDEM_CHECK(end && *end == '\0' && n >= 0 && n <= (1 << 24), "TANDEM_TRACE_BUFFER_SIZE must be an entry count in [0, ",
               1 << 24, "], got '", text, "'");
  return static_cast<std::size_t>(n);
}

}  // namespace

const char* state_name(FlightState state) {
  switch (state) {
    case FlightState::posted: return "posted";
    case FlightState::matched: return "matched";
    case FlightState::completed: return "completed";
    case FlightState::failed: return "failed";
  }
  return "?";
}

// The timeline's clock: the recorder's entries become the timeline's communication spans, on one
// clock with the rest (TANDEM_CLOCK_SKEW_US included).
std::int64_t now_us() { return timeline::now_us(); }

FlightRecorder& FlightRecorder::instance() {
  static FlightRecorder* recorder = new FlightRecorder();  // never destroyed: dumps run at exit
  return *recorder;
}

FlightRecorder::FlightRecorder() : capacity_(capacity_from_environment()) { ring_.resize(capacity_); }

void FlightRecorder::reset(std::size_t capacity) {
  std::lock_guard<SpinLock> hold(lock_);
  capacity_ = capacity;
  ring_.assign(capacity, FlightEntry{});
  next_id_ = 0;
}

std::int64_t FlightRecorder::record(FlightEntry entry, const Shape* shape) {
  if (capacity_ == 0) return -1;
  entry.posted_us = now_us();
  entry.state = FlightState::posted;
  entry.stage = timeline::stage();
  entry.microbatch = timeline::microbatch();
  if (shape) entry.shape = *shape;
  std::lock_guard<SpinLock> hold(lock_);
  entry.id = next_id_++;
  FlightEntry& slot = ring_[static_cast<std::size_t>(entry.id) % capacity_];
  slot = std::move(entry);
  return next_id_ - 1;
}

FlightEntry* FlightRecorder::find(std::int64_t id) {
  if (id < 0 || capacity_ == 0) return nullptr;
  FlightEntry& slot = ring_[static_cast<std::size_t>(id) % capacity_];
  return slot.id == id ? &slot : nullptr;
}

void FlightRecorder::set_state(std::int64_t id, FlightState state) {
  static const std::string no_error;
  set_state(id, state, no_error);
}

void FlightRecorder::set_state(std::int64_t id, FlightState state, const std::string& error) {
  if (id < 0) return;
  const std::int64_t now = now_us();
  std::lock_guard<SpinLock> hold(lock_);
  FlightEntry* entry = find(id);
  if (!entry || entry->state == FlightState::completed || entry->state == FlightState::failed) return;
  entry->state = state;
  if (state == FlightState::matched) entry->matched_us = now;
  else if (state != FlightState::posted) entry->ended_us = now;
  if (!error.empty()) entry->error = error;
  if ((state == FlightState::completed || state == FlightState::failed) && timeline::enabled())
    timeline::record(timeline_span(*entry));
}

std::uint64_t message_flow_id(int comm, int sender, int receiver, int tag, std::int64_t sequence) {
  // The same on both ranks, never 0 (0: no flow).
  const std::uint64_t h = Fnv1a64()
                              .mix(static_cast<std::uint64_t>(comm))
                              .mix(static_cast<std::uint64_t>(sender))
                              .mix(static_cast<std::uint64_t>(receiver))
                              .mix(static_cast<std::uint64_t>(tag))
                              .mix(static_cast<std::uint64_t>(sequence))
                              .digest();
  return h ? h : 1;
}

timeline::Span timeline_span(const FlightEntry& e) {
  timeline::Span span;
  const bool recv = !e.collective && e.receive;
  std::string tensor = e.dtype;
  if (!e.dtype.empty()) {
    tensor += "[";
    for (std::size_t i = 0; i < e.shape.size(); ++i) tensor += (i ? ", " : "") + std::to_string(e.shape[i]);
    tensor += "]";
  }
  span.name = e.op + (tensor.empty() ? "" : " " + tensor);
  if (!e.collective) span.name += (recv ? " from " : " to ") + std::to_string(e.peer);
  if (e.state == FlightState::failed) span.name += " (failed)";
  span.category = "comm";
  span.begin_us = e.posted_us;
  span.end_us = e.ended_us;
  span.stage = e.stage;
  span.microbatch = e.microbatch;
  span.detail = e.site.str();
  span.in_flight = e.in_flight;
  if (!e.collective && e.sequence >= 0) {
    if (recv) span.flow_in = message_flow_id(e.comm, e.peer, e.rank, e.tag, e.sequence);
    else span.flow_out = message_flow_id(e.comm, e.rank, e.peer, e.tag, e.sequence);
  }
  return span;
}

void FlightRecorder::describe(std::int64_t id, std::int64_t sequence, const std::string& dtype,
                              const std::vector<std::int64_t>& shape) {
  if (id < 0) return;
  std::lock_guard<SpinLock> hold(lock_);
  if (FlightEntry* entry = find(id)) {
    entry->sequence = sequence;
    entry->dtype = dtype;
    entry->shape = shape;
  }
}

void FlightRecorder::mark_in_flight(std::int64_t id) {
  std::lock_guard<SpinLock> hold(lock_);
  if (FlightEntry* entry = find(id)) entry->in_flight = true;
}

void FlightRecorder::add_communicator(CommunicatorInfo info) {
  std::lock_guard<SpinLock> hold(lock_);
  for (CommunicatorInfo& known : communicators_) {
    if (known.id == info.id) {
      known = std::move(info);
      return;
    }
  }
  communicators_.push_back(std::move(info));
}

std::vector<FlightEntry> FlightRecorder::entries() const {
  std::lock_guard<SpinLock> hold(lock_);
  std::vector<FlightEntry> out;
  if (capacity_ == 0) return out;
  const std::int64_t first = next_id_ > static_cast<std::int64_t>(capacity_) ? next_id_ - capacity_ : 0;
  for (std::int64_t id = first; id < next_id_; ++id) out.push_back(ring_[static_cast<std::size_t>(id) % capacity_]);
  return out;
}

std::vector<CommunicatorInfo> FlightRecorder::communicators() const {
  std::lock_guard<SpinLock> hold(lock_);
  return communicators_;
}

std::int64_t FlightRecorder::dropped() const {
  std::lock_guard<SpinLock> hold(lock_);
  return capacity_ > 0 && next_id_ > static_cast<std::int64_t>(capacity_) ? next_id_ - capacity_ : 0;
}

}  // namespace tandem::trace
