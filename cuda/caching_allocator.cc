#include "cuda/caching_allocator.h"

#include <algorithm>

#include "core/error.h"

namespace tandem {
namespace cuda {

namespace {
constexpr std::size_t kSmallLimit = std::size_t(1) << 20;
constexpr std::size_t kSmallGranule = 512;
constexpr std::size_t kLargeGranule = std::size_t(128) << 10;

std::size_t round_up(std::size_t n, std::size_t granule) { return (n + granule - 1) / granule * granule; }
}  // namespace

CachingAllocator::CachingAllocator(RawMemory& raw, std::string where) : raw_(raw), where_(std::move(where)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

std::size_t CachingAllocator::round_size(std::size_t nbytes) {
  if (nbytes == 0) return 0;
  return nbytes < kSmallLimit ? round_up(nbytes, kSmallGranule) : round_up(nbytes, kLargeGranule);
}

void* CachingAllocator::allocate(std::size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const std::size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);

  // The smallest cached block that fits, unless it would waste more than a quarter of itself
  // (a 64 MiB block must not serve a 1 MiB tensor while the 64 MiB ones wait for the driver).
  auto it = free_blocks_.lower_bound(size);
  if (it != free_blocks_.end() && it->first - size <= it->first / 4) {
    const std::size_t block_size = it->first;
    void* block = it->second;
    free_blocks_.erase(it);
    stats_.cached_bytes -= block_size;
    live_blocks_.emplace(block, block_size);
    stats_.in_use_bytes += block_size;
    stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
    ++stats_.cache_hits;
    return block;
  }

  void* block = raw_.allocate(size);
  if (block == nullptr && !free_blocks_.empty()) {
    // Out of memory while blocks sit in the cache: give them back and try again.
    release_cached_locked();
    block = raw_.allocate(size);
  }
  TANDEM_CHECK(block != nullptr, "allocate: out of memory on ", where_, " for ", nbytes, " bytes (",
               stats_.in_use_bytes, " bytes in use by tensors, cache already released)");
  live_blocks_.emplace(block, size);
  stats_.in_use_bytes += size;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  ++stats_.raw_allocations;
  return block;
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_blocks_.find(ptr);
  TANDEM_CHECK(it != live_blocks_.end(), "deallocate: ", ptr, " was not allocated by the allocator of ", where_,
               " (or was freed twice)");
  const std::size_t size = it->second;
  live_blocks_.erase(it);
  stats_.in_use_bytes -= size;
  free_blocks_.emplace(size, ptr);
  stats_.cached_bytes += size;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::release_cached_locked() {
  // Each block leaves the cache before it is released, so that a release that throws (a CUDA
  // error) cannot leave an already freed block behind to be handed out and freed again.
  while (!free_blocks_.empty()) {
    const auto it = free_blocks_.begin();
    const std::size_t size = it->first;
    void* block = it->second;
    free_blocks_.erase(it);
    stats_.cached_bytes -= size;
    raw_.release(block, size);
  }
}

}  // namespace cuda
}  // namespace tandem
