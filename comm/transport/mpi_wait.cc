// Waiting on peers without hanging: polling with a deadline, and the diagnosis of waits that
// can never end.
//
// A wait polls (spinning briefly, then yielding the core: with more ranks than cores, a
// spinning rank steals the time its peer needs). Every few milliseconds it asks whether the
// peer it waits for can still deliver:
// - The peer announced that it finished (mpi_env.h): it never will.
// - For a point-to-point wait: the peer has entered a collective that this rank has not. A
//   rank inside a collective waits for every peer's header before anything else, so the peer
//   cannot send what this rank waits for until this rank joins the collective.
// - Any peer has failed (an exception escaped its main; mpi_env.h): the job is ending.
// - For a point-to-point receive: the ranks form a cycle, each blocked in a receive from the
//   next, which has not sent it (deadlock.h).
// All are certain, and become errors at once, naming what the peers did (and, for a peer that
// finished or failed, the messages it sent that were never received). Anything else may still
// resolve, so it is only reported when the timeout (TANDEM_COMM_TIMEOUT / set_timeout) expires.
#include <sched.h>

#include <chrono>
#include <optional>
#include <sstream>
#include <thread>

#include "comm/transport/deadlock.h"
#include "comm/transport/mpi_communicator.h"
#include "comm/transport/mpi_env.h"
#include "core/error.h"

namespace tandem {

using comm_detail::check_mpi;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The polling rhythm shared by every wait.
class Poller {
 public:
  explicit Poller(double timeout) : timeout_(timeout) {}

  // Call after each unsuccessful poll. Returns true when it is time to diagnose.
  bool idle() {
    ++polls_;
    if (polls_ > 256) sched_yield();
    if ((polls_ & 31) != 0) return false;
    const auto now = Clock::now();
    if (polls_ == 32) {
      // The clock starts at the 32nd poll, a few microseconds late: most waits end sooner, and
      // a clock read costs about as much as a small message's whole transfer.
      start_ = last_check_ = now;
      return false;
    }
    if (std::chrono::duration<double>(now - last_check_).count() < 0.005) return false;
    last_check_ = now;
    return true;
  }
  double waited() const { return polls_ < 32 ? 0.0 : seconds_since(start_); }
  bool timed_out() const { return timeout_ > 0 && waited() > timeout_; }

 private:
  double timeout_;
  Clock::time_point start_, last_check_;
  long polls_ = 0;
};

}  // namespace

bool MpiCommunicator::try_receive(int source, int tag, std::vector<char>& bytes) {
  int found = 0;
  MPI_Message message;
  MPI_Status status;
  check_mpi(MPI_Improbe(source, tag, comm_, &found, &message, &status), "MPI_Improbe");
  if (!found) return false;
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  bytes.resize(static_cast<std::size_t>(count));
  check_mpi(MPI_Mrecv(bytes.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
  return true;
}

std::vector<char> MpiCommunicator::receive_message_bytes(int source, int tag, const WaitContext& context) {
  std::vector<char> bytes;
  receive_message_bytes(source, tag, context, bytes);
  return bytes;
}

void MpiCommunicator::receive_message_bytes(int source, int tag, const WaitContext& context, std::vector<char>& bytes) {
  Poller poller(timeout_seconds_);
  // A point-to-point receive takes part in the search for cycles of receives, from its first
  // diagnosis on (one that ends sooner costs nothing).
  std::optional<comm_detail::ReceiveWaitScope> receiving;
  for (;;) {
    if (try_receive(source, tag, bytes)) return;
    progress_other_communicators();
    if (poller.idle()) {
      if (!receiving && !context.in_collective) {
        receiving.emplace(comm_detail::ReceiveWait{book_->id(), rank_, source, world_rank_of_[source], tag,
                                                   book_->received(source, tag), context.operation.str()});
      }
      if (poller.timed_out()) fail_timeout(context, poller.waited());
      // The wanted message may be in flight behind the evidence of a deadlock; look once more
      // before concluding.
      int again = 0;
      check_mpi(MPI_Iprobe(source, tag, comm_, &again, MPI_STATUS_IGNORE), "MPI_Iprobe");
      if (!again) {
        WaitContext receiving_context = context;
        if (!context.in_collective) receiving_context.tag = tag;
        diagnose_wait(receiving_context, poller.waited());
      }
    }
  }
}

void MpiCommunicator::wait_all(std::vector<MPI_Request>& requests, const WaitContext& context, KeepAlive keep_alive) {
  wait_all_keeping(requests, context, keep_alive);
}

void MpiCommunicator::wait_all_keeping(std::vector<MPI_Request>& requests, const WaitContext& context,
                                       const KeepAlive& keep_alive) {
  // Sends of small messages have usually completed by the time they are waited for (the peer's
  // message came in meanwhile). MPI_Testall would still run MPI's progress engine, on the critical
  // path of every small collective; asking each request's status does not when it is complete, and
  // MPI_Waitall then only frees them (what each costs: docs/performance.md, "What a small message
  // costs").
  if (all_complete(requests)) {
    check_mpi(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    return;
  }
  Poller poller(timeout_seconds_);
  try {
    for (;;) {
      int done = 0;
      check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
                "MPI_Testall");
      if (done) return;
      progress_other_communicators();
      if (poller.idle()) {
        if (poller.timed_out()) fail_timeout(context, poller.waited());
        diagnose_wait(context, poller.waited());
      }
    }
  } catch (...) {
    orphans_.push_back(Orphan{requests, keep_alive});
    throw;
  }
}

bool MpiCommunicator::all_complete(std::vector<MPI_Request>& requests) {
  for (MPI_Request& request : requests) {
    if (request == MPI_REQUEST_NULL) continue;
    int complete = 0;
    check_mpi(MPI_Request_get_status(request, &complete, MPI_STATUS_IGNORE), "MPI_Request_get_status");
    if (!complete) return false;
  }
  return true;
}

void MpiCommunicator::reap_orphans() {
  reap_pending_sends();
  for (auto it = orphans_.begin(); it != orphans_.end();) {
    int done = 0;
    MPI_Testall(static_cast<int>(it->requests.size()), it->requests.data(), &done, MPI_STATUSES_IGNORE);
    it = done ? orphans_.erase(it) : it + 1;
  }
}

bool MpiCommunicator::peer_finished(int peer) {
  // A finished peer's last messages on this communicator may still be in flight behind its
  // report (which travels on the control communicator): a moment's grace, counted from when
  // the report arrived, before concluding that it left without them. (Counted from the start
  // of the wait, a rank that had waited long already failed one that arrived in the same
  // instant as the report.)
  return comm_detail::seconds_since_finished(world_rank_of_[peer]) >= 0.05;
}

std::string MpiCommunicator::never_received(const comm_detail::TrafficReport& report, int world_peer) const {
  std::vector<std::string> lines = comm_detail::unmatched_messages(report, world_peer);
  if (lines.empty()) return "";
  std::string text = "; messages sent and never received:";
  for (const std::string& line : lines) text += " " + line + ";";
  text.pop_back();
  return text;
}

std::string MpiCommunicator::who(int world_peer) const {
  const int peer = book_->rank_of_world(world_peer);
  return peer >= 0 ? detail::concat("rank ", peer) : detail::concat("world rank ", world_peer);
}

const MpiCommunicator::Header* MpiCommunicator::early_collective_header(int peer) {
  std::vector<char> bytes;
  if (try_receive(peer, kCollectiveTag, bytes)) {
    // Kept for the collective this rank may still call (exchange_headers takes it from here),
    // with the data it may carry.
    comm_detail::DecodedMessage decoded = comm_detail::decode_header(bytes.data(), bytes.size(), peer);
    const bool carries = decoded.header.has_flag(comm_detail::kFlagInlinePayload);
    early_collective_headers_[peer].push_back(
        ArrivedHeader{std::move(decoded.header), carries ? std::move(bytes) : std::vector<char>(), decoded.header_bytes});
  }
  auto early = early_collective_headers_.find(peer);
  return early == early_collective_headers_.end() || early->second.empty() ? nullptr : &early->second.front().header;
}

void MpiCommunicator::diagnose_wait(const WaitContext& context, double waited_seconds) {
  // Checked after what the peers waited for did (a finished peer's evidence names more than
  // another peer's failure caused by it).
  auto check_failed_peers = [&] {
    const int failed = comm_detail::failed_peer();
    if (failed < 0) return;
    const comm_detail::TrafficReport& report = comm_detail::failed_report(failed);
    std::string waited_for;  // what the peer this rank waits for did, when it has finished
    if (context.peer >= 0 && world_rank_of_[context.peer] != failed) {
      const int world_peer = world_rank_of_[context.peer];
      if (const comm_detail::TrafficReport* finished = comm_detail::finished_report(world_peer)) {
        waited_for = detail::concat("; rank ", context.peer, ", which this rank waits for, has finished (reached "
                                    "MPI_Finalize)", never_received(*finished, world_peer));
      }
    }
    TANDEM_FAIL("comm: ", context.operation, " on rank ", rank_, " cannot complete: ", who(failed), " failed: ",
                report.failure, never_received(report, failed), waited_for);
  };
  const std::string cycle = comm_detail::poll_deadlock(waited_seconds);
  if (!cycle.empty()) {
    TANDEM_FAIL("comm: deadlock: ", context.operation, " on rank ", rank_, " can never complete: ", cycle,
                ". Each of these ranks waits for a message that the next has not sent, and none can send while it "
                "waits (a cycle of receives, found without a timeout)");
  }
  if (context.data_phase >= 0) {
    // Every rank passed this collective's header exchange. A peer may well have finished its
    // part and moved on; only one whose next header says it gave this collective up (or that
    // has finished) will never complete it.
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      const Header* next = early_collective_header(peer);
      if (next && next->has_flag(comm_detail::kFlagAbandoned)) {
        TANDEM_FAIL("comm: ", context.operation, " on rank ", rank_, " cannot complete: rank ", peer,
                    " gave it up (its wait failed) and has entered ", next->describe());
      }
      if (peer_finished(peer)) {
        TANDEM_FAIL("comm: ", context.operation, " on rank ", rank_, " cannot complete: rank ", peer,
                    " has finished (reached MPI_Finalize)",
                    never_received(*comm_detail::finished_report(world_rank_of_[peer]), world_rank_of_[peer]));
      }
    }
    check_failed_peers();
    return;
  }
  const int peer = context.peer;
  if (peer_finished(peer)) {
    TANDEM_FAIL("comm: ", context.operation, " on rank ", rank_, " waits for rank ", peer, ", but rank ", peer,
                " has finished (reached MPI_Finalize) without ", context.in_collective ? "entering it" : "sending it",
                "; the ranks' programs do not communicate in matching ways",
                never_received(*comm_detail::finished_report(world_rank_of_[peer]), world_rank_of_[peer]));
  }
  check_failed_peers();
  if (context.in_collective || context.payload) return;
  // Has the peer entered a collective this rank has not?
  if (const Header* entered = early_collective_header(peer)) {
    // What the peer sent before entering it arrives before its collective header (MPICH
    // delivers one sender's messages on a communicator in order), but it may have arrived
    // between this rank's last look and finding the header: look once more.
    if (context.tag >= 0) {
      int arrived = 0;
      check_mpi(MPI_Iprobe(peer, context.tag, comm_, &arrived, MPI_STATUS_IGNORE), "MPI_Iprobe");
      if (arrived) return;
    }
    TANDEM_FAIL("comm: ", context.operation, " on rank ", rank_, " waits for rank ", peer, ", but rank ", peer,
                " has entered ", entered->describe(), ", which rank ", rank_,
                " has not: the ranks call communication operations in different orders (a certain deadlock)");
  }
}

std::string MpiCommunicator::pending_from(int peer) {
  std::ostringstream out;
  int found = 0;
  MPI_Status status;
  MPI_Iprobe(peer, MPI_ANY_TAG, comm_, &found, &status);
  if (found) {
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    if (status.MPI_TAG == kCollectiveTag) {
      out << "; rank " << peer << " has entered a collective (its header is waiting here)";
    } else {
      out << "; a message from rank " << peer << " on tag " << status.MPI_TAG << " (" << count
          << " bytes) is waiting here unreceived";
    }
  } else {
    out << "; nothing from rank " << peer << " is waiting here";
  }
  return out.str();
}

void MpiCommunicator::fail_timeout(const WaitContext& context, double waited_seconds) {
  std::ostringstream why;
  why.precision(3);
  why << "comm: " << context.operation << " on rank " << rank_ << " waited " << waited_seconds << " s for ";
  if (context.peer >= 0) {
    why << "rank " << context.peer;
  } else {
    why << "the other ranks";
  }
  why << " and timed out (TANDEM_COMM_TIMEOUT=" << timeout_seconds_ << ")";
  if (context.peer >= 0) why << pending_from(context.peer);
  TANDEM_FAIL(why.str());
}

}  // namespace tandem
