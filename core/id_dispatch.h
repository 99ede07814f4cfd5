// Id tensors (embedding lookups, scatter-adds) are i32 or i64: the backends' kernels are
// written once over the id type and called through with_ids.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace tandem {

// Calls f(const Id* ids) with ids' storage pointer (a device pointer for a CUDA tensor) typed
// by its dtype; any other dtype throws naming op.
template <typename F>
void with_ids(const Tensor& ids, const char* op, const F& f) {
  switch (ids.dtype()) {
    case DType::i32: f(ids.data<std::int32_t>()); return;
    case DType::i64: f(ids.data<std::int64_t>()); return;
    default: TANDEM_FAIL(op, ": ids must be i32 or i64, got ", ids.description());
  }
}

}  // namespace tandem
