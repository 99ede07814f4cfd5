// The host memory figures (core/memory_stats.h): live and peak tensor bytes follow allocations,
// the block cache holds a freed large block until released, and the kernel's counts are read.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "core/memory_stats.h"
#include "core/ops.h"
#include "core/storage.h"

using namespace tandem;

TEST_CASE("memory stats: live and peak tensor bytes, the block cache, the resident set") {
  release_cached_host_memory();
  reset_peak_live_storage_bytes(Device::cpu());
  const HostMemoryStats before = host_memory_stats();
  REQUIRE(before.peak_live_tensors == before.live_tensors);
  REQUIRE(before.block_cache == 0);
  REQUIRE(before.rss > 0);
  REQUIRE(before.peak_rss >= before.rss);

  constexpr std::int64_t kBytes = 8 << 20;
  {
    Tensor big = zeros({kBytes / 4}, DType::f32);
    const HostMemoryStats during = host_memory_stats();
    REQUIRE(during.live_tensors - before.live_tensors == kBytes);
    REQUIRE(during.peak_live_tensors == during.live_tensors);
    REQUIRE(during.rss - before.rss >= kBytes / 2);  // zeros touched every page (allow for what was freed meanwhile)
    if (during.malloc_heap > 0) REQUIRE(during.malloc_allocated <= during.malloc_heap);  // tcmalloc builds
  }
  const HostMemoryStats after = host_memory_stats();
  REQUIRE(after.live_tensors == before.live_tensors);
  REQUIRE(after.peak_live_tensors - before.live_tensors == kBytes);  // the peak stays until reset
  const char* limit = std::getenv("TANDEM_CPU_CACHE_MB");            // 0 under the address sanitizer: no cache
  if (limit != nullptr && std::string(limit) == "0") REQUIRE(after.block_cache == 0);
  else REQUIRE(after.block_cache >= kBytes);  // kept for the next 8 MB tensor
  release_cached_host_memory();
  REQUIRE(host_memory_stats().block_cache == 0);
  reset_peak_live_storage_bytes(Device::cpu());
  REQUIRE(host_memory_stats().peak_live_tensors == after.live_tensors);
  REQUIRE(host_memory_fields(after).find("peak_live_mb=") != std::string::npos);
}
