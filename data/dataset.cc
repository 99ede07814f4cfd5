#include "data/dataset.h"

#include "core/error.h"
#include "data/concat_examples.h"

namespace tandem {

void Dataset::check_index(std::int64_t i, const char* op) const {
  const std::int64_t n = size();
  TANDEM_CHECK(0 <= i && i < n, op, ": index ", i, " is out of range for a dataset of size ", n);
}

Example Dataset::get_batch(const std::vector<std::int64_t>& indices) const {
  if (indices.empty()) {
    TANDEM_CHECK(size() > 0, "Dataset::get_batch: cannot shape an empty batch of an empty dataset");
    Example batch = get(0);
    for (Tensor& field : batch) {
      Shape shape = field.shape();
      shape.insert(shape.begin(), 0);
      field = Tensor(shape, field.dtype(), field.device());
    }
    return batch;
  }
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (std::int64_t i : indices) {
    check_index(i, "Dataset::get_batch");
    examples.push_back(get(i));
  }
  return concat_examples(examples);
}

}  // namespace tandem
