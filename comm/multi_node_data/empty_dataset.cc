#include "comm/multi_node_data/empty_dataset.h"

#include <memory>

#include "core/error.h"
#include "core/ops.h"

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

DatasetPtr create_empty_dataset(const DatasetPtr& dataset, Communicator& comm, int root) {
  // -1 from a root without a dataset, so that every rank fails together rather than waiting.
  const double size = comm.rank() == root ? (dataset ? static_cast<double>(dataset->size()) : -1.0) : 0.0;
  const double length = comm.bcast(full({}, size, DType::f64), root).item();
  TANDEM_CHECK(length >= 0, "create_empty_dataset: the root (rank ", root, ") has no dataset (null)");
  return std::make_shared<EmptyDataset>(static_cast<std::int64_t>(length));
}

}  // namespace tandem
