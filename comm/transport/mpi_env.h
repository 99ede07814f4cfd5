// The MPI process environment that every MPI communicator shares.
//
// ensure_mpi() initialises MPI on first use unless the program already did, installs the
// abort-on-uncaught-exception handler, and creates the control communicator: a private
// duplicate of MPI_COMM_WORLD that carries three kinds of message between the ranks:
// - "finished": when MPI is finalised, each rank sends every peer its traffic report
//   (traffic_ledger.h) and waits for theirs. A rank waiting on a peer checks for it, so a peer
//   that exits while another still waits for it is an error on the waiting rank instead of a
//   hang; and the reports are compared, so a message that one rank sent and the other never
//   received fails the job (exit status 1) with both ranks naming it.
// - "failed": an exception that escapes main sends every peer its report with the error before
//   the job is aborted, so that the peers say what they were doing and what the failed rank
//   never received, instead of being killed without a word.
// - deadlock probes (deadlock.h).
// MPI is finalised at exit when tandem initialised it; when the program initialised MPI
// itself, the report exchange runs inside the program's MPI_Finalize.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

namespace tandem::comm_detail {

struct TrafficReport;

void ensure_mpi();
bool mpi_active();  // initialised and not yet finalised

// The private duplicate of MPI_COMM_WORLD that carries the "finished" announcements.
MPI_Comm control_comm();
int world_rank();
int world_size();
inline constexpr int kFinishedTag = 1;
inline constexpr int kFailedTag = 2;
inline constexpr int kProbeTag = 3;
inline constexpr int kDeadlockTag = 4;  // a cycle found, told to its other ranks
inline constexpr int kClockTag = 5;     // the timeline's clock alignment (flight_dumps.cc)
inline constexpr int kNeverSentTag = 6;  // probed by the background progress helper only

// The report the peer (a world rank) sent when it finished, received now if it has arrived;
// null while it has not finished.
const TrafficReport* finished_report(int world_peer);
// How long ago this rank took that report (-1 while the peer has not finished). What the peer
// sent on other communicators before it finished may arrive after the report (MPI orders
// messages only within one communicator): a wait counts its grace from here.
double seconds_since_finished(int world_peer);
// The first peer (a world rank) whose failure report has arrived, or -1; and its report.
int failed_peer();
const TrafficReport& failed_report(int world_peer);

// Keeps buffers that MPI may still read (a message in flight) alive to the end of the program.
void keep_until_exit(std::vector<std::shared_ptr<const void>> buffers);

// Throws tandem::Error naming the MPI call and the error string unless code is MPI_SUCCESS.
void check_mpi(int code, const char* call);

// TANDEM_COMM_TIMEOUT in seconds (0: none). A malformed value is an error.
double timeout_from_environment();

}  // namespace tandem::comm_detail
