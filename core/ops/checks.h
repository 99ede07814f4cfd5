// Operand checks shared by the front-end operations, with messages that name the operation
// and describe every tensor involved.
#pragma once

#include <initializer_list>

#include "core/tensor.h"

namespace tandem {
namespace ops_detail {

inline void check_defined(const Tensor& t, const char* op) {
  TANDEM_CHECK(t.defined(), op, ": got an undefined tensor");
}

// Same device and dtype for all operands (tandem never promotes types silently).
inline void check_compatible(std::initializer_list<const Tensor*> tensors, const char* op) {
  const Tensor& first = **tensors.begin();
  check_defined(first, op);
  for (const Tensor* t : tensors) {
    check_defined(*t, op);
    TANDEM_CHECK(t->device() == first.device(), op, ": operands are on different devices: ",
                 first.description(), " on ", first.device(), " and ", t->description(), " on ", t->device());
    TANDEM_CHECK(t->dtype() == first.dtype(), op, ": operands have different dtypes: ", first.description(),
                 " and ", t->description());
  }
}

// The arithmetic has no 16-bit kernels yet: bf16 and f16 tensors are stored, converted and moved
// (core/half_types.h), and computed on after a conversion to f32.
inline void check_not_half(const Tensor& t, const char* op) {
  TANDEM_CHECK(!is_half(t.dtype()), op, ": has no ", dtype_name(t.dtype()), " kernel yet (f32 and f64 have one), got ",
               t.description(), ": convert with .to(DType::f32)");
}

inline void check_floating(const Tensor& t, const char* op) {
  check_defined(t, op);
  check_not_half(t, op);
  TANDEM_CHECK(is_floating(t.dtype()), op, ": needs a floating tensor (f32 or f64), got ", t.description());
}

inline void check_numeric(const Tensor& t, const char* op) {
  check_defined(t, op);
  check_not_half(t, op);
  TANDEM_CHECK(t.dtype() != DType::boolean, op, ": not defined for bool tensors, got ", t.description());
}

}  // namespace ops_detail
}  // namespace tandem
