#include "comm/transport/mpi_env.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <thread>
#include <vector>

#include "comm/transport/background_progress.h"
#include "comm/transport/deadlock.h"
#include "comm/transport/flight_dumps.h"
#include "comm/transport/traffic_ledger.h"
#include "core/error.h"

namespace tandem::comm_detail {

namespace {

bool g_we_initialised = false;
std::terminate_handler g_previous_terminate = nullptr;

bool g_unmatched_at_end = false;  // the report exchange found unreceived messages
// Peers' reports, kept once received (a wait may take one before MPI_Finalize compares them).
// Never destroyed (read inside MPI_Finalize, which may run from an atexit handler).
std::map<int, TrafficReport>& g_finished = *new std::map<int, TrafficReport>();
std::map<int, TrafficReport>& g_failed = *new std::map<int, TrafficReport>();
// When each finished report was taken here (see seconds_since_finished).
std::map<int, std::chrono::steady_clock::time_point>& g_finished_at =
    *new std::map<int, std::chrono::steady_clock::time_point>();

// Receives a report from `peer` on `tag` into `into` if one has arrived.
bool take_report(int peer, int tag, std::map<int, TrafficReport>& into) {
  if (into.count(peer)) return true;
  int found = 0;
  MPI_Status status;
  if (MPI_Iprobe(peer, tag, control_comm(), &found, &status) != MPI_SUCCESS || !found) return false;
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  std::vector<char> bytes(static_cast<std::size_t>(count));
  MPI_Recv(bytes.data(), count, MPI_BYTE, peer, tag, control_comm(), MPI_STATUS_IGNORE);
  try {
    into[peer] = decode_report(bytes.data(), bytes.size(), peer);
  } catch (const std::exception& e) {
    into[peer].failure = e.what();
  }
  return true;
}

// Sends every peer this rank's report on `tag`; the buffers stay alive until `requests` complete.
void send_reports(int tag, const std::string& failure, std::vector<std::vector<char>>& buffers,
                  std::vector<MPI_Request>& requests) {
  buffers.resize(world_size());
  for (int peer = 0; peer < world_size(); ++peer) {
    if (peer == world_rank()) continue;
    buffers[peer] = encode_report(report_for(peer, failure));
    requests.emplace_back();
    MPI_Isend(buffers[peer].data(), static_cast<int>(buffers[peer].size()), MPI_BYTE, peer, tag, control_comm(),
              &requests.back());
  }
}

void print_lines(const std::string& first, const std::vector<std::string>& lines) {
  std::string text = "tandem: rank " + std::to_string(world_rank()) + " of " + std::to_string(world_size()) + ": " +
                     first + "\n";
  for (const std::string& line : lines) text += "tandem:   " + line + "\n";
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
}

// An exception escaping on one rank would leave the others waiting for it forever: print it,
// tell the peers (with this rank's traffic report), and take the whole job down.
[[noreturn]] void abort_job_on_terminate() {
  std::string what = "unknown exception";
  if (std::exception_ptr current = std::current_exception()) {
    try {
      std::rethrow_exception(current);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
  } else {
    what = "std::terminate called without an exception";
  }
  std::fprintf(stderr, "tandem: rank %d of %d failed: %s\ntandem: aborting all ranks (MPI_Abort)\n", world_rank(),
               world_size(), what.c_str());
  std::fflush(stderr);
  try {
    write_failure_dump(what);
  } catch (...) {
  }
  std::vector<std::vector<char>> buffers;
  std::vector<MPI_Request> requests;
  if (mpi_active() && control_comm() != MPI_COMM_NULL) {
    try {
      send_reports(kFailedTag, what, buffers, requests);
    } catch (...) {
    }
  }
  try {
    await_failure_report();
  } catch (...) {
  }
  // mpiexec relays output asynchronously; MPI_Abort tears the job down at once. A moment's
  // grace lets the message above reach the user's terminal, and the peers print theirs.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  if (mpi_active()) MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

// The program's last collective: sends every peer this rank's traffic report and waits for
// every peer's (or its failure report), then compares them. Runs at the start of MPI_Finalize
// (an attribute on MPI_COMM_SELF is deleted first thing there, whoever calls MPI_Finalize).
int announce_finished(MPI_Comm, int, void*, void*) {
  if (control_comm() == MPI_COMM_NULL) return MPI_SUCCESS;
  std::vector<std::vector<char>> buffers;
  std::vector<MPI_Request> requests;
  send_reports(kFinishedTag, "", buffers, requests);
  std::vector<bool> heard(world_size(), false);
  heard[world_rank()] = true;
  for (int left = world_size() - 1; left > 0;) {
    bool progress = false;
    for (int peer = 0; peer < world_size(); ++peer) {
      if (heard[peer]) continue;
      const bool failed = take_report(peer, kFailedTag, g_failed);
      if (!failed && !take_report(peer, kFinishedTag, g_finished)) continue;
      heard[peer] = true;
      --left;
      progress = true;
      const TrafficReport& report = failed ? g_failed[peer] : g_finished[peer];
      std::vector<std::string> lines;
      try {
        lines = unmatched_messages(report, peer);
      } catch (const std::exception& e) {
        lines.push_back(e.what());
      }
      if (failed) {
        print_lines("rank " + std::to_string(peer) + " failed while this rank was finishing: " + report.failure, lines);
        g_unmatched_at_end = true;
      } else if (!lines.empty()) {
        print_lines("comm: the program ended with messages between ranks " + std::to_string(world_rank()) + " and " +
                        std::to_string(peer) + " that were sent and never received (the ranks' programs do not "
                        "communicate in matching ways):",
                    lines);
        g_unmatched_at_end = true;
      }
    }
    try {
      discard_probes();
    } catch (...) {
    }
    if (!progress) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  if (g_failed.empty()) write_job_timeline(control_comm(), world_rank(), world_size());
  // A message never received fails every rank, not only the two it was between (unless a peer
  // failed: then every rank has heard of it, and that peer is not here to take part).
  if (g_failed.empty()) {
    int any = g_unmatched_at_end ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, control_comm());
    if (any && !g_unmatched_at_end) {
      print_lines("comm: other ranks ended with messages sent and never received (above); failing too", {});
      g_unmatched_at_end = true;
    }
  }
  if (g_unmatched_at_end) {
    try {
      write_failure_dump("the program ended with messages sent and never received, or a peer failed");
      await_failure_report();
    } catch (...) {
    }
  }
  try {
    discard_probes();
  } catch (...) {
  }
  MPI_Comm control = control_comm();
  MPI_Comm_free(&control);
  set_world(MPI_COMM_NULL, world_rank(), world_size());
  if (g_unmatched_at_end && !g_we_initialised) {
    // The program finalises MPI itself: end it once it exits, with a failure status.
    std::atexit([] { std::_Exit(1); });
  }
  return MPI_SUCCESS;
}

// TANDEM_FINALIZE_GRACE (seconds, default 10): how long MPI_Finalize may take (see below).
double finalize_grace_seconds() {
  static const double seconds = [] {
    const char* text = std::getenv("TANDEM_FINALIZE_GRACE");
    return text && *text ? std::atof(text) : 10.0;
  }();
  return seconds;
}

void finalize_at_exit(int status, void*) {
  if (g_we_initialised && mpi_active()) {
    // MPICH 4.0 over UCX's TCP transport (ranks on different hosts) sometimes never returns
    // from MPI_Finalize: one rank waits for a peer to acknowledge the close of their connection
    // while the peer, done with its own closes, waits in the process manager's barrier without
    // progressing UCX (openucx/ucx#8738). Seen here in about half of the runs across simulated
    // hosts. By then the ranks have agreed that every message was received (announce_finished,
    // at the start of MPI_Finalize), so nothing is lost: after a grace period the process ends
    // with the status it was ending with.
    std::mutex mutex;
    std::condition_variable finished;
    bool done = false;
    std::thread watchdog([&] {
      std::unique_lock<std::mutex> lock(mutex);
      if (finished.wait_for(lock, std::chrono::duration<double>(finalize_grace_seconds()), [&] { return done; })) return;
      std::fprintf(stderr, "tandem: rank %d: MPI_Finalize did not return within %g s after every message was "
                   "received (a known hang of MPICH over UCX's TCP transport); ending with status %d\n",
                   world_rank(), finalize_grace_seconds(), g_unmatched_at_end ? 1 : status);
      std::fflush(nullptr);
      std::_Exit(g_unmatched_at_end ? 1 : status);
    });
    MPI_Finalize();
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
    }
    finished.notify_one();
    watchdog.join();
  }
  if (g_unmatched_at_end) {
    std::fflush(nullptr);
    std::_Exit(1);
  }
}

}  // namespace



void ensure_mpi() {
  if (control_comm() != MPI_COMM_NULL) return;
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  TANDEM_CHECK(!finalised, "comm: MPI has already been finalised; create communicators before MPI_Finalize");
  if (!initialised) {
    int provided = 0;
    // FUNNELED unless a helper thread is to move transfers in the background
    // (background_progress.h: TANDEM_MPI_PROGRESS).
    check_mpi(MPI_Init_thread(nullptr, nullptr, mpi_thread_level_from_environment(), &provided), "MPI_Init_thread");
    g_we_initialised = true;
    on_exit(finalize_at_exit, nullptr);  // glibc: like atexit, and it passes the exit status
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Errors come back as codes (turned into exceptions) instead of aborting inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm control = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &control), "MPI_Comm_dup");
  set_world(control, rank, size);
  int keyval = MPI_KEYVAL_INVALID;
  check_mpi(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, announce_finished, &keyval, nullptr),
            "MPI_Comm_create_keyval");
  check_mpi(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr), "MPI_Comm_set_attr");
  if (!g_previous_terminate) g_previous_terminate = std::set_terminate(abort_job_on_terminate);
  start_flight_dumps(control_comm(), world_rank(), world_size());
}



const TrafficReport* finished_report(int world_peer) {
  if (control_comm() == MPI_COMM_NULL) return nullptr;
  if (!take_report(world_peer, kFinishedTag, g_finished)) return nullptr;
  g_finished_at.emplace(world_peer, std::chrono::steady_clock::now());
  return &g_finished[world_peer];
}

double seconds_since_finished(int world_peer) {
  if (!finished_report(world_peer)) return -1;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_finished_at.at(world_peer)).count();
}

int failed_peer() {
  if (!g_failed.empty()) return g_failed.begin()->first;
  if (control_comm() == MPI_COMM_NULL) return -1;
  int found = 0;
  MPI_Status status;
  if (MPI_Iprobe(MPI_ANY_SOURCE, kFailedTag, control_comm(), &found, &status) != MPI_SUCCESS || !found) return -1;
  take_report(status.MPI_SOURCE, kFailedTag, g_failed);
  return status.MPI_SOURCE;
}

const TrafficReport& failed_report(int world_peer) { return g_failed[world_peer]; }


}  // namespace tandem::comm_detail
