// The CPU block cache: large blocks come back for the same size; small ones are not kept there
// but in their thread's lists, per class; blocks of 2 MB and more are aligned for huge pages and unmapped whole; blocks of about 1 MB are halves
// of huge pages; cached sizes no longer asked for go back.
#include <catch2/catch.hpp>

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/cpu/block_cache.h"
#include "core/tensor.h"

using tandem::cpu::BlockCache;

namespace {
// This test is about the cache itself, so it turns the cache on even where the environment
// turns it off (the ASan build runs every test with TANDEM_CPU_CACHE_MB=0). The cache reads
// the variable once, when first used; nothing in this binary allocates before main().
const bool kCacheOn = setenv("TANDEM_CPU_CACHE_MB", "1024", 1) == 0;
}  // namespace

TEST_CASE("large blocks are reused for the same rounded size, small ones are not cached") {
  REQUIRE(kCacheOn);
  BlockCache& cache = BlockCache::instance();
  cache.clear();
  void* a = cache.allocate(3 << 20);
  cache.deallocate(a, 3 << 20);
  REQUIRE(cache.cached_bytes() == (3u << 20));
  void* b = cache.allocate((3 << 20) - 100);  // rounds to the same 64 KB multiple
  REQUIRE(b == a);
  REQUIRE(cache.cached_bytes() == 0);
  void* c = cache.allocate(5 << 20);  // another size: a new block
  REQUIRE(c != a);
  cache.deallocate(b, 3 << 20);
  cache.deallocate(c, 5 << 20);
  REQUIRE(cache.cached_bytes() == (8u << 20));

  void* small = cache.allocate(1000);
  REQUIRE(reinterpret_cast<std::uintptr_t>(small) % 64 == 0);
  cache.deallocate(small, 1000);
  REQUIRE(cache.cached_bytes() == (8u << 20));
  cache.clear();
  REQUIRE(cache.cached_bytes() == 0);
}

TEST_CASE("tensors allocate through the cache and read back what they hold") {
  BlockCache::instance().clear();
  const void* first = nullptr;
  {
    tandem::Tensor t = tandem::full({1 << 19}, 2.0);  // 2 MB
    first = t.raw_data();
  }
  tandem::Tensor u = tandem::full({1 << 19}, 3.0);
  REQUIRE(u.raw_data() == first);
  REQUIRE(u.to_vector<float>()[12345] == 3.0f);
}

TEST_CASE("blocks of 2 MB and more lie on 2 MB boundaries (for huge pages) and go back whole") {
  REQUIRE(kCacheOn);
  BlockCache& cache = BlockCache::instance();
  cache.clear();
  const std::size_t n = (std::size_t(5) << 20) + (std::size_t(64) << 10);  // not a multiple of 2 MB
  char* block = static_cast<char*>(cache.allocate(n));
  REQUIRE(reinterpret_cast<std::uintptr_t>(block) % (std::size_t(2) << 20) == 0);
  block[0] = 1;
  block[n - 1] = 2;  // the whole length is mapped
  std::vector<unsigned char> resident((n + 4095) / 4096);
  REQUIRE(mincore(block, n, resident.data()) == 0);
  cache.deallocate(block, n);
  REQUIRE(cache.cached_bytes() == n);
  cache.clear();  // unmapped: the kernel no longer knows the range
  REQUIRE(mincore(block, n, resident.data()) == -1);
  REQUIRE(errno == ENOMEM);
}

TEST_CASE("blocks of 768 KB to 1 MB are halves of a huge page: the second half waits in the cache") {
  REQUIRE(kCacheOn);
  BlockCache& cache = BlockCache::instance();
  cache.clear();
  const std::size_t half = std::size_t(1) << 20;
  char* first = static_cast<char*>(cache.allocate(half));
  REQUIRE(reinterpret_cast<std::uintptr_t>(first) % (2 * half) == 0);
  REQUIRE(cache.cached_bytes() == half);  // the other half
  char* second = static_cast<char*>(cache.allocate(900 << 10));  // rounds up to the same 1 MB
  REQUIRE(second == first + half);
  REQUIRE(cache.cached_bytes() == 0);
  first[0] = 1, first[half - 1] = 2, second[0] = 3, second[half - 1] = 4;  // each half is whole
  REQUIRE(first[half - 1] == 2);
  REQUIRE(second[0] == 3);
  // Each half goes back on its own: freeing one leaves the other mapped.
  cache.deallocate(first, half);
  cache.clear();
  std::vector<unsigned char> resident(half / 4096);
  REQUIRE(mincore(first, half, resident.data()) == -1);
  REQUIRE(mincore(second, half, resident.data()) == 0);
  REQUIRE(second[half - 1] == 4);
  cache.deallocate(second, 900 << 10);
  REQUIRE(cache.cached_bytes() == half);
  cache.clear();
  REQUIRE(mincore(second, half, resident.data()) == -1);
  // Below 768 KB nothing changes: the heap, not cached.
  void* small = cache.allocate(700 << 10);
  cache.deallocate(small, 700 << 10);
  REQUIRE(cache.cached_bytes() == 0);
}

TEST_CASE("sizes no longer asked for go back; a loop that needs more than its live peak keeps it") {
  REQUIRE(kCacheOn);
  BlockCache& cache = BlockCache::instance();
  cache.clear();
  constexpr std::size_t MB = std::size_t(1) << 20;  // sizes above every earlier test's
  // A phase of four 16 MB blocks, then one that asks for 40 MB: cached blocks go back until the
  // live, the cached and the new block fit in the most that was live at once.
  std::vector<void*> phase;
  for (int i = 0; i < 4; ++i) phase.push_back(cache.allocate(16 * MB));
  for (void* block : phase) cache.deallocate(block, 16 * MB);
  REQUIRE(cache.cached_bytes() == 64 * MB);
  REQUIRE(cache.stats().peak_live >= 64 * MB);
  void* big = cache.allocate(40 * MB);
  REQUIRE(cache.stats().live == 40 * MB);
  REQUIRE(cache.cached_bytes() == 16 * MB);  // three of the four gave way
  REQUIRE(cache.stats().live + cache.cached_bytes() <= cache.stats().peak_live);
  cache.deallocate(big, 40 * MB);
  // A step that needs two 20 MB blocks, then one of 44 MB (a live peak of 44, 84 MB in blocks;
  // 20 MB blocks are too small for the 44 MB one and it too large for them): the first rounds
  // give back and map again, then every block is found cached.
  std::vector<std::size_t> maps;
  for (int step = 0; step < 5; ++step) {
    const std::size_t before = cache.stats().mapped;
    void* a = cache.allocate(20 * MB);
    void* b = cache.allocate(20 * MB);
    cache.deallocate(a, 20 * MB);
    cache.deallocate(b, 20 * MB);
    void* c = cache.allocate(44 * MB);
    cache.deallocate(c, 44 * MB);
    maps.push_back(cache.stats().mapped - before);
  }
  INFO("blocks mapped per step: " << maps[0] << " " << maps[1] << " " << maps[2] << " " << maps[3] << " " << maps[4]);
  CHECK(maps[0] > 0);
  CHECK(maps[3] == 0);
  CHECK(maps[4] == 0);
  cache.clear();
}

TEST_CASE("a cached block up to twice the size serves a smaller one, and comes back at its own size") {
  REQUIRE(kCacheOn);
  BlockCache& cache = BlockCache::instance();
  cache.clear();
  constexpr std::size_t MB = std::size_t(1) << 20;  // above every earlier test's sizes
  void* big = cache.allocate(300 * MB);
  cache.deallocate(big, 300 * MB);
  const std::size_t live = cache.stats().live;
  const std::size_t mapped = cache.stats().mapped;
  void* smaller = cache.allocate(200 * MB);  // no 200 MB block cached: the 300 MB one serves
  REQUIRE(smaller == big);
  REQUIRE(cache.stats().mapped == mapped);
  REQUIRE(cache.stats().live == live + 300 * MB);
  REQUIRE(cache.cached_bytes() == 0);
  static_cast<char*>(smaller)[300 * MB - 1] = 1;  // its whole length is still mapped
  cache.deallocate(smaller, 200 * MB);           // freed with the size it was asked for
  REQUIRE(cache.cached_bytes() == 300 * MB);
  REQUIRE(cache.stats().live == live);
  void* again = cache.allocate(300 * MB);  // back under its own size
  REQUIRE(again == big);
  cache.deallocate(again, 300 * MB);
  void* other = cache.allocate(120 * MB);  // less than half: a block of its own
  REQUIRE(other != big);
  REQUIRE(cache.stats().mapped == mapped + 1);
  cache.deallocate(other, 120 * MB);
  cache.clear();
}

// Sanitizers bring their own malloc, which mallopt does not tune.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define TANDEM_TEST_OWN_MALLOC 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TANDEM_TEST_OWN_MALLOC 1
#endif

#if !defined(TANDEM_TEST_OWN_MALLOC) && defined(__GLIBC__)
#include <sys/resource.h>

namespace {
long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}
}  // namespace

TEST_CASE("blocks under 1 MB come back from the heap without page faults, step after step") {
  // A step that allocates several tensors of 512 KB and frees them all: with glibc's defaults
  // part of the heap's free top went back to the kernel at every step, to be faulted in again at
  // the next. BlockCache tunes malloc at its first use so that it stays.
  BlockCache::instance();  // its first use tunes malloc (unless MALLOC_* or GLIBC_TUNABLES are set)
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_") || std::getenv("GLIBC_TUNABLES"))
    return;  // the user's settings stand
  auto step = [] {
    std::vector<tandem::Tensor> live;
    for (int i = 0; i < 8; ++i) live.push_back(tandem::full({1 << 17}, double(i)));  // 512 KB each, touched
    REQUIRE(live[7].to_vector<float>()[100] == 7.0f);
  };
  for (int s = 0; s < 5; ++s) step();  // the first steps map the heap
  const long before = minor_faults();
  for (int s = 0; s < 20; ++s) step();
  // Measured over these 20 steps: untuned 1,600 faults, tuned 128 (the heap grown once more).
  REQUIRE(minor_faults() - before < 400);
}
#endif

#if !defined(__SANITIZE_ADDRESS__)  // (ASan must see every free: the small blocks' lists are off there)
TEST_CASE("small blocks come back on their thread for a request of the same class", "[small]") {
  BlockCache& cache = BlockCache::instance();
  cache.clear();
  // Classes: 64-byte steps up to 1 KB, powers of two up to 64 KB.
  void* a = cache.allocate(1000);  // the 1024-byte class
  REQUIRE(reinterpret_cast<std::uintptr_t>(a) % 64 == 0);
  static_cast<char*>(a)[1023] = 1;  // the whole class is the block's
  cache.deallocate(a, 1000);
  void* b = cache.allocate(970);  // 1024 too
  REQUIRE(b == a);
  void* c = cache.allocate(1100);  // the 2 KB class: another block
  REQUIRE(c != b);
  static_cast<char*>(c)[2047] = 1;
  cache.deallocate(c, 1100);
  REQUIRE(cache.allocate(2048) == c);
  cache.deallocate(c, 2048);
  cache.deallocate(b, 970);
  // Up to 8 blocks a class are kept, and they come back (last freed, first out).
  std::vector<void*> eight;
  for (int i = 0; i < 8; ++i) eight.push_back(cache.allocate(40 << 10));  // the 64 KB class
  for (void* p : eight) cache.deallocate(p, 40 << 10);
  for (int i = 7; i >= 0; --i) REQUIRE(cache.allocate(64 << 10) == eight[i]);
  for (void* p : eight) cache.deallocate(p, 64 << 10);
  // An empty request takes the smallest class's block.
  void* none = cache.allocate(0);
  REQUIRE(none != nullptr);
  cache.deallocate(none, 0);
  REQUIRE(cache.cached_bytes() == 0);  // the large blocks' cache holds none of them
  cache.clear();
}

TEST_CASE("small tensors reuse blocks and hold what they are given, on every thread", "[small]") {
  // Tensors of sizes across the classes, made and freed in a loop on two threads at once, and a
  // block freed on a thread other than its own (it joins that thread's lists or goes to free).
  auto churn = [](int seed) {
    for (int round = 0; round < 200; ++round) {
      std::vector<tandem::Tensor> live;
      for (int n : {1, 15, 16, 17, 255, 257, 1000, 4097, 16384}) {
        live.push_back(tandem::full({n}, double(seed + round + n)));
      }
      for (std::size_t i = 0; i < live.size(); ++i) {
        const std::vector<float> values = live[i].to_vector<float>();
        const float expected = static_cast<float>(seed + round + static_cast<int>(values.size()));
        for (float v : values) REQUIRE(v == expected);
      }
    }
  };
  std::vector<tandem::Tensor> handed;
  std::thread other([&] {
    churn(1000);
    for (int i = 0; i < 20; ++i) handed.push_back(tandem::full({100}, double(i)));
  });
  churn(0);
  other.join();  // its lists are freed as it ends; the tensors it handed over live on
  for (int i = 0; i < 20; ++i) REQUIRE(handed[i].to_vector<float>()[99] == float(i));
  handed.clear();  // freed here, on another thread than their own
  churn(7);
}
#endif
