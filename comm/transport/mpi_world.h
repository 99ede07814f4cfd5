// The MPI world every part of the transport shares: the control communicator (a private
// duplicate of MPI_COMM_WORLD), this process's world rank and size, the control tags, and
// small MPI helpers. mpi_env.h sets it up (ensure_mpi) and ends it; the parts built on it (the
// traffic ledger, the deadlock probes, background progress, the flight dumps) read it here, so
// none of them depends on mpi_env, which depends on them.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

namespace tandem::comm_detail {

bool mpi_active();  // initialised and not yet finalised

// The private duplicate of MPI_COMM_WORLD that carries the control messages below
// (MPI_COMM_NULL before ensure_mpi and after the end of the program).
MPI_Comm control_comm();
int world_rank();
int world_size();
// Set by ensure_mpi (mpi_env.h), and again when the control communicator is freed.
void set_world(MPI_Comm control, int rank, int size);

// The control communicator's tags.
inline constexpr int kFinishedTag = 1;
inline constexpr int kFailedTag = 2;
inline constexpr int kProbeTag = 3;
inline constexpr int kDeadlockTag = 4;  // a cycle found, told to its other ranks
inline constexpr int kClockTag = 5;     // the timeline's clock alignment (flight_dumps.cc)
inline constexpr int kNeverSentTag = 6;  // probed by the background progress helper only

// Keeps buffers that MPI may still read (a message in flight) alive to the end of the program.
void keep_until_exit(std::vector<std::shared_ptr<const void>> buffers);

// Throws tandem::Error naming the MPI call and the error string unless code is MPI_SUCCESS.
void check_mpi(int code, const char* call);

// TANDEM_COMM_TIMEOUT in seconds (0: none). A malformed value is an error.
double timeout_from_environment();

}  // namespace tandem::comm_detail
