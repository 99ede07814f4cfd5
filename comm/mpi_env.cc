#include "comm/mpi_env.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>
#include <vector>

#include "core/error.h"

namespace tandem::comm_detail {

namespace {

MPI_Comm g_control = MPI_COMM_NULL;
int g_world_rank = 0;
int g_world_size = 1;
bool g_we_initialised = false;
std::terminate_handler g_previous_terminate = nullptr;

// An exception escaping on one rank would leave the others waiting for it forever: print it
// and take the whole job down.
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
  std::fprintf(stderr, "tandem: rank %d of %d failed: %s\ntandem: aborting all ranks (MPI_Abort)\n", g_world_rank,
               g_world_size, what.c_str());
  std::fflush(stderr);
  // mpiexec relays output asynchronously; MPI_Abort tears the job down at once. A moment's
  // grace lets the message above reach the user's terminal.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  if (mpi_active()) MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

// Announces this rank's end to every peer, then waits for every peer's announcement: the
// program's last collective. Runs at the start of MPI_Finalize (an attribute on MPI_COMM_SELF
// is deleted first thing there, whoever calls MPI_Finalize).
int announce_finished(MPI_Comm, int, void*, void*) {
  if (g_control == MPI_COMM_NULL) return MPI_SUCCESS;
  char token = 0;
  std::vector<MPI_Request> requests;
  for (int peer = 0; peer < g_world_size; ++peer) {
    if (peer == g_world_rank) continue;
    requests.emplace_back();
    MPI_Isend(&token, 1, MPI_CHAR, peer, kFinishedTag, g_control, &requests.back());
  }
  std::vector<char> tokens(g_world_size);
  for (int peer = 0; peer < g_world_size; ++peer) {
    if (peer == g_world_rank) continue;
    MPI_Recv(&tokens[peer], 1, MPI_CHAR, peer, kFinishedTag, g_control, MPI_STATUS_IGNORE);
  }
  MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  MPI_Comm_free(&g_control);
  g_control = MPI_COMM_NULL;
  return MPI_SUCCESS;
}

void finalize_at_exit() {
  if (g_we_initialised && mpi_active()) MPI_Finalize();
}

}  // namespace

bool mpi_active() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  TANDEM_FAIL("comm: ", call, " failed on rank ", g_world_rank, ": ", std::string(text, length));
}

void ensure_mpi() {
  if (g_control != MPI_COMM_NULL) return;
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  TANDEM_CHECK(!finalised, "comm: MPI has already been finalised; create communicators before MPI_Finalize");
  if (!initialised) {
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    g_we_initialised = true;
    std::atexit(finalize_at_exit);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world_size);
  // Errors come back as codes (turned into exceptions) instead of aborting inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &g_control), "MPI_Comm_dup");
  int keyval = MPI_KEYVAL_INVALID;
  check_mpi(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, announce_finished, &keyval, nullptr),
            "MPI_Comm_create_keyval");
  check_mpi(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr), "MPI_Comm_set_attr");
  if (!g_previous_terminate) g_previous_terminate = std::set_terminate(abort_job_on_terminate);
}

MPI_Comm control_comm() { return g_control; }
int world_rank() { return g_world_rank; }

double timeout_from_environment() {
  const char* text = std::getenv("TANDEM_COMM_TIMEOUT");
  if (!text || !*text) return 0;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  TANDEM_CHECK(end && *end == '\0' && seconds >= 0, "comm: TANDEM_COMM_TIMEOUT='", text,
               "' is not a number of seconds (0 or unset: no timeout)");
  return seconds;
}

}  // namespace tandem::comm_detail
