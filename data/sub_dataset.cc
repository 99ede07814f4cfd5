#include "data/sub_dataset.h"

#include <random>

#include "core/error.h"
#include "core/random.h"
#include "data/permutation.h"

namespace tandem {

SubDataset::SubDataset(DatasetPtr base, std::int64_t start, std::int64_t finish, std::vector<std::int64_t> order)
    : base_(std::move(base)), start_(start), finish_(finish), order_(std::move(order)) {
  TANDEM_CHECK(base_ != nullptr, "SubDataset: the base dataset is null");
  const std::int64_t n = base_->size();
  TANDEM_CHECK(0 <= start_ && start_ <= finish_ && finish_ <= n, "SubDataset: the range [", start_, ", ", finish_,
               ") does not fit in a base dataset of size ", n, " (needs 0 <= start <= finish <= ", n, ")");
  if (!order_.empty()) {
    TANDEM_CHECK(static_cast<std::int64_t>(order_.size()) == n, "SubDataset: the order has ", order_.size(),
                 " entries but the base dataset has ", n, " examples");
    for (std::size_t j = 0; j < order_.size(); ++j)
      TANDEM_CHECK(0 <= order_[j] && order_[j] < n, "SubDataset: order[", j, "] = ", order_[j],
                   " is out of range for a base dataset of size ", n);
  }
}

Example SubDataset::get(std::int64_t i) const {
  check_index(i, "SubDataset::get");
  return base_->get(base_index(i));
}

Example SubDataset::get_batch(const std::vector<std::int64_t>& indices) const {
  if (indices.empty()) return Dataset::get_batch(indices);
  std::vector<std::int64_t> mapped;
  mapped.reserve(indices.size());
  for (std::int64_t i : indices) {
    check_index(i, "SubDataset::get_batch");
    mapped.push_back(base_index(i));
  }
  return base_->get_batch(mapped);
}

namespace {

std::uint64_t seed_or_draw(std::optional<std::uint64_t> seed) {
  return seed ? *seed : global_generator().next();
}

std::vector<std::int64_t> random_order(const DatasetPtr& dataset, std::optional<std::uint64_t> seed,
                                       const char* op) {
  TANDEM_CHECK(dataset != nullptr, op, ": the dataset is null");
  std::mt19937_64 engine(seed_or_draw(seed));
  return random_permutation(dataset->size(), engine);
}

}  // namespace

SubDatasetPair split_dataset(DatasetPtr dataset, std::int64_t first_size, std::vector<std::int64_t> order) {
  TANDEM_CHECK(dataset != nullptr, "split_dataset: the dataset is null");
  const std::int64_t n = dataset->size();
  TANDEM_CHECK(0 <= first_size && first_size <= n, "split_dataset: first_size ", first_size,
               " is out of range for a dataset of size ", n, " (needs 0 <= first_size <= ", n, ")");
  auto first = std::make_shared<SubDataset>(dataset, 0, first_size, order);
  auto second = std::make_shared<SubDataset>(dataset, first_size, n, std::move(order));
  return {std::move(first), std::move(second)};
}

SubDatasetPair split_dataset_random(DatasetPtr dataset, std::int64_t first_size, std::optional<std::uint64_t> seed) {
  std::vector<std::int64_t> order = random_order(dataset, seed, "split_dataset_random");
  return split_dataset(std::move(dataset), first_size, std::move(order));
}

std::vector<SubDatasetPair> get_cross_validation_datasets(DatasetPtr dataset, std::int64_t n_folds,
                                                          std::vector<std::int64_t> order) {
  TANDEM_CHECK(dataset != nullptr, "get_cross_validation_datasets: the dataset is null");
  const std::int64_t n = dataset->size();
  TANDEM_CHECK(1 <= n_folds && n_folds <= n, "get_cross_validation_datasets: n_folds ", n_folds,
               " is out of range for a dataset of size ", n, " (needs 1 <= n_folds <= ", n, ")");
  if (order.empty()) {
    order.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) order[i] = i;
  }
  TANDEM_CHECK(static_cast<std::int64_t>(order.size()) == n, "get_cross_validation_datasets: the order has ",
               order.size(), " entries but the dataset has ", n, " examples");
  // As chainer: fold f is validation rows [n*f/k, n*(f+1)/k) of the order, taken from the last
  // fold backwards, each time rotating the order so that the fold sits at its end.
  std::vector<SubDatasetPair> splits;
  for (std::int64_t f = n_folds - 1; f >= 0; --f) {
    const std::int64_t test_size = n * (f + 1) / n_folds - n * f / n_folds;
    splits.push_back(split_dataset(dataset, n - test_size, order));
    std::vector<std::int64_t> rotated(order.end() - test_size, order.end());
    rotated.insert(rotated.end(), order.begin(), order.end() - test_size);
    order = std::move(rotated);
  }
  return splits;
}

std::vector<SubDatasetPair> get_cross_validation_datasets_random(DatasetPtr dataset, std::int64_t n_folds,
                                                                 std::optional<std::uint64_t> seed) {
  std::vector<std::int64_t> order = random_order(dataset, seed, "get_cross_validation_datasets_random");
  return get_cross_validation_datasets(std::move(dataset), n_folds, std::move(order));
}

}  // namespace tandem
