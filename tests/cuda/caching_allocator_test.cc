// The caching logic of cuda/caching_allocator.h on the host: a malloc-backed RawMemory that
// counts its calls and can be told to run out stands in for cudaMalloc/cudaFree.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/caching_allocator.h"

using tandem::cuda::AllocatorStats;
using tandem::cuda::CachingAllocator;
using tandem::cuda::RawMemory;

namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * 1024;

// malloc behind a byte budget: allocate returns nullptr (as the CUDA raw source does for
// cudaErrorMemoryAllocation) when the budget would be exceeded or when told to fail.
class CountingMemory : public RawMemory {
 public:
  explicit CountingMemory(std::size_t budget = std::size_t(-1)) : budget_(budget) {}
  ~CountingMemory() override {
    for (const auto& [ptr, size] : live_) std::free(ptr);
  }

  void* allocate(std::size_t nbytes) override {
    ++allocate_calls;
    if (fail_next > 0) {
      --fail_next;
      return nullptr;
    }
    if (live_bytes + nbytes > budget_) return nullptr;
    void* ptr = std::malloc(nbytes);
    REQUIRE(ptr != nullptr);
    live_.emplace(ptr, nbytes);
    live_bytes += nbytes;
    return ptr;
  }

  void release(void* ptr, std::size_t nbytes) override {
    ++release_calls;
    auto it = live_.find(ptr);
    REQUIRE(it != live_.end());   // only what allocate handed out comes back
    REQUIRE(it->second == nbytes);  // with the size it was allocated with
    live_.erase(it);
    live_bytes -= nbytes;
    std::free(ptr);
  }

  std::size_t outstanding() const { return live_.size(); }

  int allocate_calls = 0;
  int release_calls = 0;
  int fail_next = 0;  // the next N allocate calls return nullptr
  std::size_t live_bytes = 0;

 private:
  std::size_t budget_;
  std::map<void*, std::size_t> live_;
};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const tandem::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("round_size: 512-byte granules below 1 MiB, 128 KiB granules from 1 MiB on") {
  CHECK(CachingAllocator::round_size(0) == 0);
  CHECK(CachingAllocator::round_size(1) == 512);
  CHECK(CachingAllocator::round_size(512) == 512);
  CHECK(CachingAllocator::round_size(513) == 1024);
  CHECK(CachingAllocator::round_size(1000) == 1024);
  CHECK(CachingAllocator::round_size(kMiB - 1) == kMiB);
  CHECK(CachingAllocator::round_size(kMiB) == kMiB);
  CHECK(CachingAllocator::round_size(kMiB + 1) == kMiB + 128 * kKiB);
  CHECK(CachingAllocator::round_size(3 * kMiB - 100) == 3 * kMiB);
  CHECK(CachingAllocator::round_size(64 * kMiB + 128 * kKiB) == 64 * kMiB + 128 * kKiB);
}

TEST_CASE("zero bytes give nullptr without touching the raw source; freeing nullptr is a no-op") {
  CountingMemory raw;
  CachingAllocator alloc(raw, "cuda:0");
  REQUIRE(alloc.allocate(0) == nullptr);
  alloc.deallocate(nullptr);
  REQUIRE(raw.allocate_calls == 0);
  const AllocatorStats s = alloc.stats();
  REQUIRE(s.in_use_bytes == 0);
  REQUIRE(s.raw_allocations == 0);
}

TEST_CASE("a freed block is reused for a request of the same rounded size") {
  CountingMemory raw;
  CachingAllocator alloc(raw, "cuda:0");
  void* a = alloc.allocate(1000);
  REQUIRE(a != nullptr);
  REQUIRE(raw.allocate_calls == 1);
  alloc.deallocate(a);
  REQUIRE(raw.release_calls == 0);  // kept in the cache

  void* b = alloc.allocate(700);  // also 1024 after rounding
  REQUIRE(b == a);
  REQUIRE(raw.allocate_calls == 1);

  void* c = alloc.allocate(1000);  // a is in use: a new block
  REQUIRE(c != a);
  REQUIRE(raw.allocate_calls == 2);

  const AllocatorStats s = alloc.stats();
  REQUIRE(s.raw_allocations == 2);
  REQUIRE(s.cache_hits == 1);
  REQUIRE(s.in_use_bytes == 2048);
  REQUIRE(s.cached_bytes == 0);
  alloc.deallocate(b);
  alloc.deallocate(c);
}

TEST_CASE("the smallest cached block that fits is taken") {
  CountingMemory raw;
  CachingAllocator alloc(raw, "cuda:0");
  void* big = alloc.allocate(4 * kMiB);
  void* mid = alloc.allocate(2 * kMiB + 512 * kKiB);
  void* small = alloc.allocate(2 * kMiB);
  alloc.deallocate(big);
  alloc.deallocate(mid);
  alloc.deallocate(small);
  // 2 MiB + 1 fits in the 2.5 MiB block (waste ~0.5 MiB <= a quarter) and not in the 2 MiB one.
  void* got = alloc.allocate(2 * kMiB + 1);
  REQUIRE(got == mid);
  void* exact = alloc.allocate(2 * kMiB);
  REQUIRE(exact == small);
  REQUIRE(raw.allocate_calls == 3);
  alloc.deallocate(got);
  alloc.deallocate(exact);
}

TEST_CASE("a cached block is not used when it would waste more than a quarter of itself") {
  CountingMemory raw;
  CachingAllocator alloc(raw, "cuda:0");
  void* big = alloc.allocate(64 * kMiB);
  alloc.deallocate(big);

  // 1 MiB from a 64 MiB block would waste 63/64 of it: the driver is asked instead.
  void* one = alloc.allocate(kMiB);
  REQUIRE(one != big);
  REQUIRE(raw.allocate_calls == 2);
  REQUIRE(alloc.stats().cached_bytes == 64 * kMiB);

  // 48 MiB wastes exactly a quarter: allowed.
  void* quarter = alloc.allocate(48 * kMiB);
  REQUIRE(quarter == big);
  REQUIRE(raw.allocate_calls == 2);
  alloc.deallocate(quarter);

  // Just below 48 MiB wastes more than a quarter (sizes here are 128 KiB multiples).
  void* over = alloc.allocate(48 * kMiB - 128 * kKiB);
  REQUIRE(over != big);
  REQUIRE(raw.allocate_calls == 3);

  // The same rule for small blocks: a 2048-byte block serves 1536 bytes but not 1024.
  void* k = alloc.allocate(2048);
  alloc.deallocate(k);
  void* half = alloc.allocate(1024);
  REQUIRE(half != k);
  void* three_quarters = alloc.allocate(1500);  // rounds to 1536
  REQUIRE(three_quarters == k);

  alloc.deallocate(one);
  alloc.deallocate(over);
  alloc.deallocate(half);
  alloc.deallocate(three_quarters);
}

TEST_CASE("stats: in use, cached, peak, raw allocations and cache hits") {
  CountingMemory raw;
  CachingAllocator alloc(raw, "cuda:0");
  void* a = alloc.allocate(100);          // 512
  void* b = alloc.allocate(2 * kMiB);     // 2 MiB
  AllocatorStats s = alloc.stats();
  REQUIRE(s.in_use_bytes == 512 + 2 * kMiB);
  REQUIRE(s.peak_in_use_bytes == 512 + 2 * kMiB);
  REQUIRE(s.cached_bytes == 0);
  REQUIRE(s.raw_allocations == 2);
  REQUIRE(s.cache_hits == 0);

  alloc.deallocate(b);
  s = alloc.stats();
  REQUIRE(s.in_use_bytes == 512);
  REQUIRE(s.cached_bytes == 2 * kMiB);
  REQUIRE(s.peak_in_use_bytes == 512 + 2 * kMiB);  // the peak stays

  void* c = alloc.allocate(2 * kMiB - 1000);  // rounds to 2 MiB: a hit
  REQUIRE(c == b);
  s = alloc.stats();
  REQUIRE(s.cache_hits == 1);
  REQUIRE(s.raw_allocations == 2);
  REQUIRE(s.in_use_bytes == 512 + 2 * kMiB);
  REQUIRE(s.cached_bytes == 0);

  alloc.deallocate(a);
  alloc.deallocate(c);
  s = alloc.stats();
  REQUIRE(s.in_use_bytes == 0);
  REQUIRE(s.cached_bytes == 512 + 2 * kMiB);
  REQUIRE(raw.live_bytes == 512 + 2 * kMiB);

  alloc.empty_cache();
  s = alloc.stats();
  REQUIRE(s.cached_bytes == 0);
  REQUIRE(raw.release_calls == 2);
  REQUIRE(raw.outstanding() == 0);
  // After empty_cache the next request goes to the raw source again.
  void* d = alloc.allocate(100);
  REQUIRE(alloc.stats().raw_allocations == 3);
  alloc.deallocate(d);
}

TEST_CASE("out of memory: the cache is released and the request retried once") {
  CountingMemory raw(/*budget=*/8 * kMiB);
  CachingAllocator alloc(raw, "cuda:0");
  void* a = alloc.allocate(4 * kMiB);
  void* b = alloc.allocate(3 * kMiB);
  alloc.deallocate(a);  // 4 MiB cached, 3 MiB in use, 7 MiB held from the raw source

  // 2 MiB does not fit next to the 7 MiB held, and the 4 MiB block would waste half of itself:
  // the first raw call fails, the cache goes back, the retry succeeds.
  const int calls_before = raw.allocate_calls;
  void* c = alloc.allocate(2 * kMiB);
  REQUIRE(c != nullptr);
  REQUIRE(raw.allocate_calls == calls_before + 2);
  REQUIRE(raw.release_calls == 1);
  const AllocatorStats s = alloc.stats();
  REQUIRE(s.cached_bytes == 0);
  REQUIRE(s.in_use_bytes == 5 * kMiB);
  REQUIRE(raw.live_bytes == 5 * kMiB);
  alloc.deallocate(b);
  alloc.deallocate(c);
}

TEST_CASE("out of memory with an empty cache is not retried") {
  CountingMemory raw;
  CachingAllocator alloc(raw, "cuda:3");
  raw.fail_next = 1;
  const std::string message = error_of([&] { alloc.allocate(1000); });
  REQUIRE(raw.allocate_calls == 1);
  CHECK_THAT(message, Catch::Contains("out of memory"));
  CHECK_THAT(message, Catch::Contains("cuda:3"));
  CHECK_THAT(message, Catch::Contains("1000 bytes"));
}

TEST_CASE("out of memory after the retry: a clear error naming the device, the request and the bytes in use") {
  CountingMemory raw(/*budget=*/4 * kMiB);
  CachingAllocator alloc(raw, "cuda:1");
  void* held = alloc.allocate(3 * kMiB);
  void* cached = alloc.allocate(512 * kKiB);
  alloc.deallocate(cached);

  const std::string message = error_of([&] { alloc.allocate(2 * kMiB); });
  REQUIRE_FALSE(message.empty());
  CHECK_THAT(message, Catch::Contains("allocate"));
  CHECK_THAT(message, Catch::Contains("out of memory"));
  CHECK_THAT(message, Catch::Contains("cuda:1"));
  CHECK_THAT(message, Catch::Contains(std::to_string(2 * kMiB) + " bytes"));
  CHECK_THAT(message, Catch::Contains(std::to_string(3 * kMiB) + " bytes in use"));
  // The cache was released on the way (the retry had it all).
  REQUIRE(alloc.stats().cached_bytes == 0);
  REQUIRE(raw.release_calls == 1);
  // The allocator still works afterwards.
  void* after = alloc.allocate(kMiB);
  REQUIRE(after != nullptr);
  REQUIRE(alloc.stats().in_use_bytes == 4 * kMiB);
  alloc.deallocate(after);
  alloc.deallocate(held);
}

TEST_CASE("freeing twice, or freeing an unknown pointer, is an error naming the memory") {
  CountingMemory raw;
  CachingAllocator alloc(raw, "pinned host memory");
  void* a = alloc.allocate(256);
  alloc.deallocate(a);
  const std::string twice = error_of([&] { alloc.deallocate(a); });
  CHECK_THAT(twice, Catch::Contains("deallocate"));
  CHECK_THAT(twice, Catch::Contains("pinned host memory"));
  CHECK_THAT(twice, Catch::Contains("freed twice"));
  // The block is cached once, not twice.
  REQUIRE(alloc.stats().cached_bytes == 512);

  int local = 0;
  const std::string unknown = error_of([&] { alloc.deallocate(&local); });
  CHECK_THAT(unknown, Catch::Contains("was not allocated by the allocator of pinned host memory"));
  REQUIRE(alloc.stats().cached_bytes == 512);
}

TEST_CASE("the destructor hands the cached blocks back") {
  CountingMemory raw;
  {
    CachingAllocator alloc(raw, "cuda:0");
    void* a = alloc.allocate(1000);
    void* b = alloc.allocate(5 * kMiB);
    alloc.deallocate(a);
    alloc.deallocate(b);
    REQUIRE(raw.outstanding() == 2);
  }
  REQUIRE(raw.release_calls == 2);
  REQUIRE(raw.outstanding() == 0);
}

TEST_CASE("many blocks of mixed sizes: every pointer distinct while live, all recycled") {
  CountingMemory raw;
  CachingAllocator alloc(raw, "cuda:0");
  std::vector<void*> blocks;
  const std::size_t sizes[] = {1, 511, 512, 4000, 100000, kMiB, 3 * kMiB + 5};
  for (int round = 0; round < 3; ++round) {
    for (std::size_t size : sizes) blocks.push_back(alloc.allocate(size));
    std::set<void*> distinct(blocks.begin(), blocks.end());
    REQUIRE(distinct.size() == blocks.size());
    for (void* p : blocks) alloc.deallocate(p);
    blocks.clear();
  }
  // Every round after the first is served from the cache.
  const AllocatorStats s = alloc.stats();
  REQUIRE(s.raw_allocations == std::size(sizes));
  REQUIRE(s.cache_hits == 2 * std::size(sizes));
  REQUIRE(s.in_use_bytes == 0);
}

TEST_CASE("a release that throws leaves no freed block in the cache") {
  // A raw source whose second release fails (cudaFree reporting a sticky error): the blocks
  // released before the failure must be gone from the cache, or they would be handed out and
  // freed again.
  class FailingRelease : public RawMemory {
   public:
    void* allocate(std::size_t nbytes) override { return std::malloc(nbytes); }
    void release(void* ptr, std::size_t) override {
      const bool fail = ++calls == 2;
      if (!fail) freed.insert(reinterpret_cast<std::uintptr_t>(ptr));
      std::free(ptr);  // (gone either way: LeakSanitizer runs these tests too)
      if (fail) throw tandem::Error("cudaFree failed");
    }
    int calls = 0;
    std::set<std::uintptr_t> freed;
  } raw;
  std::vector<void*> blocks;
  {
    CachingAllocator allocator(raw, "test");
    for (int i = 0; i < 3; ++i) blocks.push_back(allocator.allocate(4 * kKiB));
    for (void* block : blocks) allocator.deallocate(block);
    REQUIRE(allocator.stats().cached_bytes == 3 * 4 * kKiB);
    REQUIRE_THROWS_WITH(allocator.empty_cache(), Catch::Contains("cudaFree failed"));
    // One block was freed, one was lost to the failure; only the third may still be cached.
    REQUIRE(allocator.stats().cached_bytes == 4 * kKiB);
    void* again = allocator.allocate(4 * kKiB);
    REQUIRE(raw.freed.count(reinterpret_cast<std::uintptr_t>(again)) == 0);
    allocator.deallocate(again);
  }
  REQUIRE(raw.calls == 3);  // the destructor released the last cached block once
  REQUIRE(raw.freed.size() == 2);
}
