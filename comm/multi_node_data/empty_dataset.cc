#include "comm/multi_node_data/empty_dataset.h"

#include <memory>

#include "core/error.h"

namespace tandem {

EmptyDataset::EmptyDataset(std::int64_t size) : size_(size) {
  TANDEM_CHECK(size_ >= 0, "EmptyDataset: the size must be non-negative, got ", size_);
}

Example EmptyDataset::get(std::int64_t i) const {
  check_index(i, "EmptyDataset::get");
  return {};
}

Example EmptyDataset::get_batch(const std::vector<std::int64_t>& indices) const {
  for (std::int64_t i : indices) check_index(i, "EmptyDataset::get_batch");
  return {};
}

DatasetPtr create_empty_dataset(const DatasetPtr& dataset) {
  TANDEM_CHECK(dataset != nullptr, "create_empty_dataset: the dataset is null");
  return std::make_shared<EmptyDataset>(dataset->size());
}

}  // namespace tandem
