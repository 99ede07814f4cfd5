// A reference-counted block of device memory. Tensors share storages; views (reshape,
// slicing along the first axis) point into the same storage at an offset.
#pragma once

#include <cstddef>
#include <memory>

#include "core/device.h"

namespace tandem {

class Backend;

class Storage {
 public:
  Storage(std::size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  Backend* backend_ = nullptr;
};

}  // namespace tandem
