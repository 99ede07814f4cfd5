// A cache of large CPU blocks, so that the big buffers a training step or a collective
// allocates every iteration are reused instead of returned to the OS and faulted in again; and
// per thread, a few blocks of each small size (up to 64 KB: 1 MB a thread at most), which glibc's
// aligned allocation serves slowly (block_cache.cc).
//
// glibc serves blocks above its mmap threshold (at most 32 MB) from fresh pages: every first touch
// then costs a page fault, which made receiving a large tensor far slower than the transfer itself
// (docs/performance.md, "Costs outside the products"). Blocks of at least kMinBytes are kept after
// deallocate, keyed by size, up to a total (TANDEM_CPU_CACHE_MB, default 1024; 0 disables the
// cache), and handed out again for the same rounded size. Thread-safe.
//
// The cache holds no more than the program shows it needs: when a size is missing, cached blocks of
// other sizes are given back until the live blocks, the cached ones and the new one fit within an
// allowance, which starts at the most that was ever live at once and grows by a size each time one
// that was given back is asked for again (a loop whose steps need blocks of other sizes at
// different points). Without it, a program whose sizes change between phases (a training loop, then
// inference; SGD, then Adam) kept the first phase's blocks beside the second's, which raised the
// MLP and CNN benchmarks' peak resident sets (bench/peak_memory.sh; docs/performance.md, "Peak
// memory against LibTorch"). A steady loop converges to finding every size cached.
#pragma once

#include <cstddef>

namespace tandem::cpu {

class BlockCache {
 public:
  static constexpr std::size_t kMinBytes = std::size_t(1) << 20;

  static BlockCache& instance();
  // A block of at least nbytes, 64-byte aligned, cached or new; throws on exhaustion.
  void* allocate(std::size_t nbytes);
  void deallocate(void* ptr, std::size_t nbytes);
  // Frees every cached block, of the small ones this thread's (tests; or before handing memory back).
  void clear();
  std::size_t cached_bytes() const;
  struct Stats {
    std::size_t cached = 0;     // bytes waiting in the cache
    std::size_t live = 0;       // bytes in blocks of the cached sizes handed out and not yet freed
    std::size_t peak_live = 0;  // the most `live` has been
    std::size_t mapped = 0;     // blocks mapped from the kernel so far (a miss each)
  };
  Stats stats() const;
  // Lowers the limit to at most `bytes` (freeing what is cached beyond it), unless the user set
  // TANDEM_CPU_CACHE_MB: code that shards memory over ranks (ZeRO) keeps the cache to its
  // working set, since every block the cache keeps stays resident.
  void cap_limit(std::size_t bytes);

 private:
  BlockCache();
  struct Impl;
  Impl* impl_;  // never destroyed: blocks may be freed during static destruction
};

}  // namespace tandem::cpu
