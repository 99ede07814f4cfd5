// When the flight recorder (comm/trace) is written and who prints the report.
//
// With TANDEM_TRACE_DIR set, a rank writes its ring there when the job fails on it (an exception
// escapes main: a timeout, a disagreement between ranks, a peer's failure, the user's own error;
// or the end-of-program check finds a message never received) and whenever it gets SIGUSR1 (a
// hang without a timeout: `kill -USR1` the job's processes). After a failure, rank 0 waits a
// few seconds for the other ranks' dumps, prints the cross-rank report (comm/trace/analysis.h)
// on stderr and writes it beside the dumps; the other ranks wait for that report before the job
// is torn down, so that MPI_Abort does not cut it short.
#pragma once

#include <mpi.h>

#include <string>

namespace tandem::comm_detail {

// Once MPI is up (ensure_mpi): the ranks agree on the job's name for the dump files, and SIGUSR1
// dumps from a helper thread.
void start_flight_dumps(MPI_Comm control, int world_rank, int world_size);
// Writes this rank's dump for a failure (nothing when TANDEM_TRACE_DIR is unset).
void write_failure_dump(const std::string& reason);
// After write_failure_dump: rank 0 collects the dumps and prints the report; the others wait
// for it (each for at most a few seconds).
void await_failure_report();
// With the timeline on (core/timeline.h), at the end of the program (every rank, collective over
// control): the ranks send rank 0 their spans, and rank 0 writes the job's one file.
void write_job_timeline(MPI_Comm control, int world_rank, int world_size);

}  // namespace tandem::comm_detail
