// chainermn.datasets.create_empty_dataset: a dataset of the same length as another whose
// examples have no fields.
//
// For a rank of a model-parallel job that takes part in every iteration but reads no data (a
// middle stage of a pipeline, say): iterating an empty dataset with the same batch size gives
// that rank the same epochs, epoch_detail and end of data as the ranks that iterate the real
// one, without holding or reading it.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/transport/communicator.h"
#include "data/dataset.h"

namespace tandem {

class EmptyDataset final : public Dataset {
 public:
  // `size` examples, each with no fields; size >= 0.
  explicit EmptyDataset(std::int64_t size);

  std::int64_t size() const override { return size_; }
  // An example with no fields (an empty Example); i must be in [0, size()).
  Example get(std::int64_t i) const override;
  // An empty Example for any list of valid indices (including an empty list): a batch is one
  // stacked tensor per field, and there are none, so the batch carries no count. A rank that
  // needs the count takes it from its iterator (SerialIterator::next_indices()).
  Example get_batch(const std::vector<std::int64_t>& indices) const override;

 private:
  std::int64_t size_;
};

// An EmptyDataset of dataset->size() examples. Only the length is read: the result does not keep
// `dataset` alive and never touches its examples. A null dataset is an error.
DatasetPtr create_empty_dataset(const DatasetPtr& dataset);

// The same on every rank of `comm` with the length of the root's dataset, broadcast: only the
// root needs the dataset (the others pass null), so a rank that reads no data need not load it
// (ChainerMN's example loads it on every rank to learn its length). A collective: every rank
// calls it. A null dataset on the root is an error on every rank.
DatasetPtr create_empty_dataset(const DatasetPtr& dataset, Communicator& comm, int root = 0);

}  // namespace tandem
