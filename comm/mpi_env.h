// The MPI process environment that every MPI communicator shares.
//
// ensure_mpi() initialises MPI on first use unless the program already did, installs the
// abort-on-uncaught-exception handler, and creates the control communicator: a private
// duplicate of MPI_COMM_WORLD on which each rank announces, when MPI is finalised, that it
// has finished. A rank waiting on a peer checks for that announcement, so a peer that exits
// while another still waits for it is an error on the waiting rank instead of a hang.
// MPI is finalised at exit when tandem initialised it; when the program initialised MPI
// itself, the announcement runs inside the program's MPI_Finalize.
#pragma once

#include <mpi.h>

#include <string>

namespace tandem::comm_detail {

void ensure_mpi();
bool mpi_active();  // initialised and not yet finalised

// The private duplicate of MPI_COMM_WORLD that carries the "finished" announcements.
MPI_Comm control_comm();
int world_rank();
inline constexpr int kFinishedTag = 1;

// Throws tandem::Error naming the MPI call and the error string unless code is MPI_SUCCESS.
void check_mpi(int code, const char* call);

// TANDEM_COMM_TIMEOUT in seconds (0: none). A malformed value is an error.
double timeout_from_environment();

}  // namespace tandem::comm_detail
