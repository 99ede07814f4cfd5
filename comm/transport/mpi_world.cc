#include "comm/transport/mpi_world.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace tandem::comm_detail {

namespace {
MPI_Comm g_control = MPI_COMM_NULL;
int g_world_rank = 0;
int g_world_size = 1;
}  // namespace

MPI_Comm control_comm() { return g_control; }
int world_rank() { return g_world_rank; }
int world_size() { return g_world_size; }

void set_world(MPI_Comm control, int rank, int size) {
  g_control = control;
  g_world_rank = rank;
  g_world_size = size;
}

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
  TANDEM_FAIL("comm: ", call, " failed on rank ", world_rank(), ": ", std::string(text, length));
}

void keep_until_exit(std::vector<std::shared_ptr<const void>> buffers) {
  static auto* kept = new std::vector<std::shared_ptr<const void>>();  // never destroyed
  for (auto& buffer : buffers)
    if (buffer) kept->push_back(std::move(buffer));
}

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
