// Embedding lookup.
#pragma once

#include <cstdint>
#include <optional>

#include "autograd/variable.h"

namespace tandem {
namespace functions {

// Chainer's embed_id: y[s, :] = W[x[s], :] for integer ids x (i32 or i64) of any shape S and a
// floating table W [V, D]; y has shape S + [D]. Ids equal to ignore_label give zero rows and
// no gradient; any other id outside [0, V) is an error naming embed_id, the id and V. The
// gradient of W accumulates over repeated ids; x gets none.
Variable embed_id(const Variable& x, const Variable& W, std::optional<std::int64_t> ignore_label = std::nullopt);

}  // namespace functions
}  // namespace tandem
