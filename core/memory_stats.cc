#include "core/memory_stats.h"

#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/cpu/block_cache.h"
#include "core/device.h"
#include "core/storage.h"

// gperftools' C interface, present when tcmalloc serves malloc (core/BUILD.bazel links it unless
// --define=tandem_malloc=system); weak, so that other builds see null.
extern "C" int MallocExtension_GetNumericProperty(const char* property, std::size_t* value) __attribute__((weak));
extern "C" void MallocExtension_ReleaseFreeMemory() __attribute__((weak));

namespace tandem {

namespace {

// A "VmRSS:"-style field of /proc/self/status in bytes (the file says kB: KiB); 0 where absent.
std::int64_t proc_status_bytes(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::size_t length = std::strlen(field);
  while (std::getline(in, line)) {
    if (line.compare(0, length, field) == 0) return std::atoll(line.c_str() + length) * 1024;
  }
  return 0;
}

std::int64_t malloc_property(const char* name) {
  std::size_t value = 0;
  if (MallocExtension_GetNumericProperty == nullptr || !MallocExtension_GetNumericProperty(name, &value)) return 0;
  return static_cast<std::int64_t>(value);
}

}  // namespace

HostMemoryStats host_memory_stats() {
  HostMemoryStats s;
  s.rss = proc_status_bytes("VmRSS:");
  s.peak_rss = proc_status_bytes("VmHWM:");
  s.live_tensors = live_storage_bytes(Device::cpu());
  s.peak_live_tensors = peak_live_storage_bytes(Device::cpu());
  s.block_cache = static_cast<std::int64_t>(cpu::BlockCache::instance().cached_bytes());
  // heap_size counts what tcmalloc mapped, unmapped pages included; those are not resident.
  s.malloc_heap = malloc_property("generic.heap_size") - malloc_property("tcmalloc.pageheap_unmapped_bytes");
  s.malloc_allocated = malloc_property("generic.current_allocated_bytes");
  s.malloc_free =
      malloc_property("tcmalloc.pageheap_free_bytes") + malloc_property("tcmalloc.central_cache_free_bytes") +
      malloc_property("tcmalloc.transfer_cache_free_bytes") + malloc_property("tcmalloc.thread_cache_free_bytes");
  return s;
}

std::string host_memory_fields(const HostMemoryStats& s) {
  char text[256];
  std::snprintf(text, sizeof text,
                "rss_mb=%.1f peak_rss_mb=%.1f live_mb=%.1f peak_live_mb=%.1f cache_mb=%.1f malloc_free_mb=%.1f",
                s.rss / 1e6, s.peak_rss / 1e6, s.live_tensors / 1e6, s.peak_live_tensors / 1e6, s.block_cache / 1e6,
                s.malloc_free / 1e6);
  return text;
}

void release_free_malloc_memory() {
  if (MallocExtension_ReleaseFreeMemory != nullptr) MallocExtension_ReleaseFreeMemory();
}

void release_cached_host_memory() {
  cpu::BlockCache::instance().clear();
  release_free_malloc_memory();
}

}  // namespace tandem
