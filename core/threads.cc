#include "core/threads.h"

#include <omp.h>

#include "core/error.h"

namespace tandem {

int max_threads() { return omp_get_max_threads(); }

void set_max_threads(int n) {
  TANDEM_CHECK(n >= 1, "set_max_threads: the thread count must be at least 1, got ", n);
  omp_set_num_threads(n);
}

int available_cores() { return omp_get_num_procs(); }

}  // namespace tandem
