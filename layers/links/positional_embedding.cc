#include "layers/links/positional_embedding.h"

#include "autograd/functions/arithmetic.h"
#include "autograd/functions/array.h"

namespace tandem {

PositionalEmbedding::PositionalEmbedding(std::int64_t max_length, std::int64_t dim, initializers::Initializer initialW,
                                         DType dtype)
    : max_length_(max_length), dim_(dim) {
  TANDEM_CHECK(max_length > 0 && dim > 0, "PositionalEmbedding: max_length and dim must be positive, got ",
               max_length, " and ", dim);
  if (!initialW) initialW = initializers::normal(0.02);
  add_param("W", initialW({max_length, dim}, dtype));
}

Variable PositionalEmbedding::forward(const Variable& x) {
  TANDEM_CHECK(x.defined() && x.dim() == 3 && x.shape()[2] == dim_, "PositionalEmbedding: input must be [B, T, ",
               dim_, "], got ", x.defined() ? x.description() : std::string("undefined"));
  const std::int64_t T = x.shape()[1];
  TANDEM_CHECK(T >= 1 && T <= max_length_, "PositionalEmbedding: a sequence of ", T, " positions (input ",
               x.description(), ") needs 1 <= T <= max_length ", max_length_);
  const Variable& W = param("W");
  const Variable positions = T == max_length_ ? W : functions::split_axis(W, std::vector<std::int64_t>{T}, 0)[0];
  return functions::add(x, positions);  // [B, T, dim] + [T, dim]: broadcast over the batch
}

}  // namespace tandem
