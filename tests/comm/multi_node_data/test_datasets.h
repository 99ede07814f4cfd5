// Small synthetic datasets for the comm/multi_node_data tests: example i carries i itself (so a share or
// a batch says which examples it holds) and fields of other dtypes derived from it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "data/tuple_dataset.h"

namespace comm_data_test {

// Example i: {id i64[] = offset + i, x f64[2] = {10 i, 10 i + 1}, flag bool[] = i % 3 == 0,
// label i32[] = i % 4}.
inline std::shared_ptr<tandem::TupleDataset> numbered(std::int64_t n, std::int64_t offset = 0) {
  std::vector<std::int64_t> id;
  std::vector<double> x;
  std::vector<bool> flag;
  std::vector<std::int32_t> label;
  for (std::int64_t i = 0; i < n; ++i) {
    id.push_back(offset + i);
    x.push_back(10.0 * i);
    x.push_back(10.0 * i + 1);
    flag.push_back(i % 3 == 0);
    label.push_back(static_cast<std::int32_t>(i % 4));
  }
  return std::make_shared<tandem::TupleDataset>(std::vector<tandem::Tensor>{
      tandem::from_vector(id, {n}), tandem::from_vector(x, {n, 2}), tandem::from_vector(flag, {n}),
      tandem::from_vector(label, {n})});
}

inline std::vector<std::int64_t> iota(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

}  // namespace comm_data_test
