// OpenMP helpers for the CPU kernels. Work below the grain size runs on the calling thread:
// waking a team costs microseconds, more than a small kernel takes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tandem {
namespace cpu {

// Elements per thread below which parallelising element-wise work does not pay, where waking a
// team costs a few microseconds.
constexpr std::int64_t kElementwiseGrain = 32768;

// How many times larger every grain is on this machine (1, 2, 4, ... 64): the cost of waking the
// team (an empty parallel region's median time, parallel.cc) over the few microseconds the grains
// were chosen for. Under OMP_WAIT_POLICY=PASSIVE a region wakes sleeping threads, which on virtual
// machines can cost more than splitting an LSTM cell or a 100 x 1000 activation saves
// (docs/performance.md, "Threads"). Measured once per machine and thread count and kept with the
// kernel choices (core/cpu/measured_choice.h), so that reruns split work, and round reductions,
// alike. TANDEM_GRAIN_SCALE=n (a power of two up to 64) sets it.
std::int64_t grain_scale();

// The most chunks parallel_chunks may make: the thread count, or 1 inside a parallel region.
inline int max_chunks() {
#ifdef _OPENMP
  return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
  return 1;
#endif
}

// Makes the library calls of this thread serial while it lives (OpenMP's thread count for this
// thread: oneDNN and Eigen read it at each call). A kernel that splits its own work over the
// threads holds one in each chunk: a chunk that runs on the calling thread (one chunk: too little
// work, or one task) would otherwise let a library split a product over the threads, and a
// library that splits k sums in another order at each thread count.
class SerialLibraryCalls {
 public:
  SerialLibraryCalls() {
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
  }
  ~SerialLibraryCalls() {
#ifdef _OPENMP
    omp_set_num_threads(before_);
#endif
  }
  SerialLibraryCalls(const SerialLibraryCalls&) = delete;
  SerialLibraryCalls& operator=(const SerialLibraryCalls&) = delete;

 private:
#ifdef _OPENMP
  int before_ = omp_get_max_threads();
#endif
};

// Calls body(begin, end, chunk) over [0, n) split into contiguous chunks, one per thread, each
// with its own chunk index in [0, max_chunks()), when n * cost_per_item is at least `grain`;
// otherwise body(0, n, 0) on this thread. An exception thrown by a chunk is rethrown on the
// calling thread (letting it leave an OpenMP region would terminate the program).
template <typename Body>
void parallel_chunks(std::int64_t n, std::int64_t cost_per_item, std::int64_t grain, const Body& body) {
  if (n <= 0) return;
#ifdef _OPENMP
  if (n > 1 && n * cost_per_item >= 2 * grain && max_chunks() > 1 && n * cost_per_item >= 2 * grain * grain_scale()) {
    const int threads = static_cast<int>(std::min<std::int64_t>(max_chunks(), n));
    std::exception_ptr error;
#pragma omp parallel num_threads(threads)
    {
      const std::int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const std::int64_t begin = n * t / nt, end = n * (t + 1) / nt;
      try {
        if (begin < end) body(begin, end, static_cast<int>(t));
      } catch (...) {
#pragma omp critical(tandem_parallel_for_error)
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    return;
  }
#endif
  body(std::int64_t(0), n, 0);
}

// parallel_chunks for a body(begin, end) that does not need its chunk index.
template <typename Body>
void parallel_for(std::int64_t n, std::int64_t cost_per_item, std::int64_t grain, const Body& body) {
  parallel_chunks(n, cost_per_item, grain, [&](std::int64_t begin, std::int64_t end, int) { body(begin, end); });
}

}  // namespace cpu
}  // namespace tandem
