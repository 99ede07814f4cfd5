// VocabParallelEmbedding (Megatron-LM's): an EmbedID whose table rows (the vocabulary) are split
// across the ranks of a communicator. Rank r holds rows share_of(vocabulary, r). Every rank
// passes the same ids; each looks up the ids in its range (the others give zero vectors), and
// the partial lookups are summed over the ranks (reduce_from_parallel_region), so every rank gets
// the full embedding, equal to EmbedID's. The whole table is drawn with the initializer, as
// EmbedID(vocabulary, dim) draws it, and each rank keeps its rows. Ids outside
// [0, vocabulary) (other than ignore_label, which maps to zeros) are an error on every rank.
#pragma once

#include <optional>

#include "comm/tensor_parallel/parallel_region.h"
#include "comm/tensor_parallel/tensor_parallel_checkpoint.h"
#include "comm/transport/communicator.h"
#include "layers/initializers.h"
#include "layers/link.h"

namespace tandem {

class VocabParallelEmbedding : public Link, public TensorParallelLink {
 public:
  // initialW defaults to N(0, 1), as EmbedID's.
  VocabParallelEmbedding(CommunicatorPtr comm, std::int64_t vocabulary, std::int64_t dim,
                         std::optional<std::int64_t> ignore_label = std::nullopt,
                         initializers::Initializer initialW = nullptr, DType dtype = DType::f32);
  std::string type_name() const override { return "VocabParallelEmbedding"; }
  // ids: i32/i64 of any shape S (the same on every rank); returns S + [dim].
  Variable forward(const Variable& ids) override;
  Variable& W() { return param("W"); }  // [share.size(), dim]
  Share share() const { return share_; }
  Communicator& group() const override { return *comm_; }
  std::map<std::string, std::int64_t> split_axes() const override { return {{"W", 0}}; }

 protected:
  void check_loaded_shape(const std::string& name, const Shape& shape) override;

 private:
  CommunicatorPtr comm_;
  std::int64_t vocabulary_, dim_;
  std::optional<std::int64_t> ignore_label_;
  Share share_;
};

}  // namespace tandem
