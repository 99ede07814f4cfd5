// Timing a step that several ranks run together: each timed call starts after a barrier, and a
// call's time is the slowest rank's (what the job waits for); the median over the timed calls.
#pragma once

#include <mpi.h>

#include <functional>
#include <vector>

#include "bench/bench_util.h"

namespace tandem {
namespace bench {

inline Stats timed_steps(int warmup, int iters, const std::function<void()>& step) {
  std::vector<double> t;
  for (int i = 0; i < warmup + iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    step();
    if (i >= warmup) t.push_back((MPI_Wtime() - t0) * 1e3);
  }
  std::vector<double> slowest(t.size());
  MPI_Allreduce(t.data(), slowest.data(), static_cast<int>(t.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return summarize(std::move(slowest));
}

}  // namespace bench
}  // namespace tandem
