#include "data/concat_examples.h"

#include <algorithm>

#include "core/error.h"
#include "core/ops/shape_ops.h"

namespace tandem {

Example concat_examples(const std::vector<Example>& batch, std::optional<Device> device,
                        std::optional<double> padding) {
  TANDEM_CHECK(!batch.empty(), "concat_examples: the batch is empty (no examples to stack)");
  const Example& first = batch[0];
  const std::size_t num_fields = first.size();
  TANDEM_CHECK(num_fields > 0, "concat_examples: example 0 has no fields");
  for (std::size_t f = 0; f < num_fields; ++f)
    TANDEM_CHECK(first[f].defined(), "concat_examples: field ", f, " of example 0 is undefined");

  for (std::size_t j = 1; j < batch.size(); ++j) {
    const Example& example = batch[j];
    TANDEM_CHECK(example.size() == num_fields, "concat_examples: example ", j, " has ", example.size(),
                 " field(s) but example 0 has ", num_fields);
    for (std::size_t f = 0; f < num_fields; ++f) {
      const Tensor& x = example[f];
      const Tensor& x0 = first[f];
      TANDEM_CHECK(x.defined(), "concat_examples: field ", f, " of example ", j, " is undefined");
      const bool same_shape = padding ? x.dim() == x0.dim() : x.shape() == x0.shape();
      TANDEM_CHECK(same_shape && x.dtype() == x0.dtype() && x.device() == x0.device(), "concat_examples: field ",
                   f, " of example ", j, " is ", x.description(), " but in example 0 it is ", x0.description(),
                   padding ? " (with padding, the dtype, device and number of axes must agree)" : "");
    }
  }

  const auto k = static_cast<std::int64_t>(batch.size());
  Example out;
  out.reserve(num_fields);
  for (std::size_t f = 0; f < num_fields; ++f) {
    const Tensor& x0 = first[f];
    Shape shape = x0.shape();
    if (padding) {
      for (const Example& example : batch)
        for (std::size_t d = 0; d < shape.size(); ++d) shape[d] = std::max(shape[d], example[f].shape()[d]);
    }
    shape.insert(shape.begin(), k);

    if (padding) {
      Tensor stacked = full(shape, *padding, x0.dtype(), x0.device());
      for (std::int64_t j = 0; j < k; ++j) {
        const Tensor& x = batch[j][f];
        IndexList where{Index::at(j)};
        for (std::int64_t extent : x.shape()) where.push_back(Index::range(0, extent));
        index_put_(stacked, where, x);
      }
      out.push_back(device ? stacked.to(*device) : stacked);
      continue;
    }

    // Each example is copied straight into its row of the result, on the target device.
    Tensor stacked(shape, x0.dtype(), device ? *device : x0.device());
    for (std::int64_t j = 0; j < k; ++j) {
      const Tensor& x = batch[j][f];
      stacked.slice_rows(j, j + 1).reshape(x.shape()).copy_(x);
    }
    out.push_back(stacked);
  }
  return out;
}

}  // namespace tandem
