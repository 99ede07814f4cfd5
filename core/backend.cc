#include "core/backend.h"

#include "core/cpu/cpu_backend.h"
#include "core/error.h"

namespace tandem {

namespace {
Backend* cuda_backend = nullptr;
}

Backend& backend_for(const Device& device, const char* op) {
  if (device.is_cpu()) return cpu_backend();
  TANDEM_CHECK(cuda_backend != nullptr, op, ": tensor on ", device.str(),
               " but this build has no CUDA backend (build with --config=cuda)");
  return *cuda_backend;
}

void register_backend(DeviceType type, Backend* backend) {
  TANDEM_CHECK(type == DeviceType::cuda, "register_backend: only the CUDA backend can be registered");
  cuda_backend = backend;
}

}  // namespace tandem
