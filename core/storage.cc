#include "core/storage.h"

#include <atomic>

#include "core/backend.h"
#include "core/error.h"

namespace tandem {

namespace {
PinnedHostAllocator pinned_allocator;
// Live bytes on the host [0] and on the GPUs [1]: one relaxed atomic add per allocation.
std::atomic<std::int64_t> live_bytes[2];
// Their high-water marks since the start or the last reset_peak_live_storage_bytes.
std::atomic<std::int64_t> peak_live_bytes[2];

void add_live(int index, std::int64_t nbytes) {
  const std::int64_t now = live_bytes[index].fetch_add(nbytes, std::memory_order_relaxed) + nbytes;
  std::int64_t peak = peak_live_bytes[index].load(std::memory_order_relaxed);
  while (now > peak && !peak_live_bytes[index].compare_exchange_weak(peak, now, std::memory_order_relaxed)) {}
}
// Storage versions: one counter for the process, so that a version is never reused, not even by
// a storage allocated where a freed one was.
std::atomic<std::uint64_t> last_version{0};
std::uint64_t new_version() { return last_version.fetch_add(1, std::memory_order_relaxed) + 1; }
int live_index(const Device& device) { return device.is_cuda() ? 1 : 0; }
}  // namespace

std::int64_t live_storage_bytes(const Device& device) {
  return live_bytes[live_index(device)].load(std::memory_order_relaxed);
}

std::int64_t peak_live_storage_bytes(const Device& device) {
  return peak_live_bytes[live_index(device)].load(std::memory_order_relaxed);
}

void reset_peak_live_storage_bytes(const Device& device) {
  const int index = live_index(device);
  peak_live_bytes[index].store(live_bytes[index].load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void register_pinned_host_allocator(const PinnedHostAllocator& allocator) { pinned_allocator = allocator; }

Storage::Storage(std::size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), backend_(&backend_for(device, "allocate")), version_(new_version()) {
  data_ = backend_->allocate(nbytes, device.index());
  add_live(live_index(device_), static_cast<std::int64_t>(nbytes_));
}

Storage::Storage(std::size_t nbytes, PinnedHost) : nbytes_(nbytes), device_(Device::cpu()), version_(new_version()) {
  if (pinned_allocator.allocate != nullptr) data_ = pinned_allocator.allocate(nbytes);
  pinned_ = data_ != nullptr;
  if (!pinned_) {
    backend_ = &backend_for(device_, "allocate");
    data_ = backend_->allocate(nbytes, 0);
  }
  add_live(0, static_cast<std::int64_t>(nbytes_));
}

void Storage::release() {
  if (released_) return;
  TANDEM_CHECK(!pinned_, "Storage::release: pinned host memory cannot be released");
  live_bytes[live_index(device_)].fetch_sub(static_cast<std::int64_t>(nbytes_), std::memory_order_relaxed);
  backend_->deallocate(data_, nbytes_, device_.index());
  data_ = nullptr;
  released_ = true;
}

void Storage::restore() {
  if (!released_) return;
  data_ = backend_->allocate(nbytes_, device_.index());
  add_live(live_index(device_), static_cast<std::int64_t>(nbytes_));
  released_ = false;
  mark_written();
}

void Storage::mark_written() { version_.store(new_version(), std::memory_order_relaxed); }

Storage::~Storage() {
  if (released_) return;
  live_bytes[live_index(device_)].fetch_sub(static_cast<std::int64_t>(nbytes_), std::memory_order_relaxed);
  if (pinned_) pinned_allocator.deallocate(data_);
  else backend_->deallocate(data_, nbytes_, device_.index());
}

}  // namespace tandem
