// Host memory that a rank's checkpoint pieces are copied into before a write in another thread
// (CheckpointWriter's asynchronous saves): the image of the rank's file, kept from one save to the
// next, so that its pages are touched only once. Asks the kernel for 2 MiB pages
// (madvise(MADV_HUGEPAGE)), which makes that first touch a few hundred faults instead of tens of
// thousands.
#pragma once

#include <cstddef>

namespace tandem {

class StagingBuffer {
 public:
  StagingBuffer() = default;
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;
  ~StagingBuffer();

  // At least `bytes` of memory (what it held before is not kept when it grows).
  char* reserve(std::size_t bytes);
  std::size_t capacity() const { return size_; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace tandem
