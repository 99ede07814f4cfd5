// How many threads core's CPU kernels use (OpenMP). By default OpenMP takes every core, which
// is right for one process per machine; several ranks of an MPI job on one machine must share
// the cores instead, or their threads contend and every step slows down several times (see
// create_communicator, which divides the cores among the ranks of a host).
#pragma once

namespace tandem {

int max_threads();            // threads a parallel kernel may use
void set_max_threads(int n);  // n >= 1
int available_cores();        // processors this process may run on

}  // namespace tandem
