#include "core/dtype.h"

#include "core/error.h"

namespace tandem {

void fail_unknown_dtype(DType dtype, const char* operation) {
  TANDEM_FAIL(operation, ": unknown dtype ", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::boolean: return "bool";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
  }
  return "unknown";
}

DType dtype_by_name(const std::string& name, const char* what) {
  for (int d = 0; d <= static_cast<int>(kLastDType); ++d)
    if (name == dtype_name(static_cast<DType>(d))) return static_cast<DType>(d);
  TANDEM_FAIL(what, ": unknown dtype '", name, "' (f32, f64, bf16, f16, i32, i64 or bool)");
}

bool is_floating(DType dtype) { return dtype == DType::f32 || dtype == DType::f64 || is_half(dtype); }

bool is_half(DType dtype) { return dtype == DType::bf16 || dtype == DType::f16; }

}  // namespace tandem
