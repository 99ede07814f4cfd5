// Writing this process's flight recorder (flight_recorder.h) to TANDEM_TRACE_DIR, and reading
// the dumps of a job back (for analysis.h).
//
// One file per rank, <dir>/tandem-trace-<job>-rank<r>.json, self-describing: the job, rank,
// world size, host, pid, why it was written, the communicators' members and the entries.
// `job` tells one run's dumps from another's in the same folder (the ranks agree on it at
// start: comm/transport's mpi_env).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::trace {

// Who this process is, for its dumps (set by comm/transport once MPI is up).
struct DumpIdentity {
  std::string job;
  int rank = 0;
  int world_size = 1;
};
void set_dump_identity(DumpIdentity identity);
DumpIdentity dump_identity();

// TANDEM_TRACE_DIR, or "" when dumps are off.
std::string trace_dir();
std::string dump_path(const std::string& dir, const std::string& job, int rank);

// This process's ring as JSON.
nlohmann::json dump_json(const std::string& reason);
// Writes it to trace_dir() (atomically: a temporary file renamed), once per process unless
// `again` (SIGUSR1 dumps overwrite). Returns the path, or "" when TANDEM_TRACE_DIR is unset or
// the file cannot be written (a warning on stderr then: a dump must never fail a job twice).
std::string write_dump(const std::string& reason, bool again = false);

// The dumps of `job` in dir (every job's, newest first by default: "" takes the job of the newest
// file). Files that are not tandem dumps are skipped; a malformed dump is an error naming it.
std::vector<nlohmann::json> read_dumps(const std::string& dir, const std::string& job = "");

}  // namespace tandem::trace
