#include "core/storage.h"

#include <atomic>

#include "core/backend.h"
#include "core/error.h"

namespace tandem {

namespace {
PinnedHostAllocator pinned_allocator;
// Live bytes on the host [0] and on the GPUs [1]: one relaxed atomic add per allocation.
std::atomic<std::int64_t> live_bytes[2];
// Storage versions: one counter for the process, so that a version is never reused, not even by
// a storage allocated where a freed one was.
std::atomic<std::uint64_t> last_version{0};
std::uint64_t new_version() { return last_version.fetch_add(1, std::memory_order_relaxed) + 1; }
int live_index(const Device& device) { return device.is_cuda() ? 1 : 0; }
}  // namespace

std::int64_t live_storage_bytes(const Device& device) {
  return live_bytes[live_index(device)].load(std::memory_order_relaxed);
}

void register_pinned_host_allocator(const PinnedHostAllocator& allocator) { pinned_allocator = allocator; }

Storage::Storage(std::size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), backend_(&backend_for(device, "allocate")), version_(new_version()) {
  data_ = backend_->allocate(nbytes, device.index());
  live_bytes[live_index(device_)].fetch_add(static_cast<std::int64_t>(nbytes_), std::memory_order_relaxed);
}

Storage::Storage(std::size_t nbytes, PinnedHost) : nbytes_(nbytes), device_(Device::cpu()), version_(new_version()) {
  if (pinned_allocator.allocate != nullptr) data_ = pinned_allocator.allocate(nbytes);
  pinned_ = data_ != nullptr;
  if (!pinned_) {
    backend_ = &backend_for(device_, "allocate");
    data_ = backend_->allocate(nbytes, 0);
  }
  live_bytes[0].fetch_add(static_cast<std::int64_t>(nbytes_), std::memory_order_relaxed);
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
  live_bytes[live_index(device_)].fetch_add(static_cast<std::int64_t>(nbytes_), std::memory_order_relaxed);
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
