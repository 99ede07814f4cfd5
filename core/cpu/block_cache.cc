#include "core/cpu/block_cache.h"

#include <sys/mman.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"

namespace tandem::cpu {

namespace {
constexpr std::size_t kAlignment = 64;


std::size_t limit_from_environment() {
  const char* text = std::getenv("TANDEM_CPU_CACHE_MB");
  if (!text || !*text) return std::size_t(1024) << 20;
  char* end = nullptr;
  const long long mb = std::strtoll(text, &end, 10);
  TANDEM_CHECK(end && *end == '\0' && mb >= 0, "TANDEM_CPU_CACHE_MB='", text, "' is not a number of megabytes");
  return static_cast<std::size_t>(mb) << 20;
}
}  // namespace

namespace {

// Large blocks come straight from the kernel (mmap) and go back to it (munmap) when the cache
// does not keep them. Through malloc they would not: once a large block has been freed, glibc
// raises its mmap threshold (up to 32 MB) and serves the next ones from its heap, which it rarely
// gives back, so memory a program frees (a ZeRO-3 rank's gathered parameters) stayed resident.
//
// Blocks of 2 MB and more are placed on 2 MB boundaries and asked to be backed by huge pages
// (transparent huge pages, where the kernel's policy is "madvise" or "always"): a fresh 16 MB block
// then costs 8 page faults instead of 4,096. ZeRO-2 and -3 free and re-map their buckets every
// step, and there the faults were a large part of the step (bench id dp.big.train.zero3); products
// and convolutions on large blocks gain a little from fewer TLB misses (docs/performance.md, "Data
// parallelism per ZeRO stage"). TANDEM_CPU_HUGE_PAGES=0 leaves every block on small pages.
//
// Blocks of 768 KB to 1 MB take half a huge page each (rounded up to 1 MB): a 2 MB huge page is
// mapped and its second half kept in the cache for the next such block. Messages of about 1 MB are
// where MPI's shared-memory transport spends most on page walks (UCX maps the peer's pages for
// every rendezvous copy), and a 1 MB allreduce into a block on a huge page runs markedly faster
// than into one on small pages (docs/performance.md, "Communication").
constexpr std::size_t kHugePage = std::size_t(2) << 20;
constexpr std::size_t kHalfHugePage = kHugePage / 2;
constexpr std::size_t kHalfFrom = std::size_t(768) << 10;
static_assert(kHalfHugePage == BlockCache::kMinBytes, "half huge pages are cached as the smallest cached blocks");

bool huge_pages() {
  static const bool on = [] {
    const char* text = std::getenv("TANDEM_CPU_HUGE_PAGES");
    return !(text && std::string(text) == "0");
  }();
  return on;
}

std::size_t round_up(std::size_t nbytes) {
  if (huge_pages() && nbytes >= kHalfFrom && nbytes <= kHalfHugePage) return kHalfHugePage;
  // Small blocks to the cache line; large ones to 64 KB, so that sizes that differ a little
  // (a last, shorter batch) still share blocks.
  const std::size_t unit = nbytes >= BlockCache::kMinBytes ? std::size_t(1) << 16 : kAlignment;
  return (nbytes + unit - 1) / unit * unit;
}

void* map_block(std::size_t nbytes) {
  if (!huge_pages() || nbytes < kHugePage) {
    void* ptr = mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return ptr == MAP_FAILED ? nullptr : ptr;
  }
  // Map a huge page more than needed and give back what lies outside the aligned block, so that
  // the block is exactly [aligned, aligned + nbytes) and munmap(ptr, nbytes) frees it.
  const std::size_t span = nbytes + kHugePage;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(raw, aligned - start);
  const std::uintptr_t end = aligned + nbytes;
  if (start + span > end) munmap(reinterpret_cast<void*>(end), start + span - end);
  void* ptr = reinterpret_cast<void*>(aligned);
  madvise(ptr, nbytes, MADV_HUGEPAGE);  // advice only: where the kernel refuses, small pages serve
  return ptr;
}
void unmap_block(void* ptr, std::size_t nbytes) { munmap(ptr, nbytes); }

// Blocks under kMinBytes come from malloc (and so do MPI's temporary buffers), and glibc's defaults
// gave them fresh pages every step: glibc raises its mmap and trim thresholds only to the size of
// the largest mmapped chunk freed so far, so the heap's free top went back to the kernel (brk)
// whenever more than that lay free there, and the next step faulted it in again. An LSTM's step
// (hundreds of tensors of 64 x 1024 floats) spent a large part of its time in page faults
// (lstm.fixed.train.adam.t1), and MPICH allocates a temporary buffer for every allreduce it runs:
// the 32 buckets of bench/data_parallel_bench (134 MB) were faulted in at every step
// (dp.big.train.*; figures: docs/performance.md, "Costs outside the products" and "Data parallelism
// per ZeRO stage"). So malloc serves blocks up to 32 MB from the heap (the largest mmap threshold
// glibc accepts; tensors of 1 MB and more come from this cache) and keeps as much free at the
// heap's top as this cache may hold (TANDEM_CPU_CACHE_MB, 1024 by default): memory a step frees and
// the next takes again. Nothing changes where the cache is off (TANDEM_CPU_CACHE_MB=0) or the user
// has tuned glibc's malloc already (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or
// GLIBC_TUNABLES).
void tune_malloc(std::size_t keep_bytes) {
#if defined(__GLIBC__)
  if (keep_bytes == 0) return;
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"})
    if (std::getenv(name) != nullptr) return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(std::min<std::size_t>(keep_bytes, INT_MAX)));
#else
  (void)keep_bytes;
#endif
}

// Blocks under kSmallMaxBytes, kept per thread after deallocate and handed out again for a request
// of the same class: glibc takes its slow path for every 64-byte aligned request (aligned_alloc
// splits a chunk, many times the work of taking a block from a list here), and a small collective
// or a differentiable send allocates several such tensors a call (docs/performance.md, "Costs
// outside the products"). Classes: multiples of 64 bytes up to 1 KB, then powers of two up to 64 KB
// (a block of a class always has the class's size, so any block of it serves any request of it). A
// thread keeps at most kSmallThreadBytes; blocks freed on another thread than their own join that
// thread's lists. Off where the cache is (TANDEM_CPU_CACHE_MB=0, as the ASan runs set) and under
// AddressSanitizer, which must see every free to catch a use after it.
constexpr std::size_t kSmallMaxBytes = std::size_t(64) << 10;
constexpr std::size_t kSmallLinearBytes = 1024;  // classes of 64 bytes up to here
constexpr int kSmallClasses = 16 + 6;            // 64 ... 1024, then 2, 4, ..., 64 KB
constexpr int kSmallPerClass = 8;
constexpr std::size_t kSmallThreadBytes = std::size_t(1) << 20;

// The class of a request of nbytes (at most kSmallMaxBytes), and the size of its blocks.
int small_class(std::size_t nbytes, std::size_t* class_bytes) {
  const std::size_t rounded = std::max<std::size_t>(kAlignment, (nbytes + kAlignment - 1) / kAlignment * kAlignment);
  if (rounded <= kSmallLinearBytes) {
    *class_bytes = rounded;
    return static_cast<int>(rounded / kAlignment) - 1;
  }
  int log2 = 11;  // 2 KB
  while ((std::size_t(1) << log2) < rounded) ++log2;
  *class_bytes = std::size_t(1) << log2;
  return 16 + (log2 - 11);
}

struct SmallBlocks {
  void* blocks[kSmallClasses][kSmallPerClass];
  int count[kSmallClasses] = {};
  std::size_t bytes = 0;

  ~SmallBlocks() {
    for (int c = 0; c < kSmallClasses; ++c)
      for (int i = 0; i < count[c]; ++i) std::free(blocks[c][i]);
  }
};

// This thread's lists: made at its first small block, freed at its exit (after which its frees
// go straight to free: the pointer, trivially destructible, reads null).
thread_local SmallBlocks* t_small_blocks = nullptr;
struct SmallBlocksOwner {
  ~SmallBlocksOwner() {
    delete t_small_blocks;
    t_small_blocks = nullptr;
  }
};

SmallBlocks* small_blocks() {
  if (t_small_blocks) return t_small_blocks;
  thread_local SmallBlocksOwner owner;  // constructed here, once: destroyed at the thread's exit
  (void)owner;
  t_small_blocks = new SmallBlocks;
  return t_small_blocks;
}

}  // namespace

struct BlockCache::Impl {
  mutable std::mutex mutex;
  std::multimap<std::size_t, void*> free_blocks;  // rounded size -> block
  std::size_t cached = 0;
  std::size_t limit = limit_from_environment();
  // Blocks of at least kMinBytes handed out and not freed, now and at most; what live and cached
  // blocks may hold together (at least peak_live; see the header); the sizes given back to the
  // kernel and not asked for again since, with their counts.
  std::size_t live = 0, peak_live = 0, allowance = 0, mapped = 0;
  bool capped = false;  // cap_limit lowered the limit
#if defined(__SANITIZE_ADDRESS__)
  const bool small_cache = false;
#else
  const bool small_cache = limit > 0;  // the threads' lists of small blocks (see SmallBlocks)
#endif
  std::map<std::size_t, std::size_t> evicted;
  // Blocks handed out for a smaller size than their own (see allocate), with their own size.
  std::unordered_map<void*, std::size_t> larger;

  // Takes the largest cached blocks out until `cached` is at most `keep` (the caller unmaps them).
  void evict_to(std::size_t keep, std::vector<std::pair<void*, std::size_t>>& out) {
    while (cached > keep && !free_blocks.empty()) {
      auto last = std::prev(free_blocks.end());
      out.emplace_back(last->second, last->first);
      ++evicted[last->first];
      cached -= last->first;
      free_blocks.erase(last);
    }
  }

  // A block of `size` is missing: cached blocks beyond the allowance go back to the kernel. A size
  // that was given back and is asked for again shows a loop that needs more than its live peak
  // (two blocks of 4 MB at one point of a step, one of 8 MB at another): the allowance grows by
  // it, so that the next rounds find it cached instead of giving back and faulting in every step.
  void grow_allowance(std::size_t size) {
    auto again = evicted.find(size);
    if (again != evicted.end()) {
      allowance += size;
      if (--again->second == 0) evicted.erase(again);
    }
  }
};

BlockCache::BlockCache() : impl_(new Impl) { tune_malloc(impl_->limit); }

BlockCache& BlockCache::instance() {
  static BlockCache* cache = new BlockCache;  // outlives every tensor
  return *cache;
}

void* BlockCache::allocate(std::size_t nbytes) {
  if (nbytes <= kSmallMaxBytes) {
    std::size_t class_bytes = 0;
    const int c = small_class(nbytes, &class_bytes);
    if (impl_->small_cache) {
      SmallBlocks* mine = small_blocks();
      if (mine->count[c] > 0) {
        mine->bytes -= class_bytes;
        return mine->blocks[c][--mine->count[c]];
      }
    }
    void* ptr = std::aligned_alloc(kAlignment, class_bytes);
    TANDEM_CHECK(ptr != nullptr, "allocate: out of memory allocating ", nbytes, " bytes on cpu");
    return ptr;
  }
  const std::size_t rounded = round_up(nbytes);
  if (rounded < kMinBytes) {
    void* ptr = std::aligned_alloc(kAlignment, rounded);
    TANDEM_CHECK(ptr != nullptr, "allocate: out of memory allocating ", nbytes, " bytes on cpu");
    return ptr;
  }
  std::vector<std::pair<void*, std::size_t>> evicted;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    auto it = impl_->free_blocks.find(rounded);
    if (it != impl_->free_blocks.end()) {
      void* block = it->second;
      impl_->free_blocks.erase(it);
      impl_->cached -= rounded;
      impl_->live += rounded;
      impl_->peak_live = std::max(impl_->peak_live, impl_->live);
      return block;
    }
    // Else the smallest cached block of up to twice the size: a size a step needs at one point
    // then serves another at the next (a CNN's 6 MB activations from its 12 MB ones) rather than
    // both being kept. Not under a cap (cap_limit): ZeRO sizes it to its own blocks, which a
    // smaller request would then take from the size they are kept for (zero 3's peak: 474 ->
    // 505 MB a rank in bench/data_parallel_bench).
    auto larger = impl_->free_blocks.upper_bound(rounded);
    if (!impl_->capped && larger != impl_->free_blocks.end() && larger->first <= 2 * rounded) {
      void* block = larger->second;
      const std::size_t size = larger->first;
      impl_->free_blocks.erase(larger);
      impl_->cached -= size;
      impl_->larger.emplace(block, size);
      impl_->live += size;
      impl_->peak_live = std::max(impl_->peak_live, impl_->live);
      return block;
    }
    impl_->grow_allowance(rounded);
    impl_->live += rounded;
    impl_->peak_live = std::max(impl_->peak_live, impl_->live);
    impl_->allowance = std::max(impl_->allowance, impl_->peak_live);
    ++impl_->mapped;
    impl_->evict_to(impl_->allowance - impl_->live, evicted);
  }
  for (const auto& [block, size] : evicted) unmap_block(block, size);
  // Half a huge page: map a whole one, and cache its second half (or give it back when the
  // cache has no room).
  const std::size_t mapped = rounded == kHalfHugePage && huge_pages() ? kHugePage : rounded;
  void* ptr = map_block(mapped);  // page-aligned
  if (!ptr) {
    clear();  // memory is short: give the cache back and try once more
    ptr = map_block(mapped);
  }
  if (!ptr) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->live -= rounded;
  }
  TANDEM_CHECK(ptr != nullptr, "allocate: out of memory allocating ", nbytes, " bytes on cpu");
  if (mapped != rounded) {
    void* second = static_cast<char*>(ptr) + kHalfHugePage;
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->cached + kHalfHugePage <= impl_->limit) {
      impl_->free_blocks.emplace(kHalfHugePage, second);
      impl_->cached += kHalfHugePage;
    } else {
      unmap_block(second, kHalfHugePage);
    }
  }
  return ptr;
}

void BlockCache::deallocate(void* ptr, std::size_t nbytes) {
  if (!ptr) return;
  if (nbytes <= kSmallMaxBytes) {
    std::size_t class_bytes = 0;
    const int c = small_class(nbytes, &class_bytes);
    SmallBlocks* mine = impl_->small_cache ? t_small_blocks : nullptr;  // (a thread that never allocated one: free)
    if (mine && mine->count[c] < kSmallPerClass && mine->bytes + class_bytes <= kSmallThreadBytes) {
      mine->blocks[c][mine->count[c]++] = ptr;
      mine->bytes += class_bytes;
      return;
    }
    std::free(ptr);
    return;
  }
  std::size_t rounded = round_up(nbytes);
  if (rounded >= kMinBytes) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    auto larger = impl_->larger.find(ptr);
    if (larger != impl_->larger.end()) {
      rounded = larger->second;
      impl_->larger.erase(larger);
    }
    impl_->live -= rounded;
    if (impl_->cached + rounded <= impl_->limit) {
      impl_->free_blocks.emplace(rounded, ptr);
      impl_->cached += rounded;
      return;
    }
    unmap_block(ptr, rounded);
    return;
  }
  std::free(ptr);
}

void BlockCache::clear() {
  if (SmallBlocks* mine = t_small_blocks) {  // this thread's small blocks (the others' stay theirs)
    for (int c = 0; c < kSmallClasses; ++c) {
      for (int i = 0; i < mine->count[c]; ++i) std::free(mine->blocks[c][i]);
      mine->count[c] = 0;
    }
    mine->bytes = 0;
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (auto& entry : impl_->free_blocks) unmap_block(entry.second, entry.first);
  impl_->free_blocks.clear();
  impl_->cached = 0;
}

void BlockCache::cap_limit(std::size_t bytes) {
  const char* text = std::getenv("TANDEM_CPU_CACHE_MB");
  if (text && *text) return;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (bytes >= impl_->limit) return;
  impl_->limit = bytes;
  impl_->capped = true;
  // The largest blocks go first until the rest fits.
  std::vector<std::pair<void*, std::size_t>> evicted;
  impl_->evict_to(impl_->limit, evicted);
  for (const auto& [block, size] : evicted) unmap_block(block, size);
}

std::size_t BlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->cached;
}

BlockCache::Stats BlockCache::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return Stats{impl_->cached, impl_->live, impl_->peak_live, impl_->mapped};
}

}  // namespace tandem::cpu
