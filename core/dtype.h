// Element types. f32 is the working type; f64 exists for gradient checks; i32/i64 hold labels
// and indices; boolean holds masks and the results of comparisons (stored one byte each).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

namespace tandem {

enum class DType : std::uint8_t { f32, f64, i32, i64, boolean };

// Inline: every Tensor::nbytes() asks, on every call of every operation.
[[noreturn]] void fail_unknown_dtype(DType dtype, const char* operation);
inline std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::boolean: return 1;
  }
  fail_unknown_dtype(dtype, "dtype_size");
}
const char* dtype_name(DType dtype);
bool is_floating(DType dtype);
inline std::ostream& operator<<(std::ostream& out, DType dtype) { return out << dtype_name(dtype); }

// The C++ type that stores each dtype, and back.
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::f64; };
template <> struct DTypeOf<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct DTypeOf<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::boolean; };

template <typename T>
constexpr DType dtype_of() { return DTypeOf<T>::value; }

}  // namespace tandem

// Runs BODY with `scalar_t` bound to the C++ type of DTYPE. The _FLOAT variant accepts only
// f32/f64, _NUMERIC adds the integer types, _ALL adds boolean; other dtypes throw an error
// naming OP_NAME.
#define TANDEM_DTYPE_CASE(enum_value, cpp_type, ...) \
  case ::tandem::DType::enum_value: {               \
    using scalar_t = cpp_type;                      \
    __VA_ARGS__();                                  \
    break;                                          \
  }

#define TANDEM_DISPATCH_FLOAT(DTYPE, OP_NAME, ...)                                            \
  switch (DTYPE) {                                                                            \
    TANDEM_DTYPE_CASE(f32, float, __VA_ARGS__)                                                \
    TANDEM_DTYPE_CASE(f64, double, __VA_ARGS__)                                               \
    default:                                                                                  \
      TANDEM_FAIL(OP_NAME, ": dtype ", ::tandem::dtype_name(DTYPE), " is not supported (needs f32 or f64)"); \
  }

#define TANDEM_DISPATCH_NUMERIC(DTYPE, OP_NAME, ...)                                          \
  switch (DTYPE) {                                                                            \
    TANDEM_DTYPE_CASE(f32, float, __VA_ARGS__)                                                \
    TANDEM_DTYPE_CASE(f64, double, __VA_ARGS__)                                               \
    TANDEM_DTYPE_CASE(i32, std::int32_t, __VA_ARGS__)                                         \
    TANDEM_DTYPE_CASE(i64, std::int64_t, __VA_ARGS__)                                         \
    default:                                                                                  \
      TANDEM_FAIL(OP_NAME, ": dtype ", ::tandem::dtype_name(DTYPE), " is not supported (needs a numeric dtype)"); \
  }

#define TANDEM_DISPATCH_ALL(DTYPE, OP_NAME, ...)                                              \
  switch (DTYPE) {                                                                            \
    TANDEM_DTYPE_CASE(f32, float, __VA_ARGS__)                                                \
    TANDEM_DTYPE_CASE(f64, double, __VA_ARGS__)                                               \
    TANDEM_DTYPE_CASE(i32, std::int32_t, __VA_ARGS__)                                         \
    TANDEM_DTYPE_CASE(i64, std::int64_t, __VA_ARGS__)                                         \
    TANDEM_DTYPE_CASE(boolean, bool, __VA_ARGS__)                                             \
    default:                                                                                  \
      TANDEM_FAIL(OP_NAME, ": unknown dtype");                                                \
  }
