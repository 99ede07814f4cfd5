// Who this process is in a multi-process job ("rank 1 of 4"), for error messages that must say
// which process they come from. Empty in a single process; the communicator sets it when it is
// created (comm/transport), and the layers above read it (autograd's check_finite).
#pragma once

#include <string>

namespace tandem {

void set_process_label(std::string label);
// " on rank R of N", or "" without a label.
std::string process_where();

// This process's rank as its launcher numbered it (MPICH's PMI_RANK, Open MPI's
// OMPI_COMM_WORLD_RANK), 0 without one: known before any communicator exists.
int launcher_rank();

}  // namespace tandem
