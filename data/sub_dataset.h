// chainer.datasets.SubDataset and the split helpers built on it: views of a contiguous range
// of a (possibly reordered) base dataset. Nothing is copied; the base is shared.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "data/dataset.h"

namespace tandem {

class SubDataset : public Dataset {
 public:
  // Examples [start, finish) of `base`, or of `base` read in `order` when an order is given:
  // example i is base->get(order[start + i]) (base->get(start + i) without one). Requires
  // 0 <= start <= finish <= base->size(); a given order must have exactly base->size()
  // entries, each in [0, base->size()) (normally a permutation).
  SubDataset(DatasetPtr base, std::int64_t start, std::int64_t finish, std::vector<std::int64_t> order = {});

  std::int64_t size() const override { return finish_ - start_; }
  Example get(std::int64_t i) const override;
  // Maps the indices and forwards to the base's get_batch (keeping its fast gather).
  Example get_batch(const std::vector<std::int64_t>& indices) const override;

  // The base index of example i (no range check).
  std::int64_t base_index(std::int64_t i) const { return order_.empty() ? start_ + i : order_[start_ + i]; }
  const DatasetPtr& base() const { return base_; }
  std::int64_t start() const { return start_; }
  std::int64_t finish() const { return finish_; }
  const std::vector<std::int64_t>& order() const { return order_; }

 private:
  DatasetPtr base_;
  std::int64_t start_, finish_;
  std::vector<std::int64_t> order_;
};

using SubDatasetPair = std::pair<std::shared_ptr<SubDataset>, std::shared_ptr<SubDataset>>;

// Splits `dataset` into its first `first_size` examples and the rest (both read in `order` when
// one is given). Requires 0 <= first_size <= dataset->size().
SubDatasetPair split_dataset(DatasetPtr dataset, std::int64_t first_size, std::vector<std::int64_t> order = {});

// Like split_dataset, with a random order drawn from std::mt19937_64(seed) (see
// data/permutation.h). The same seed gives the same split; without a seed, one is drawn from
// tandem::global_generator() (so tandem::manual_seed makes it reproducible).
SubDatasetPair split_dataset_random(DatasetPtr dataset, std::int64_t first_size,
                                    std::optional<std::uint64_t> seed = std::nullopt);

// chainer.datasets.get_cross_validation_datasets: n_folds (train, validation) pairs whose
// validation parts are disjoint and together cover the dataset (read in `order` if given);
// fold sizes differ by at most one. Requires 1 <= n_folds <= dataset->size().
std::vector<SubDatasetPair> get_cross_validation_datasets(DatasetPtr dataset, std::int64_t n_folds,
                                                          std::vector<std::int64_t> order = {});
// The same with a random order, as split_dataset_random.
std::vector<SubDatasetPair> get_cross_validation_datasets_random(DatasetPtr dataset, std::int64_t n_folds,
                                                                 std::optional<std::uint64_t> seed = std::nullopt);

}  // namespace tandem
