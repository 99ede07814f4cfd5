// The dataset interface (chainer.dataset.DatasetMixin): a fixed-size, random-access
// collection of examples, each a list of tensors ("fields"), e.g. {image, label}.
//
// Datasets are immutable once built and are shared as std::shared_ptr<const Dataset>, so
// splits, subsets and iterators can hold the same data without copying it. `get` may return
// views of the dataset's storage (TupleDataset does): treat examples as read-only, and clone
// one before modifying it in place.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace tandem {

// One example: one tensor per field, e.g. {image f32[784], label i32[]}.
using Example = std::vector<Tensor>;

class Dataset {
 public:
  virtual ~Dataset() = default;

  // The number of examples.
  virtual std::int64_t size() const = 0;
  // Example i, 0 <= i < size(); an index out of range is an error naming it and the size.
  virtual Example get(std::int64_t i) const = 0;
  // The examples at `indices` (repeats allowed), stacked field by field into one tensor per
  // field with a leading batch axis: concat_examples({get(i) for i in indices}). Subclasses
  // override it where they can gather faster. The result never shares storage with the
  // dataset. Empty `indices` give batch-axis-0 tensors (shaped from get(0); an error on an
  // empty dataset).
  virtual Example get_batch(const std::vector<std::int64_t>& indices) const;

 protected:
  // Throws tandem::Error "OP: index I is out of range for a dataset of size N" unless
  // 0 <= i < size().
  void check_index(std::int64_t i, const char* op) const;
};

using DatasetPtr = std::shared_ptr<const Dataset>;

}  // namespace tandem
