#include "comm/transport/traffic_ledger.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "comm/transport/byte_codec.h"
#include "comm/transport/mpi_world.h"
#include "core/error.h"

namespace tandem::comm_detail {

namespace {

// Never destroyed: the report exchange reads it inside MPI_Finalize, which may run after the
// program's statics are gone (from an atexit handler).
std::vector<std::shared_ptr<TrafficBook>>& books() {
  static auto* all = new std::vector<std::shared_ptr<TrafficBook>>();
  return *all;
}
int g_next_id = 0;

// "rank 1" on the program's first communicator, else with the communicator named.
std::string where(int book, int size) {
  if (book == 0) return "";
  return detail::concat(" on communicator #", book, " (of ", size, " ranks)");
}

}  // namespace

TrafficBook::TrafficBook(int id, std::vector<int> world_rank_of) : id_(id), world_rank_of_(std::move(world_rank_of)) {}

int TrafficBook::rank_of_world(int world) const {
  for (int r = 0; r < size(); ++r)
    if (world_rank_of_[r] == world) return r;
  return -1;
}

std::int64_t TrafficBook::record_send(int peer, int tag, const MessageHeader& header) {
  Sent& channel = sent_[key(peer, tag)];
  const std::int64_t number = channel.count++;
  // Copied into the slot it replaces, whose shape keeps its memory: no allocation per send.
  MessageHeader& slot = channel.recent[static_cast<std::size_t>(number % kRecent)];
  slot = header;
  slot.sequence = number;
  slot.tag = tag;
  return number;
}

std::int64_t TrafficBook::sent(int peer, int tag) const {
  auto it = sent_.find(key(peer, tag));
  return it == sent_.end() ? 0 : it->second.count;
}

std::int64_t TrafficBook::received(int peer, int tag) const {
  auto it = received_.find(key(peer, tag));
  return it == received_.end() ? 0 : it->second;
}

std::vector<TrafficBook::Channel> TrafficBook::channels_with(int peer) const {
  std::map<int, Channel> by_tag;
  for (const auto& [k, s] : sent_) {
    if (k / 65536 != peer || s.count == 0) continue;
    Channel& c = by_tag[static_cast<int>(k % 65536)];
    c.sent = s.count;
    for (std::int64_t n = std::max<std::int64_t>(0, s.count - kRecent); n < s.count; ++n)
      c.recent.push_back(s.recent[static_cast<std::size_t>(n % kRecent)]);
  }
  for (const auto& [k, count] : received_) {
    if (k / 65536 != peer || count == 0) continue;
    by_tag[static_cast<int>(k % 65536)].received = count;
  }
  std::vector<Channel> out;
  for (auto& [tag, c] : by_tag) {
    c.peer = peer;
    c.tag = tag;
    out.push_back(std::move(c));
  }
  return out;
}

int next_book_id() { return g_next_id; }

std::shared_ptr<TrafficBook> open_book(int id, std::vector<int> world_rank_of) {
  g_next_id = std::max(g_next_id, id + 1);
  auto book = std::make_shared<TrafficBook>(id, std::move(world_rank_of));
  books().push_back(book);
  return book;
}

TrafficBook* find_book(int id) {
  for (const auto& book : books())
    if (book->id() == id) return book.get();
  return nullptr;
}

TrafficReport report_for(int world_peer, const std::string& failure) {
  TrafficReport report;
  report.failure = failure;
  for (const auto& book : books()) {
    const int peer = book->rank_of_world(world_peer);
    const int me = book->rank_of_world(world_rank());
    if (peer < 0 || me < 0) continue;
    for (TrafficBook::Channel& c : book->channels_with(peer)) {
      TrafficReport::Channel out;
      out.book = book->id();
      out.size = book->size();
      out.tag = c.tag;
      out.reporter_rank = me;
      out.recipient_rank = peer;
      out.sent = c.sent;
      out.received = c.received;
      out.recent = std::move(c.recent);
      report.channels.push_back(std::move(out));
    }
  }
  return report;
}

std::vector<char> encode_report(const TrafficReport& report) {
  ByteWriter w;
  w.text(report.failure);
  w.i64(static_cast<std::int64_t>(report.channels.size()));
  for (const TrafficReport::Channel& c : report.channels) {
    for (std::int64_t v : {std::int64_t(c.book), std::int64_t(c.size), std::int64_t(c.tag), std::int64_t(c.reporter_rank),
                           std::int64_t(c.recipient_rank), c.sent, c.received})
      w.i64(v);
    w.i64(static_cast<std::int64_t>(c.recent.size()));
    for (const MessageHeader& h : c.recent) w.header(h);
  }
  return w.take();
}

TrafficReport decode_report(const char* data, std::size_t size, int world_source) {
  ByteReader r(data, size, "traffic report", world_source);
  TrafficReport report;
  report.failure = r.text();
  const std::size_t channels = r.length(8 * sizeof(std::int64_t));
  for (std::size_t i = 0; i < channels; ++i) {
    TrafficReport::Channel c;
    c.book = r.i32();
    c.size = r.i32();
    c.tag = r.i32();
    c.reporter_rank = r.i32();
    c.recipient_rank = r.i32();
    c.sent = r.i64();
    c.received = r.i64();
    const std::size_t recent = r.length(sizeof(std::int64_t));
    for (std::size_t k = 0; k < recent; ++k) c.recent.push_back(r.header());
    report.channels.push_back(std::move(c));
  }
  r.expect_end();
  return report;
}

std::vector<std::string> unmatched_messages(const TrafficReport& from_peer, int world_peer) {
  // The peer's view of each (communicator, tag), to set against this rank's.
  std::map<std::pair<int, int>, const TrafficReport::Channel*> theirs;
  for (const TrafficReport::Channel& c : from_peer.channels) theirs[{c.book, c.tag}] = &c;

  std::vector<std::string> lines;
  // Names the messages from `sender` numbered [from, to) of which `recent` holds the last ones.
  auto name = [&](const std::vector<MessageHeader>& recent, std::int64_t from, std::int64_t to, int sender,
                  int receiver, int book, int size) {
    std::int64_t named = 0;
    for (const MessageHeader& h : recent) {
      if (h.sequence < from || h.sequence >= to) continue;
      lines.push_back(detail::concat("rank ", sender, " sent ", h.describe(), " to rank ", receiver, where(book, size),
                                     ", which rank ", receiver, " never received"));
      ++named;
    }
    if (to - from > named) {
      lines.push_back(detail::concat("and ", to - from - named, " earlier message(s) from rank ", sender, " to rank ",
                                     receiver, where(book, size), " (", to - from, " unreceived in all)"));
    }
  };
  for (const auto& book : books()) {
    const int peer = book->rank_of_world(world_peer);
    const int me = book->rank_of_world(world_rank());
    if (peer < 0 || me < 0) continue;
    std::map<int, TrafficBook::Channel> mine;
    for (TrafficBook::Channel& c : book->channels_with(peer)) mine[c.tag] = std::move(c);
    for (const auto& [key, c] : theirs)
      if (key.first == book->id() && !mine.count(key.second)) mine[key.second].tag = key.second;
    for (const auto& [tag, c] : mine) {
      auto it = theirs.find({book->id(), tag});
      const std::int64_t they_received = it == theirs.end() ? 0 : it->second->received;
      const std::int64_t they_sent = it == theirs.end() ? 0 : it->second->sent;
      if (c.sent > they_received) name(c.recent, they_received, c.sent, me, peer, book->id(), book->size());
      if (they_sent > c.received)
        name(it->second->recent, c.received, they_sent, peer, me, book->id(), book->size());
    }
  }
  return lines;
}

}  // namespace tandem::comm_detail
