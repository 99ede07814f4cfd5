#include "core/storage.h"

#include "core/backend.h"

namespace tandem {

namespace {
PinnedHostAllocator pinned_allocator;
}

void register_pinned_host_allocator(const PinnedHostAllocator& allocator) { pinned_allocator = allocator; }

Storage::Storage(std::size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), backend_(&backend_for(device, "allocate")) {
  data_ = backend_->allocate(nbytes, device.index());
}

Storage::Storage(std::size_t nbytes, PinnedHost) : nbytes_(nbytes), device_(Device::cpu()) {
  if (pinned_allocator.allocate != nullptr) data_ = pinned_allocator.allocate(nbytes);
  pinned_ = data_ != nullptr;
  if (!pinned_) {
    backend_ = &backend_for(device_, "allocate");
    data_ = backend_->allocate(nbytes, 0);
  }
}

Storage::~Storage() {
  if (pinned_) pinned_allocator.deallocate(data_);
  else backend_->deallocate(data_, nbytes_, device_.index());
}

}  // namespace tandem
