#include "data/tuple_dataset.h"

#include <cstring>
#include <sstream>

#include "core/error.h"

namespace tandem {

namespace {

std::string describe_fields(const std::vector<Tensor>& fields) {
  std::ostringstream out;
  for (std::size_t f = 0; f < fields.size(); ++f)
    out << (f ? ", " : "") << "field " << f << " is " << fields[f].description();
  return out.str();
}

}  // namespace

TupleDataset::TupleDataset(std::vector<Tensor> fields) : fields_(std::move(fields)) {
  TANDEM_CHECK(!fields_.empty(), "TupleDataset: needs at least one field");
  for (std::size_t f = 0; f < fields_.size(); ++f)
    TANDEM_CHECK(fields_[f].defined() && fields_[f].dim() >= 1, "TupleDataset: field ", f,
                 " must have a leading example axis, but it is ", fields_[f].description());
  size_ = fields_[0].shape()[0];
  for (const Tensor& field : fields_)
    TANDEM_CHECK(field.shape()[0] == size_,
                 "TupleDataset: every field needs the same length along axis 0 (the example axis), but ",
                 describe_fields(fields_));
}

Example TupleDataset::get(std::int64_t i) const {
  check_index(i, "TupleDataset::get");
  Example example;
  example.reserve(fields_.size());
  for (const Tensor& field : fields_) {
    const Shape row_shape(field.shape().begin() + 1, field.shape().end());
    example.push_back(field.slice_rows(i, i + 1).reshape(row_shape));
  }
  return example;
}

Example TupleDataset::get_batch(const std::vector<std::int64_t>& indices) const {
  for (std::int64_t i : indices) check_index(i, "TupleDataset::get_batch");
  const auto k = static_cast<std::int64_t>(indices.size());
  Example batch;
  batch.reserve(fields_.size());
  for (const Tensor& field : fields_) {
    Shape shape = field.shape();
    shape[0] = k;
    Tensor out(shape, field.dtype(), field.device());
    const bool on_cpu = field.device().is_cpu();
    const std::size_t row_bytes = size_ == 0 ? 0 : field.nbytes() / static_cast<std::size_t>(size_);
    const char* src = on_cpu && row_bytes ? static_cast<const char*>(field.raw_data()) : nullptr;
    char* dst = on_cpu && row_bytes ? static_cast<char*>(out.raw_data()) : nullptr;
    for (std::int64_t begin = 0; begin < k;) {
      // [begin, end) of the batch maps to consecutive rows of the field.
      std::int64_t end = begin + 1;
      while (end < k && indices[end] == indices[end - 1] + 1) ++end;
      const std::int64_t row = indices[begin];
      if (on_cpu) {
        if (row_bytes)
          std::memcpy(dst + begin * row_bytes, src + row * row_bytes, (end - begin) * row_bytes);
      } else {
        out.slice_rows(begin, end).copy_(field.slice_rows(row, row + (end - begin)));
      }
      begin = end;
    }
    batch.push_back(out);
  }
  return batch;
}

}  // namespace tandem
