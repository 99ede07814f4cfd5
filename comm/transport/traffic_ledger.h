// The process's ledger of point-to-point traffic: for every communicator this rank has belonged
// to, how many messages it sent to and received from each peer on each tag, and the headers of
// the last few it sent.
//
// Three checks stand on it, none of which needs a timeout:
// - At the end of the program (MPI_Finalize), every rank sends each peer its counts (a report),
//   and both sides of a channel compare them: a message sent but never received is an error on
//   both ranks, naming it (operation, dtype, shape, tag, message number). See mpi_env.cc.
// - A rank that fails (an exception escapes main) sends its peers its report with the error, so
//   a peer still running, or already finishing, names what it sent that the failed rank never took.
// - The deadlock probes (deadlock.h) ask whether a rank waiting in a receive has already sent
//   what another rank waits for.
//
// A ledger entry (a book) outlives its communicator: a message sent on a communicator that was
// destroyed before the end is still accounted for. Books are named by an id that the ranks of a
// communicator agree on when it is created (the largest of their next ids), so that a report
// means the same channel on both sides.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/transport/message.h"

namespace tandem::comm_detail {

class TrafficBook {
 public:
  // How many sent headers each channel keeps for the errors (the unreceived messages of a
  // channel are its last ones, since a channel is received in order).
  static constexpr int kRecent = 8;

  TrafficBook(int id, std::vector<int> world_rank_of);
  int id() const { return id_; }
  int size() const { return static_cast<int>(world_rank_of_.size()); }
  int world_rank(int rank) const { return world_rank_of_[rank]; }
  // This communicator's rank of a world rank, or -1 when it is not a member.
  int rank_of_world(int world) const;

  // Numbers the next message to (peer, tag), remembers its header and returns the number.
  std::int64_t record_send(int peer, int tag, const MessageHeader& header);
  // Messages sent to (peer, tag) so far.
  std::int64_t sent(int peer, int tag) const;
  // The number the next message from (peer, tag) must carry: how many have been received.
  std::int64_t& expected(int peer, int tag) { return received_[key(peer, tag)]; }
  std::int64_t received(int peer, int tag) const;

  struct Channel {
    int peer, tag;
    std::int64_t sent = 0, received = 0;
    std::vector<MessageHeader> recent;  // the last sent headers, oldest first
  };
  // Every channel with traffic to or from `peer`.
  std::vector<Channel> channels_with(int peer) const;

 private:
  static std::int64_t key(int peer, int tag) { return static_cast<std::int64_t>(peer) * 65536 + tag; }
  struct Sent {
    std::int64_t count = 0;
    std::array<MessageHeader, kRecent> recent;  // ring: message #n at n % kRecent
  };
  int id_;
  std::vector<int> world_rank_of_;
  std::unordered_map<std::int64_t, Sent> sent_;
  std::unordered_map<std::int64_t, std::int64_t> received_;
};

// The id this rank proposes for its next communicator (the ranks take the largest proposal).
int next_book_id();
// Opens the book of a new communicator with the agreed id. Kept until the end of the program.
std::shared_ptr<TrafficBook> open_book(int id, std::vector<int> world_rank_of);
// The book with this id, or null.
TrafficBook* find_book(int id);

// What one rank tells another about their channels: per communicator and tag, the counts in
// both directions from the reporter's side, and the headers of its last sends to the recipient.
struct TrafficReport {
  struct Channel {
    int book = 0, size = 0, tag = 0;
    int reporter_rank = 0, recipient_rank = 0;  // in that communicator
    std::int64_t sent = 0, received = 0;        // by the reporter: to / from the recipient
    std::vector<MessageHeader> recent;
  };
  std::string failure;  // the reporter's error when it failed, else empty
  std::vector<Channel> channels;
};

// This rank's report for the peer with world rank `world_peer`.
TrafficReport report_for(int world_peer, const std::string& failure = "");
std::vector<char> encode_report(const TrafficReport& report);
// Validates what arrives from another process (malformed bytes are an error naming the source).
TrafficReport decode_report(const char* data, std::size_t size, int world_source);

// Compares a peer's report with this rank's own ledger: one line per message that one side sent
// and the other never received (in both directions), empty when every message was matched.
std::vector<std::string> unmatched_messages(const TrafficReport& from_peer, int world_peer);

}  // namespace tandem::comm_detail
