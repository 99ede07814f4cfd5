#include "layers/links/embed_id.h"

#include "autograd/functions/embed_id.h"

namespace tandem {

EmbedID::EmbedID(std::int64_t in_size, std::int64_t out_size, std::optional<std::int64_t> ignore_label,
                 initializers::Initializer initialW, DType dtype)
    : ignore_label_(ignore_label) {
  TANDEM_CHECK(in_size > 0 && out_size > 0, "EmbedID: sizes must be positive, got ", in_size, " x ", out_size);
  if (!initialW) initialW = initializers::normal(1.0);
  add_param("W", initialW({in_size, out_size}, dtype));
}

Variable EmbedID::forward(const Variable& ids) { return functions::embed_id(ids, param("W"), ignore_label_); }

}  // namespace tandem
