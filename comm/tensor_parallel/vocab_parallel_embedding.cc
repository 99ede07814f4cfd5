#include "comm/tensor_parallel/vocab_parallel_embedding.h"

#include "autograd/functions/embed_id.h"
#include "core/ops.h"

namespace tandem {

VocabParallelEmbedding::VocabParallelEmbedding(CommunicatorPtr comm, std::int64_t vocabulary, std::int64_t dim,
                                               std::optional<std::int64_t> ignore_label,
                                               initializers::Initializer initialW, DType dtype)
    : comm_(std::move(comm)), vocabulary_(vocabulary), dim_(dim), ignore_label_(ignore_label) {
  TANDEM_CHECK(comm_ != nullptr, "VocabParallelEmbedding: a communicator is required");
  TANDEM_CHECK(vocabulary >= comm_->size() && dim > 0, "VocabParallelEmbedding: the vocabulary (", vocabulary,
               ") must have at least one id per rank (", comm_->size(), " ranks) and dim (", dim, ") be positive");
  share_ = share_of(vocabulary, comm_->rank(), comm_->size());
  if (!initialW) initialW = initializers::normal(1.0);
  add_param("W", initialW({vocabulary, dim}, dtype).slice_rows(share_.begin, share_.end).clone());
}

void VocabParallelEmbedding::check_loaded_shape(const std::string& name, const Shape& shape) {
  const Shape expected{share_.size(), dim_};
  TANDEM_CHECK(name != "W" || shape == expected, "VocabParallelEmbedding: W on rank ",
               comm_->rank(), " of ", comm_->size(), " must be its ", share_.size(), " of ", vocabulary_, " rows [",
               share_.size(), ", ", dim_, "], got ", shape, " (a checkpoint split for another number of ranks?)");
}

Variable VocabParallelEmbedding::forward(const Variable& ids) {
  check_group_agrees("VocabParallelEmbedding", {vocabulary_, dim_});
  const Tensor& x = ids.data();
  TANDEM_CHECK(x.dtype() == DType::i32 || x.dtype() == DType::i64, "VocabParallelEmbedding: ids must be i32 or i64, "
               "got ", x.description());
  // Every rank sees the same ids: each checks them all, so a bad id is the same error everywhere.
  // (Conditions as 0/1 integers: AND is a product, OR a sum.)
  const auto flag = [](const Tensor& condition) { return condition.to(DType::i64); };
  const Tensor valid = ignore_label_ ? flag(not_equal(x, static_cast<double>(*ignore_label_)))
                                     : ones(x.shape(), DType::i64, x.device());
  const Tensor bad = mul(valid, add(flag(less(x, 0.0)), flag(greater_equal(x, static_cast<double>(vocabulary_)))));
  TANDEM_CHECK(sum(bad).item() == 0, "VocabParallelEmbedding: ids outside [0, ", vocabulary_, ")",
               ignore_label_ ? " (other than ignore_label)" : "", " in ", x.description());
  // This rank's rows: ids - begin where the id is in [begin, end), else -1 (a zero vector).
  const Tensor mine = mul(valid, mul(flag(greater_equal(x, static_cast<double>(share_.begin))),
                                     flag(less(x, static_cast<double>(share_.end)))));
  const Tensor local = where(equal(mine, 1.0), sub(x, static_cast<double>(share_.begin)), full_like(x, -1));
  const Variable partial = functions::embed_id(Variable(local), param("W"), -1);
  return functions::reduce_from_parallel_region(*comm_, partial);
}

}  // namespace tandem
