// chainer.datasets.TupleDataset: parallel arrays zipped into examples. Field f of example i is
// row i of fields[f].
#pragma once

#include <cstdint>
#include <vector>

#include "data/dataset.h"

namespace tandem {

class TupleDataset : public Dataset {
 public:
  // Every field's first axis is the example axis; all fields must have the same length along
  // it (an error naming the fields' shapes otherwise), and there must be at least one field.
  // The tensors are held, not copied.
  explicit TupleDataset(std::vector<Tensor> fields);

  std::int64_t size() const override { return size_; }
  // Views into the fields (no copy): field f of the result is fields[f][i], shaped like
  // fields[f] without its leading axis (a 0-d tensor for a 1-d field).
  Example get(std::int64_t i) const override;
  // One copy per field; runs of consecutive indices are copied as one block.
  Example get_batch(const std::vector<std::int64_t>& indices) const override;

  const std::vector<Tensor>& fields() const { return fields_; }
  std::size_t num_fields() const { return fields_.size(); }

 private:
  std::vector<Tensor> fields_;
  std::int64_t size_ = 0;
};

}  // namespace tandem
