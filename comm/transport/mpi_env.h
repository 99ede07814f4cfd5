// The MPI process environment that every MPI communicator shares.
//
// The world it sets up (the control communicator, ranks, tags) is mpi_world.h's; the parts this
// file builds on (the traffic ledger, the deadlock probes, the flight dumps, background
// progress) read it there.
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

#include "comm/transport/mpi_world.h"

namespace tandem::comm_detail {

struct TrafficReport;

void ensure_mpi();

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

}  // namespace tandem::comm_detail
