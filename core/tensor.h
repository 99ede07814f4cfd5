// The tensor: a typed, shaped, row-major view into shared device storage.
//
// Tensors are always contiguous (row-major) from their offset on. Copies are explicit:
// `reshape` and `slice_rows` return views sharing storage; `clone` copies. Operations live in
// core/ops/ as free functions and run on the tensor's device through its Backend.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/storage.h"

namespace tandem {

class Generator;

class Tensor {
 public:
  // An undefined tensor (no storage); `defined()` tells it apart. Used for "no gradient".
  Tensor() = default;
  // Allocates uninitialised storage.
  Tensor(const Shape& shape, DType dtype, Device device = Device::cpu());
  // Wraps a storage (empty_pinned).
  Tensor(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  std::size_t dim() const { return shape_.size(); }
  std::int64_t size(std::int64_t axis) const;
  std::int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  std::string description() const;  // "f32[2, 3]", or "f32[2, 3] on cuda:0" off the CPU

  // Raw access. On CUDA tensors these are device pointers.
  void* raw_data();
  const void* raw_data() const;
  // Typed access; checks that T matches the dtype (DTypeOf<T>: the host's types, or a device
  // backend's own, such as CUDA's 16-bit types).
  template <typename T> T* data() {
    check_element_type(dtype_of<T>(), "data");
    return static_cast<T*>(raw_data());
  }
  template <typename T> const T* data() const {
    check_element_type(dtype_of<T>(), "data");
    return static_cast<const T*>(raw_data());
  }
  // The storage and the offset (in elements) at which this tensor starts: for copy kernels.
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  std::int64_t storage_offset() const { return offset_; }
  bool shares_storage_with(const Tensor& other) const { return storage_ && storage_ == other.storage_; }

  // Views (no copy). reshape accepts one -1 extent, inferred from the others.
  Tensor reshape(const Shape& shape) const;
  Tensor flatten() const { return reshape({numel_}); }
  // Rows [begin, end) of the first axis, sharing storage.
  Tensor slice_rows(std::int64_t begin, std::int64_t end) const;
  // numel(shape) consecutive elements from element `begin` (row-major), viewed as `shape`:
  // the pieces of a flat buffer (slice_rows(b, e).reshape(shape) in one step).
  Tensor slice_flat(std::int64_t begin, const Shape& shape) const;
  Tensor slice_flat(std::int64_t begin, Shape&& shape) const;  // the shape moved in, not copied

  // Copies.
  Tensor clone() const;
  Tensor to(DType dtype) const;    // returns *this when the dtype already matches
  Tensor to(Device device) const;  // returns *this when the device already matches
  // Copies `src` (same shape and dtype, any device) into this tensor's memory.
  void copy_(const Tensor& src);
  // A CPU copy in page-locked host memory, which moves to and from a GPU by DMA (PyTorch's
  // pin_memory); ordinary host memory when no GPU can pin it (a build without CUDA, no GPU).
  Tensor pin_memory() const;
  bool is_pinned() const { return storage_ != nullptr && storage_->pinned(); }

  // Host read-out. to_vector<T> converts to T when the dtype differs.
  template <typename T> std::vector<T> to_vector() const;
  double item() const;  // the single element as a double; errors unless numel() == 1

 private:
  void check_element_type(DType requested, const char* operation) const;
  std::shared_ptr<Storage> storage_;
  std::int64_t offset_ = 0;  // elements
  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  Device device_;
};

// std::vector<bool> has no contiguous buffer, so bool has its own specialisations.
template <> std::vector<bool> Tensor::to_vector<bool>() const;

std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

// ---- creation ----
Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
// Uninitialised host memory, page-locked where possible (see Tensor::pin_memory).
Tensor empty_pinned(const Shape& shape, DType dtype = DType::f32);
Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor scalar_tensor(double value, DType dtype = DType::f32, Device device = Device::cpu());  // shape []
// [start, stop) in steps of step, as in numpy.arange.
Tensor arange(double start, double stop, double step = 1, DType dtype = DType::f32,
              Device device = Device::cpu());
Tensor arange(std::int64_t stop, DType dtype = DType::i64);
// Copies numel(shape) elements of `dtype` from host memory at `data`.
Tensor from_buffer(const void* data, const Shape& shape, DType dtype, Device device = Device::cpu());
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu());
template <>
Tensor from_vector<bool>(const std::vector<bool>& values, const Shape& shape, Device device);
template <typename T>
Tensor from_vector(const std::vector<T>& values) { return from_vector(values, {static_cast<std::int64_t>(values.size())}); }

// Random tensors from a seeded generator (core/random.h); same seed, same numbers.
Tensor randn(const Shape& shape, Generator& generator, double mean = 0, double stddev = 1,
             DType dtype = DType::f32, Device device = Device::cpu());
Tensor rand_uniform(const Shape& shape, Generator& generator, double low = 0, double high = 1,
                    DType dtype = DType::f32, Device device = Device::cpu());
// Uniform numbers on [low, high) drawn where the tensor lives, in parallel, by the counter-based
// Philox generator (core/philox.h): each call takes one 64-bit seed from `generator`, and the
// same seed gives the same numbers on every device. Dropout masks are drawn this way.
Tensor philox_uniform(const Shape& shape, Generator& generator, double low = 0, double high = 1,
                      DType dtype = DType::f32, Device device = Device::cpu());

}  // namespace tandem
