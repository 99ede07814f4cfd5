#include "core/storage.h"

#include "core/backend.h"

namespace tandem {

Storage::Storage(std::size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), backend_(&backend_for(device, "allocate")) {
  data_ = backend_->allocate(nbytes, device.index());
}

Storage::~Storage() { backend_->deallocate(data_, nbytes_, device_.index()); }

}  // namespace tandem
