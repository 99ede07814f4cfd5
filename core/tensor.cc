#include "core/tensor.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "core/backend.h"
#include "core/random.h"

namespace tandem {

namespace {

void check_shape_valid(const Shape& shape, const char* op) {
  for (std::int64_t extent : shape)
    TANDEM_CHECK(extent >= 0, op, ": negative extent in shape ", shape);
}

}  // namespace

Tensor::Tensor(const Shape& shape, DType dtype, Device device)
    : shape_(shape), numel_(shape_numel(shape)), dtype_(dtype), device_(device) {
  check_shape_valid(shape, "Tensor");
  // Zero-sized tensors (the delegate variables of comm/) still get a storage so that
  // `defined()` holds; one byte keeps allocators from returning null.
  storage_ = std::make_shared<Storage>(std::max<std::size_t>(nbytes(), 1), device);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype)
    : storage_(std::move(storage)), shape_(shape), numel_(shape_numel(shape)), dtype_(dtype),
      device_(storage_->device()) {
  check_shape_valid(shape, "Tensor");
  TANDEM_CHECK(storage_->nbytes() >= nbytes(), "Tensor: a storage of ", storage_->nbytes(), " bytes cannot hold ",
               description());
}

Tensor empty_pinned(const Shape& shape, DType dtype) {
  check_shape_valid(shape, "empty_pinned");
  const std::size_t nbytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(std::make_shared<Storage>(std::max<std::size_t>(nbytes, 1), Storage::PinnedHost{}), shape, dtype);
}

Tensor Tensor::pin_memory() const {
  TANDEM_CHECK(defined(), "pin_memory: the tensor is undefined");
  Tensor out = empty_pinned(shape_, dtype_);
  out.copy_(*this);
  return out;
}

std::int64_t Tensor::size(std::int64_t axis) const {
  return shape_[normalize_axis(axis, shape_.size(), "Tensor::size")];
}

std::string Tensor::description() const {
  if (!defined()) return "undefined tensor";
  std::ostringstream out;
  out << dtype_name(dtype_) << shape_str(shape_);
  if (!device_.is_cpu()) out << " on " << device_.str();
  return out.str();
}

const void* Tensor::raw_data() const {
  TANDEM_CHECK(defined(), "raw_data: the tensor is undefined");
  TANDEM_CHECK(!storage_->released(), "the memory of ", dtype_name(dtype_), shape_str(shape_),
               " has been released: a parameter sharded over ranks (zero = 3) is only readable while its link "
               "runs (inside a function's forward or backward); elsewhere hold gather_parameters(optimizer) "
               "(comm/data_parallel) while reading it");
  const Storage& storage = *storage_;  // the const access: reading does not change the version
  return static_cast<const char*>(storage.data()) + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
}

void* Tensor::raw_data() {
  const void* data = static_cast<const Tensor*>(this)->raw_data();
  storage_->mark_written();
  return const_cast<void*>(data);
}

void Tensor::check_element_type(DType requested, const char* operation) const {
  TANDEM_CHECK(dtype_ == requested, operation, "<", dtype_name(requested), ">: the tensor is ", description());
}

Tensor Tensor::reshape(const Shape& new_shape) const {
  TANDEM_CHECK(defined(), "reshape: the tensor is undefined");
  Shape shape = new_shape;
  int inferred = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TANDEM_CHECK(inferred < 0, "reshape: more than one -1 in ", new_shape);
      inferred = static_cast<int>(i);
    } else {
      TANDEM_CHECK(shape[i] >= 0, "reshape: negative extent in ", new_shape);
      known *= shape[i];
    }
  }
  if (inferred >= 0) {
    TANDEM_CHECK(known != 0 && numel_ % known == 0, "reshape: cannot reshape ", description(), " into ",
                 new_shape);
    shape[inferred] = numel_ / known;
  }
  TANDEM_CHECK(shape_numel(shape) == numel_, "reshape: cannot reshape ", description(), " (", numel_,
               " elements) into ", new_shape);
  // Built field by field: copying *this would copy its shape only to replace it.
  Tensor view;
  view.storage_ = storage_;
  view.offset_ = offset_;
  view.shape_ = std::move(shape);
  view.numel_ = numel_;
  view.dtype_ = dtype_;
  view.device_ = device_;
  return view;
}

Tensor Tensor::slice_rows(std::int64_t begin, std::int64_t end) const {
  TANDEM_CHECK(defined() && dim() >= 1, "slice_rows: needs a tensor of at least 1 dimension, got ",
               description());
  TANDEM_CHECK(0 <= begin && begin <= end && end <= shape_[0], "slice_rows: rows [", begin, ", ", end,
               ") out of range for ", description());
  Tensor view = *this;
  const std::int64_t row = shape_[0] == 0 ? 0 : numel_ / shape_[0];
  view.offset_ = offset_ + begin * row;
  view.shape_[0] = end - begin;
  view.numel_ = (end - begin) * row;
  return view;
}

Tensor Tensor::slice_flat(std::int64_t begin, const Shape& shape) const { return slice_flat(begin, Shape(shape)); }

Tensor Tensor::slice_flat(std::int64_t begin, Shape&& shape) const {
  const std::int64_t n = shape_numel(shape);
  TANDEM_CHECK(defined() && 0 <= begin && n >= 0 && begin + n <= numel_, "slice_flat: elements [", begin, ", ",
               begin + n, ") as ", shape, " out of range for ", description());
  Tensor view;
  view.storage_ = storage_;
  view.offset_ = offset_ + begin;
  view.shape_ = std::move(shape);
  view.numel_ = n;
  view.dtype_ = dtype_;
  view.device_ = device_;
  return view;
}

Tensor Tensor::clone() const {
  TANDEM_CHECK(defined(), "clone: the tensor is undefined");
  Tensor out(shape_, dtype_, device_);
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  TANDEM_CHECK(defined(), "to(", dtype_name(dtype), "): the tensor is undefined");
  if (dtype == dtype_) return *this;
  Tensor out(shape_, dtype, device_);
  backend_for(device_, "to(dtype)").cast(*this, out);
  return out;
}

Tensor Tensor::to(Device device) const {
  TANDEM_CHECK(defined(), "to(", device.str(), "): the tensor is undefined");
  if (device == device_) return *this;
  Tensor out(shape_, dtype_, device);
  out.copy_(*this);
  return out;
}

void Tensor::copy_(const Tensor& src) {
  TANDEM_CHECK(defined() && src.defined(), "copy_: undefined tensor");
  TANDEM_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy_: cannot copy ", src.description(),
               " into ", description());
  const std::size_t n = nbytes();
  if (n == 0) return;
  if (device_.is_cpu() && src.device_.is_cpu()) {
    std::memmove(raw_data(), src.raw_data(), n);
  } else if (src.device_.is_cpu()) {
    backend_for(device_, "copy_").copy_from_host(raw_data(), src.raw_data(), n, device_.index());
  } else if (device_.is_cpu()) {
    backend_for(src.device_, "copy_").copy_to_host(raw_data(), src.raw_data(), n, src.device_.index());
  } else {
    // Device to device: staged through the host. Same-device copies go through the strided
    // copy kernel instead, which stays on the device.
    if (src.device_ == device_) {
      // Overlapping ranges (a shifted view of the same storage) would race in the kernel: copy
      // through a temporary, as memmove does on the host.
      const Tensor from = shares_storage_with(src) ? src.clone() : src;
      StridedView view{0, contiguous_strides({numel_})};
      backend_for(device_, "copy_").copy_strided(from, view, *this, view, {numel_});
      return;
    }
    std::vector<char> host(n);
    backend_for(src.device_, "copy_").copy_to_host(host.data(), src.raw_data(), n, src.device_.index());
    backend_for(device_, "copy_").copy_from_host(raw_data(), host.data(), n, device_.index());
  }
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  TANDEM_CHECK(defined(), "to_vector: the tensor is undefined");
  const Tensor host = to(Device::cpu()).to(dtype_of<T>());
  const T* values = host.data<T>();
  return std::vector<T>(values, values + numel_);
}

// Filled element-wise: std::vector<bool> has no contiguous buffer to copy into.
template <>
std::vector<bool> Tensor::to_vector<bool>() const {
  TANDEM_CHECK(defined(), "to_vector: the tensor is undefined");
  const Tensor host = to(Device::cpu()).to(DType::boolean);
  const bool* values = host.data<bool>();
  return std::vector<bool>(values, values + numel_);
}

double Tensor::item() const {
  TANDEM_CHECK(defined() && numel_ == 1, "item: needs a tensor of exactly one element, got ",
               description());
  if (device_.is_cpu()) {  // read in place (to_vector makes two tensors and a vector)
    switch (dtype_) {
      case DType::f32: return *data<float>();
      case DType::f64: return *data<double>();
      case DType::i32: return *data<std::int32_t>();
      case DType::i64: return static_cast<double>(*data<std::int64_t>());
      case DType::boolean: return *data<bool>() ? 1.0 : 0.0;
      case DType::bf16:
      case DType::f16: break;  // through to_vector (the conversions live with the CPU backend)
    }
  }
  return to_vector<double>()[0];
}

template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<std::int32_t> Tensor::to_vector<std::int32_t>() const;
template std::vector<std::int64_t> Tensor::to_vector<std::int64_t>() const;

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) {
  out << "Tensor(" << tensor.description();
  if (tensor.defined()) {
    constexpr std::int64_t kShown = 16;
    const std::vector<double> values = tensor.to_vector<double>();
    out << ", [";
    for (std::int64_t i = 0; i < std::min<std::int64_t>(kShown, tensor.numel()); ++i)
      out << (i ? ", " : "") << values[i];
    if (tensor.numel() > kShown) out << ", ...";
    out << "]";
  }
  return out << ")";
}

// ---- creation ----

Tensor empty(const Shape& shape, DType dtype, Device device) { return Tensor(shape, dtype, device); }

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor out(shape, dtype, device);
  backend_for(device, "full").fill(out, value);
  return out;
}

Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, t.dtype(), t.device()); }
Tensor scalar_tensor(double value, DType dtype, Device device) { return full({}, value, dtype, device); }

Tensor arange(double start, double stop, double step, DType dtype, Device device) {
  TANDEM_CHECK(step != 0, "arange: step must not be 0");
  const auto count = static_cast<std::int64_t>(std::max(0.0, std::ceil((stop - start) / step)));
  Tensor host({count}, dtype);
  TANDEM_DISPATCH_NUMERIC(dtype, "arange", [&] {
    scalar_t* values = host.data<scalar_t>();
    for (std::int64_t i = 0; i < count; ++i) values[i] = static_cast<scalar_t>(start + step * i);
  });
  return host.to(device);
}

Tensor arange(std::int64_t stop, DType dtype) { return arange(0, static_cast<double>(stop), 1, dtype); }

Tensor from_buffer(const void* data, const Shape& shape, DType dtype, Device device) {
  Tensor out(shape, dtype, device);
  if (out.nbytes() == 0) return out;
  TANDEM_CHECK(data != nullptr, "from_buffer: null data for ", out.description());
  if (device.is_cpu()) {
    std::memcpy(out.raw_data(), data, out.nbytes());
  } else {
    backend_for(device, "from_buffer").copy_from_host(out.raw_data(), data, out.nbytes(), device.index());
  }
  return out;
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  TANDEM_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape), "from_vector: ",
               values.size(), " values do not fill shape ", shape);
  return from_buffer(values.data(), shape, dtype_of<T>(), device);
}

template <>
Tensor from_vector<bool>(const std::vector<bool>& values, const Shape& shape, Device device) {
  TANDEM_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape), "from_vector: ",
               values.size(), " values do not fill shape ", shape);
  std::unique_ptr<bool[]> buffer(new bool[values.size()]);
  for (std::size_t i = 0; i < values.size(); ++i) buffer[i] = values[i];
  return from_buffer(buffer.get(), shape, DType::boolean, device);
}

template Tensor from_vector<float>(const std::vector<float>&, const Shape&, Device);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, Device);
template Tensor from_vector<std::int32_t>(const std::vector<std::int32_t>&, const Shape&, Device);
template Tensor from_vector<std::int64_t>(const std::vector<std::int64_t>&, const Shape&, Device);

namespace {

// Random numbers are drawn in f64 on the host in a fixed order, so a seed gives the same
// values whatever the dtype or device.
template <typename Draw>
Tensor random_tensor(const Shape& shape, DType dtype, Device device, const char* op, Draw draw) {
  TANDEM_CHECK(is_floating(dtype), op, ": needs a floating dtype, got ", dtype_name(dtype));
  // Drawn in double and rounded to the dtype as it is written: the same numbers as a draw into f64
  // cast afterwards, without an f64 copy twice the size (which then stayed in the block cache and
  // served a later tensor of half its size, raising the MLP benchmark's peak: docs/performance.md,
  // "Peak memory against LibTorch").
  if (is_half(dtype)) {
    // Each double rounded to 16 bits once (a conversion through f32 would round twice).
    Tensor wide(shape, DType::f64);
    double* values = wide.data<double>();
    for (std::int64_t i = 0; i < wide.numel(); ++i) values[i] = draw();
    return wide.to(dtype).to(device);
  }
  Tensor host(shape, dtype);
  if (dtype == DType::f32) {
    float* values = host.data<float>();
    for (std::int64_t i = 0; i < host.numel(); ++i) values[i] = static_cast<float>(draw());
  } else {
    double* values = host.data<double>();
    for (std::int64_t i = 0; i < host.numel(); ++i) values[i] = draw();
  }
  return host.to(device);
}

}  // namespace

Tensor randn(const Shape& shape, Generator& generator, double mean, double stddev, DType dtype,
             Device device) {
  TANDEM_CHECK(stddev >= 0, "randn: negative stddev ", stddev);
  std::normal_distribution<double> dist(mean, stddev);
  return random_tensor(shape, dtype, device, "randn", [&] { return dist(generator.engine()); });
}

Tensor rand_uniform(const Shape& shape, Generator& generator, double low, double high, DType dtype,
                    Device device) {
  TANDEM_CHECK(low <= high, "rand_uniform: low ", low, " > high ", high);
  std::uniform_real_distribution<double> dist(low, high);
  return random_tensor(shape, dtype, device, "rand_uniform", [&] { return dist(generator.engine()); });
}

Tensor philox_uniform(const Shape& shape, Generator& generator, double low, double high, DType dtype, Device device) {
  TANDEM_CHECK(low <= high, "philox_uniform: low ", low, " > high ", high);
  TANDEM_CHECK(is_floating(dtype), "philox_uniform: needs a floating dtype, got ", dtype_name(dtype));
  // 16 bits: the f32 draw, rounded once.
  if (is_half(dtype)) return philox_uniform(shape, generator, low, high, DType::f32, device).to(dtype);
  Tensor out(shape, dtype, device);
  backend_for(device, "philox_uniform").random_uniform(out, generator.next(), low, high);
  return out;
}

Generator& global_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(std::uint64_t seed) { global_generator().seed(seed); }

std::string Generator::state() const {
  std::ostringstream out;
  out << engine_;
  return out.str();
}

void Generator::set_state(const std::string& text) {
  std::istringstream in(text);
  std::mt19937_64 engine;
  in >> engine;
  TANDEM_CHECK(!in.fail(), "Generator::set_state: not the state of a generator (", text.size(), " characters)");
  engine_ = engine;
}

}  // namespace tandem
