// A reference-counted block of device memory. Tensors share storages; views (reshape,
// slicing along the first axis) point into the same storage at an offset.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace tandem {

class Backend;

// Page-locked ("pinned") host memory, which a GPU reads and writes by DMA without staging.
// The CUDA backend registers its caching pinned allocator (cuda/device_context.h) when it is
// linked; allocate returns nullptr when it cannot serve (no GPU on this machine).
struct PinnedHostAllocator {
  void* (*allocate)(std::size_t nbytes) = nullptr;
  void (*deallocate)(void* ptr) noexcept = nullptr;
};
void register_pinned_host_allocator(const PinnedHostAllocator& allocator);

// Bytes of the storages alive now on the host (device.is_cpu(), pinned included) or on the GPUs
// (all of them together): what tensors hold, not what allocators keep cached. The pipeline's
// profile reads it to measure the memory a microbatch keeps from forward to backward.
std::int64_t live_storage_bytes(const Device& device);
// The most live_storage_bytes has been since the program began or the last reset (PyTorch's
// max_memory_allocated): what a step's transient tensors added at their peak. Set back to the
// bytes live now by the reset.
std::int64_t peak_live_storage_bytes(const Device& device);
void reset_peak_live_storage_bytes(const Device& device);

class Storage {
 public:
  Storage(std::size_t nbytes, Device device);
  // Host memory, page-locked when a pinned allocator is registered and can serve it, else
  // ordinary (pinned() tells which).
  struct PinnedHost {};
  Storage(std::size_t nbytes, PinnedHost);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // Mutable access marks the storage as (about to be) written: it takes a new version.
  void* data() {
    mark_written();
    return data_;
  }
  const void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

  // Parameters sharded over ranks (ZeRO-3, comm/data_parallel) give their memory back between
  // uses: release() frees the bytes, restore() allocates them again (contents undefined until
  // written). Every tensor viewing this storage sees both; reading one while released is an
  // error (Tensor::raw_data), never a stale pointer.
  void release();
  void restore();
  bool released() const { return released_; }

  // A number that changes whenever the contents may have changed: a new one, never used before by
  // any storage of the process, at construction, at restore() and at every mutable access (data(),
  // hence Tensor::data<T>(), raw_data(), copy_ and every kernel writing a tensor). Caches of
  // values derived from a storage (core/cpu/packed_weights.h: weights packed for a product) key
  // on it: equal versions mean equal contents. The contract for code that keeps a mutable
  // pointer and writes through it later (a non-blocking receive): nothing may read the storage
  // in between, which is a data race anyway; call mark_written() when the write completes.
  std::uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void mark_written();

  // Marks the contents as a weight: a matrix that products will use again unchanged (a model's
  // parameter, marked by autograd when a function reads it; the LSTM's recurrent matrix across
  // its time steps). By default only a weight gets a packed copy for its products
  // (core/cpu/packed_weights.h): a copy of every input batch that a loop happens to use again
  // (a benchmark cycling over 20 fixed batches) would hold a data set's worth of memory.
  void mark_weight() { weight_.store(true, std::memory_order_relaxed); }
  bool weight() const { return weight_.load(std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  Backend* backend_ = nullptr;
  bool pinned_ = false;
  bool released_ = false;
  std::atomic<std::uint64_t> version_;
  std::atomic<bool> weight_{false};
};

}  // namespace tandem
