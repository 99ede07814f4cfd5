// Finding a cycle of receives without a timeout: edge chasing (Chandy, Misra and Haas) over
// the control communicator (mpi_env.h), checked against the traffic ledger (traffic_ledger.h).
//
// A rank blocked in a point-to-point receive sends nothing and receives nothing else until
// that receive ends, so while it waits its counts of sent messages are frozen. A rank that
// has waited a moment sends a probe to the peer it waits for, describing its wait (the
// communicator, tag and number of the message). A rank that gets a probe
// - checks that it has not sent the message the probe's last rank waits for (else that rank's
//   wait will end, and the probe is dropped);
// - if it is itself blocked in a receive, adds its own wait and passes the probe on to the peer
//   it waits for; otherwise drops it (a rank that computes, sends or is in a collective may
//   still deliver);
// - if it started the probe and is still in the same wait, has found a cycle.
// Why a returned probe proves a deadlock even though each rank was checked at a different
// moment: the starter is still blocked, so its counts are frozen and it has never sent what
// the last rank of the cycle waits for; so that rank is still in the wait it described, its
// counts are frozen, and it has never sent what the rank before it waits for; and so on round
// the cycle back to the starter, which therefore waits forever, as do all the others. A slow
// peer (one computing before its send) never passes a probe on, so it is never reported.
// Each rank of the cycle starts its own probe, so each finds the cycle and raises.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::comm_detail {

// What a rank blocked in a point-to-point receive waits for.
struct ReceiveWait {
  int book = 0;               // the communicator's ledger id
  int rank = 0;               // this rank in that communicator
  int peer = 0;               // the sender, in that communicator
  int world_peer = 0;         // the sender's world rank
  int tag = 0;
  std::int64_t sequence = 0;  // the number of the message waited for
  std::string operation;      // "recv (from rank 1, tag 0)"
};

// Marks this rank as blocked in `wait` for the scope's lifetime.
class ReceiveWaitScope {
 public:
  explicit ReceiveWaitScope(ReceiveWait wait);
  ~ReceiveWaitScope();
  ReceiveWaitScope(const ReceiveWaitScope&) = delete;
  ReceiveWaitScope& operator=(const ReceiveWaitScope&) = delete;
};

// Called now and then by every wait: handles the probes that have arrived, sends this rank's
// own probe when it has been blocked in a receive for a moment (and again every second), and
// returns the description of the cycle when a probe of this wait has come back; else "".
std::string poll_deadlock(double waited_seconds);

// Receives and drops every probe that has arrived (at the end of the program).
void discard_probes();

}  // namespace tandem::comm_detail
