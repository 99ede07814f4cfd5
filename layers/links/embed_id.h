// EmbedID: a lookup table W [in_size, out_size] mapping integer ids to rows (Chainer's
// L.EmbedID). Ids equal to ignore_label map to zero vectors.
#pragma once

#include <optional>

#include "layers/initializers.h"
#include "layers/link.h"

namespace tandem {

class EmbedID : public Link {
 public:
  // initialW defaults to N(0, 1), as in Chainer.
  EmbedID(std::int64_t in_size, std::int64_t out_size, std::optional<std::int64_t> ignore_label = std::nullopt,
          initializers::Initializer initialW = nullptr, DType dtype = DType::f32);
  std::string type_name() const override { return "EmbedID"; }
  // ids: i32/i64 of any shape S; returns S + [out_size].
  Variable forward(const Variable& ids) override;
  Variable& W() { return param("W"); }

 private:
  std::optional<std::int64_t> ignore_label_;
};

}  // namespace tandem
