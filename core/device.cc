#include "core/device.h"

namespace tandem {

std::string Device::str() const {
  if (is_cpu()) return "cpu";
  return "cuda:" + std::to_string(index_);
}

}  // namespace tandem
