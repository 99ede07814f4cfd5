#include "comm/transport/deadlock.h"

#include <mpi.h>

#include <optional>
#include <vector>

#include "comm/transport/byte_codec.h"
#include "comm/transport/mpi_world.h"
#include "comm/transport/traffic_ledger.h"
#include "core/error.h"

namespace tandem::comm_detail {

namespace {

// The receive this rank is blocked in, if any, and a number that tells its waits apart.
std::optional<ReceiveWait> g_wait;
std::int64_t g_wait_id = 0;
double g_last_probe = -1;  // when this wait last sent its probe (seconds into the wait)

constexpr double kFirstProbe = 0.1;  // seconds: a receive that ends sooner costs nothing
constexpr double kProbeEvery = 1.0;

struct Hop {
  int world = 0;             // the waiting rank
  std::int64_t wait_id = 0;  // which of its waits
  ReceiveWait wait;
};

// A probe, and also the notice that a cycle was found (the same hops, on kDeadlockTag).
struct Probe {
  std::vector<Hop> hops;  // the starter's wait first
};

std::vector<char> encode(const Probe& probe) {
  ByteWriter w;
  w.i64(static_cast<std::int64_t>(probe.hops.size()));
  for (const Hop& hop : probe.hops) {
    for (std::int64_t v : {std::int64_t(hop.world), hop.wait_id, std::int64_t(hop.wait.book), std::int64_t(hop.wait.rank),
                           std::int64_t(hop.wait.peer), std::int64_t(hop.wait.world_peer), std::int64_t(hop.wait.tag),
                           hop.wait.sequence})
      w.i64(v);
    w.text(hop.wait.operation);
  }
  return w.take();
}

Probe decode(const std::vector<char>& bytes, int source) {
  ByteReader r(bytes.data(), bytes.size(), "deadlock probe", source);
  Probe probe;
  const std::size_t hops = r.length(9 * sizeof(std::int64_t));
  for (std::size_t i = 0; i < hops; ++i) {
    Hop hop;
    hop.world = r.i32();
    hop.wait_id = r.i64();
    hop.wait.book = r.i32();
    hop.wait.rank = r.i32();
    hop.wait.peer = r.i32();
    hop.wait.world_peer = r.i32();
    hop.wait.tag = r.i32();
    hop.wait.sequence = r.i64();
    hop.wait.operation = r.text();
    probe.hops.push_back(std::move(hop));
  }
  r.expect_end();
  TANDEM_CHECK(!probe.hops.empty(), "comm: malformed deadlock probe from rank ", source, ": no wait in it");
  return probe;
}

void send_probe(const Probe& probe, int world_dest, int tag = kProbeTag) {
  // Probes are rare and small: a blocking standard send returns as soon as MPI has buffered it.
  const std::vector<char> bytes = encode(probe);
  check_mpi(MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, world_dest, tag, control_comm()),
            "MPI_Send (deadlock probe)");
}

bool is_current(const Hop& hop) { return hop.world == world_rank() && g_wait && hop.wait_id == g_wait_id; }

// Whether this rank has already sent the message that `hop` waits for from it.
bool has_sent_what(const Hop& hop) {
  const TrafficBook* book = find_book(hop.wait.book);
  if (!book) return false;  // this rank never belonged to that communicator: it cannot have sent
  const int waiter = book->rank_of_world(hop.world);
  return waiter >= 0 && book->sent(waiter, hop.wait.tag) > hop.wait.sequence;
}

std::string describe_cycle(const Probe& probe) {
  bool one_book = true;
  for (const Hop& hop : probe.hops) one_book = one_book && hop.wait.book == probe.hops[0].wait.book;
  std::string text;
  for (const Hop& hop : probe.hops) {
    if (!text.empty()) text += "; ";
    text += detail::concat("rank ", hop.wait.rank);
    if (!one_book) text += detail::concat(" (world rank ", hop.world, ", communicator #", hop.wait.book, ")");
    text += detail::concat(" waits in ", hop.wait.operation, " for message #", hop.wait.sequence);
  }
  return text;
}

// Handles one probe; returns the cycle when it is this rank's own, come back. The other ranks
// of the cycle are told (each may have left its wait before its own probe came round).
std::string handle(Probe probe) {
  const Hop& last = probe.hops.back();
  if (last.wait.world_peer != world_rank() || has_sent_what(last)) return "";  // that wait will end
  if (probe.hops.front().world == world_rank()) {
    if (!is_current(probe.hops.front())) return "";  // from a wait that has ended
    for (std::size_t i = 1; i < probe.hops.size(); ++i) send_probe(probe, probe.hops[i].world, kDeadlockTag);
    return describe_cycle(probe);
  }
  if (!g_wait) return "";  // this rank may still send: the chain ends here
  for (const Hop& hop : probe.hops)
    if (hop.world == world_rank()) return "";  // a cycle that does not lead back to its starter
  probe.hops.push_back(Hop{world_rank(), g_wait_id, *g_wait});
  send_probe(probe, g_wait->world_peer);
  return "";
}

// Receives every message on `tag` that has arrived, passing each to `take`.
template <typename F>
void receive_all(int tag, F&& take) {
  for (;;) {
    int found = 0;
    MPI_Status status;
    check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, tag, control_comm(), &found, &status), "MPI_Iprobe (deadlock probe)");
    if (!found) return;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    std::vector<char> bytes(static_cast<std::size_t>(count));
    check_mpi(MPI_Recv(bytes.data(), count, MPI_BYTE, status.MPI_SOURCE, tag, control_comm(), MPI_STATUS_IGNORE),
              "MPI_Recv (deadlock probe)");
    take(bytes, status.MPI_SOURCE);
  }
}

}  // namespace

ReceiveWaitScope::ReceiveWaitScope(ReceiveWait wait) {
  g_wait = std::move(wait);
  ++g_wait_id;
  g_last_probe = -1;
}

ReceiveWaitScope::~ReceiveWaitScope() { g_wait.reset(); }

std::string poll_deadlock(double waited_seconds) {
  if (control_comm() == MPI_COMM_NULL) return "";
  std::string cycle;
  // A cycle found by another of its ranks, naming this wait.
  receive_all(kDeadlockTag, [&](const std::vector<char>& bytes, int source) {
    const Probe notice = decode(bytes, source);
    for (const Hop& hop : notice.hops)
      if (is_current(hop) && cycle.empty()) cycle = describe_cycle(notice);
  });
  receive_all(kProbeTag, [&](const std::vector<char>& bytes, int source) {
    std::string found = handle(decode(bytes, source));
    if (cycle.empty()) cycle = std::move(found);
  });
  if (!cycle.empty()) return cycle;
  if (g_wait && waited_seconds >= kFirstProbe && (g_last_probe < 0 || waited_seconds - g_last_probe >= kProbeEvery)) {
    g_last_probe = waited_seconds;
    send_probe(Probe{{Hop{world_rank(), g_wait_id, *g_wait}}}, g_wait->world_peer);
  }
  return "";
}

void discard_probes() {
  if (control_comm() == MPI_COMM_NULL) return;
  for (int tag : {kProbeTag, kDeadlockTag}) receive_all(tag, [](const std::vector<char>&, int) {});
}

}  // namespace tandem::comm_detail
