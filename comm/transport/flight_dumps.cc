#include "comm/transport/flight_dumps.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "comm/trace/analysis.h"
#include "comm/trace/trace_dump.h"
#include "comm/transport/mpi_world.h"
#include "core/timeline.h"

namespace tandem::comm_detail {

namespace fs = std::filesystem;

namespace {

int g_signal_pipe[2] = {-1, -1};
bool g_dumped_for_failure = false;

struct sigaction g_previous_usr1 {};

void on_sigusr1(int signal, siginfo_t* info, void* context) {
  const char byte = 1;
  // Only async-signal-safe work here: the helper thread writes the dump.
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &byte, 1);
  // A handler installed before ours (the MPI library's) still runs.
  if (g_previous_usr1.sa_flags & SA_SIGINFO) {
    if (g_previous_usr1.sa_sigaction) g_previous_usr1.sa_sigaction(signal, info, context);
  } else if (g_previous_usr1.sa_handler != SIG_DFL && g_previous_usr1.sa_handler != SIG_IGN) {
    g_previous_usr1.sa_handler(signal);
  }
}

std::string report_path() {
  const trace::DumpIdentity me = trace::dump_identity();
  return (fs::path(trace::trace_dir()) / ("tandem-trace-" + me.job + "-report.txt")).string();
}

}  // namespace

void start_flight_dumps(MPI_Comm control, int world_rank, int world_size) {
  // The job's name: rank 0's process id and start time, the same on every rank.
  long long token[2] = {static_cast<long long>(getpid()),
                        static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(
                                                   std::chrono::system_clock::now().time_since_epoch())
                                                   .count())};
  MPI_Bcast(token, 2, MPI_LONG_LONG, 0, control);
  char job[64];
  std::snprintf(job, sizeof job, "%lld-%lld", token[1], token[0]);
  trace::set_dump_identity({job, world_rank, world_size});
  // The job's timeline is written by rank 0 for every rank (write_job_timeline), not per process.
  if (timeline::enabled()) timeline::set_write_at_exit(false);

  // SIGUSR1 dumps the ring (again each time); a handler already there is called after ours.
  if (pipe(g_signal_pipe) != 0) return;
  std::thread([] {
    char byte;
    while (read(g_signal_pipe[0], &byte, 1) == 1) {
      const std::string path = trace::write_dump("SIGUSR1", true);
      if (!path.empty()) std::fprintf(stderr, "tandem: flight recorder written to %s\n", path.c_str());
      else std::fprintf(stderr, "tandem: SIGUSR1: set TANDEM_TRACE_DIR to write the flight recorder\n");
    }
  }).detach();
  struct sigaction action {};
  action.sa_sigaction = on_sigusr1;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_SIGINFO;
  sigaction(SIGUSR1, &action, &g_previous_usr1);
}

void write_failure_dump(const std::string& reason) {
  if (g_dumped_for_failure) return;
  g_dumped_for_failure = true;
  const std::string path = trace::write_dump(reason);
  if (!path.empty()) std::fprintf(stderr, "tandem: flight recorder written to %s\n", path.c_str());
}

void await_failure_report() {
  const std::string dir = trace::trace_dir();
  if (dir.empty() || !g_dumped_for_failure) return;
  const trace::DumpIdentity me = trace::dump_identity();
  using clock = std::chrono::steady_clock;
  if (me.rank != 0) {
    // Rank 0 prints the report; MPI_Abort from here would cut it short.
    const auto deadline = clock::now() + std::chrono::seconds(5);
    while (clock::now() < deadline && !fs::exists(report_path()))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return;
  }
  const auto deadline = clock::now() + std::chrono::seconds(3);
  for (;;) {
    int present = 0;
    for (int r = 0; r < me.world_size; ++r) present += fs::exists(trace::dump_path(dir, me.job, r)) ? 1 : 0;
    if (present == me.world_size || clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  try {
    const std::string report = trace::analyze(trace::read_dumps(dir, me.job));
    std::string text = "tandem: the ranks' flight recorders (" + dir + "):\n" + report;
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
    std::ofstream(report_path()) << report;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: could not analyse the flight recorders in %s: %s\n", dir.c_str(), e.what());
    std::ofstream(report_path()) << "analysis failed: " << e.what() << "\n";
  }
}

namespace {

// A rank's clock against rank 0's: offset_us = its clock - rank 0's; error_us bounds the error.
struct ClockOffset {
  std::int64_t offset_us = 0, error_us = 0;
};

// Cristian's algorithm over the control communicator: rank 0 asks every rank for its time 8
// times; of the round trips, the shortest gives the offset to within half its duration. Hosts'
// clocks differ (NTP keeps them within about a millisecond, a misconfigured host by anything);
// the processes of one host share theirs. Returned at rank 0 (one per rank), empty elsewhere.
std::vector<ClockOffset> clock_offsets(MPI_Comm control, int world_rank, int world_size) {
  constexpr int kRounds = 8;
  std::vector<ClockOffset> offsets(world_rank == 0 ? world_size : 0);
  for (int r = 1; r < world_size; ++r) {
    if (world_rank == 0) {
      std::int64_t best = -1;
      for (int k = 0; k < kRounds; ++k) {
        std::int64_t theirs = 0;
        const std::int64_t t0 = timeline::now_us();
        MPI_Send(&t0, 1, MPI_INT64_T, r, kClockTag, control);
        MPI_Recv(&theirs, 1, MPI_INT64_T, r, kClockTag, control, MPI_STATUS_IGNORE);
        const std::int64_t t1 = timeline::now_us();
        if (best < 0 || t1 - t0 < best) {
          best = t1 - t0;
          offsets[r] = {theirs - (t0 + t1) / 2, best / 2 + 1};
        }
      }
    } else if (world_rank == r) {
      for (int k = 0; k < kRounds; ++k) {
        std::int64_t now = 0;
        MPI_Recv(&now, 1, MPI_INT64_T, 0, kClockTag, control, MPI_STATUS_IGNORE);
        now = timeline::now_us();
        MPI_Send(&now, 1, MPI_INT64_T, 0, kClockTag, control);
      }
    }
  }
  return offsets;
}

}  // namespace

void write_job_timeline(MPI_Comm control, int world_rank, int world_size) {
  if (!timeline::enabled() || timeline::output_path().empty()) return;
  const std::vector<ClockOffset> clocks = clock_offsets(control, world_rank, world_size);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string mine = nlohmann::json{{"name", "rank " + std::to_string(world_rank) + " (" + host + ", pid " +
                                                       std::to_string(getpid()) + ")"},
                                          {"spans", timeline::to_json(timeline::spans())}}
                               .dump();
  int size = static_cast<int>(mine.size());
  std::vector<int> sizes(world_rank == 0 ? world_size : 0), offsets(sizes.size());
  MPI_Gather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, control);
  std::string all;
  if (world_rank == 0) {
    long long total = 0;
    for (int r = 0; r < world_size; ++r) {
      offsets[r] = static_cast<int>(total);
      total += sizes[r];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_Gatherv(mine.data(), size, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, 0, control);
  if (world_rank != 0) return;
  try {
    std::vector<std::vector<timeline::Span>> per_rank;
    std::vector<std::string> names;
    for (int r = 0; r < world_size; ++r) {
      const auto doc = nlohmann::json::parse(all.substr(offsets[r], sizes[r]));
      std::string name = doc["name"];
      std::vector<timeline::Span> spans = timeline::from_json(doc["spans"]);
      // A clock off by more than the measurement's error: its spans move onto rank 0's clock.
      const ClockOffset& clock = clocks[r];
      if (std::llabs(clock.offset_us) > clock.error_us) {
        for (timeline::Span& span : spans) {
          span.begin_us -= clock.offset_us;
          span.end_us -= clock.offset_us;
        }
        char note[96];
        std::snprintf(note, sizeof note, " [clock %+.3f ms from rank 0's, aligned to within %lld us]",
                      clock.offset_us / 1e3, static_cast<long long>(clock.error_us));
        name += note;
      }
      names.push_back(name);
      per_rank.push_back(std::move(spans));
    }
    std::ofstream out(timeline::output_path());
    out << timeline::chrome_trace(per_rank, names).dump() << "\n";
    if (!out) throw std::runtime_error("cannot write " + timeline::output_path());
    std::fprintf(stderr, "tandem: timeline of %d rank(s) written to %s\n", world_size, timeline::output_path().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: could not write the timeline: %s\n", e.what());
  }
}

}  // namespace tandem::comm_detail
