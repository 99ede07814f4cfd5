#include "comm/transport/flight_dumps.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "comm/trace/analysis.h"
#include "comm/trace/trace_dump.h"
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

void write_job_timeline(MPI_Comm control, int world_rank, int world_size) {
  if (!timeline::enabled() || timeline::output_path().empty()) return;
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
      names.push_back(doc["name"]);
      per_rank.push_back(timeline::from_json(doc["spans"]));
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
