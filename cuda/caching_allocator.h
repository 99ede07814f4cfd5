// A caching allocator: device memory (or pinned host memory) is obtained from the driver once
// and then recycled, so that no operation pays for cudaMalloc/cudaFree (each of which also
// synchronises the device). Freed blocks go into a free list keyed by size; a request takes the
// smallest cached block that fits without wasting more than a quarter of it.
//
// Reuse is safe because every kernel of a device runs on that device's one stream: a block
// freed after a kernel was queued is handed out again only to work queued after it.
//
// The raw memory source is an interface so that the caching logic is tested on the host
// (tests/cuda/caching_allocator_test.cc) with malloc behind it.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace tandem {
namespace cuda {

class RawMemory {
 public:
  virtual ~RawMemory() = default;
  // nullptr when the memory is exhausted (any other failure throws).
  virtual void* allocate(std::size_t nbytes) = 0;
  virtual void release(void* ptr, std::size_t nbytes) = 0;
};

struct AllocatorStats {
  std::size_t in_use_bytes = 0;       // handed out to tensors (rounded sizes)
  std::size_t cached_bytes = 0;       // free, kept for reuse
  std::size_t peak_in_use_bytes = 0;
  std::size_t raw_allocations = 0;    // calls into RawMemory::allocate that succeeded
  std::size_t cache_hits = 0;         // requests served from the cache
};

class CachingAllocator {
 public:
  // `where` names the memory in errors ("cuda:0", "pinned host memory").
  CachingAllocator(RawMemory& raw, std::string where);
  ~CachingAllocator();  // releases the cached blocks; blocks still in use are the caller's leak
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least nbytes (nullptr for 0 bytes). When the raw source is exhausted, the
  // cache is released and the request retried once; after that it throws naming the request,
  // the bytes in use and the device.
  void* allocate(std::size_t nbytes);
  // Returns a block from allocate() to the cache. Unknown pointers throw.
  void deallocate(void* ptr);
  // Hands every cached block back to the raw source.
  void empty_cache();
  AllocatorStats stats() const;

  // Sizes are rounded up so that slightly different requests share blocks: to 512 bytes below
  // 1 MiB, to 128 KiB above (exposed for the tests).
  static std::size_t round_size(std::size_t nbytes);

 private:
  void release_cached_locked();

  RawMemory& raw_;
  std::string where_;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> free_blocks_;       // size -> block
  std::unordered_map<void*, std::size_t> live_blocks_;  // block -> size
  AllocatorStats stats_;
};

}  // namespace cuda
}  // namespace tandem
