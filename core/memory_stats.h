// Where a process's host memory is: what the kernel counts (resident set, and its peak), what
// tensors hold (now, and at their peak), and what the allocators keep for reuse without a tensor
// in it (the CPU block cache, tcmalloc's free pages). Resident memory beyond the sum of these is
// the program itself, its libraries, MPI's buffers and objects outside tensors. Benchmarks print
// it beside their figures (docs/performance.md, "Memory outside tensors").
#pragma once

#include <cstdint>
#include <string>

namespace tandem {

struct HostMemoryStats {
  std::int64_t rss = 0;                // VmRSS of /proc/self/status
  std::int64_t peak_rss = 0;           // VmHWM: never goes down
  std::int64_t live_tensors = 0;       // live_storage_bytes(cpu)
  std::int64_t peak_live_tensors = 0;  // peak_live_storage_bytes(cpu): since the last reset
  std::int64_t block_cache = 0;        // freed tensor blocks kept by the CPU block cache
  std::int64_t malloc_heap = 0;        // bytes tcmalloc has from the kernel and not unmapped (0: no tcmalloc)
  std::int64_t malloc_allocated = 0;   // of those, bytes malloc'd now (tensor blocks included)
  std::int64_t malloc_free = 0;        // of those, bytes free in its page heap and caches, still resident
};

HostMemoryStats host_memory_stats();

// "rss_mb=... peak_rss_mb=... live_mb=... peak_live_mb=... cache_mb=... malloc_free_mb=..."
// (MB = 10^6 bytes), for bench lines and logs.
std::string host_memory_fields(const HostMemoryStats& stats);

// Gives what the allocators keep back to the kernel: the block cache's blocks and tcmalloc's free
// pages. For the end of a phase whose buffers will not come back (a ZeRO setup that freed the full
// copies, a model loaded and converted); a training loop would only fault them in again.
void release_cached_host_memory();
// Only tcmalloc's free pages (a loader's temporaries, freed); nothing where malloc is not tcmalloc.
void release_free_malloc_memory();

}  // namespace tandem
