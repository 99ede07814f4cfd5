#include "comm/checkpoint/staging_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace tandem {

StagingBuffer::~StagingBuffer() {
  if (data_) ::munmap(data_, size_);
}

char* StagingBuffer::reserve(std::size_t bytes) {
  if (bytes <= size_ && data_) return static_cast<char*>(data_);
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
  const std::size_t huge = std::size_t(2) << 20;
  const std::size_t size = (std::max<std::size_t>(bytes, 1) + huge - 1) / huge * huge;
  void* data = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TANDEM_CHECK(data != MAP_FAILED, "checkpoint staging: cannot map ", size, " bytes: ", std::strerror(errno));
  ::madvise(data, size, MADV_HUGEPAGE);  // advice only: without huge pages it works the same
  data_ = data;
  size_ = size;
  return static_cast<char*>(data_);
}

}  // namespace tandem
