// bf16 and f16 operands are computed in f32: an operation widens its 16-bit operands to f32, runs
// its f32 kernel, and rounds each floating result back to the operands' dtype once (so sums and
// products accumulate in f32). This is the correct path on every backend; a backend's 16-bit
// kernel (oneDNN's, cuBLAS') may take an operation's place where it gives the same roundings.
#pragma once

#include "core/tensor.h"

namespace tandem::ops_detail {

// t in f32 when it is bf16 or f16; otherwise t itself (undefined stays undefined).
inline Tensor widen(const Tensor& t) { return t.defined() && is_half(t.dtype()) ? t.to(DType::f32) : t; }

// A result computed in f32 for operands of `dtype`, rounded back when that is a 16-bit type;
// results of other dtypes (indices, masks, f32 for f32 operands) as they are.
inline Tensor narrow(const Tensor& t, DType dtype) {
  return t.defined() && is_half(dtype) && t.dtype() == DType::f32 ? t.to(dtype) : t;
}

// An in-place result: `computed` (f32) rounded into `dst` (16-bit).
inline void narrow_into(Tensor& dst, const Tensor& computed) { dst.copy_(computed.to(dst.dtype())); }

}  // namespace tandem::ops_detail
