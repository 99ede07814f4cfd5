// Element types. f32 is the working type; f64 exists for gradient checks; bf16 and f16 are the
// 16-bit floating types of reduced precision (bfloat16: f32's exponent with 8 significant bits;
// IEEE binary16: 11 significant bits, finite up to 65504); i32/i64 hold labels and indices;
// boolean holds masks and the results of comparisons (stored one byte each).
// The enum's values are part of the wire format (comm/transport/message.h): new dtypes go last.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

namespace tandem {

enum class DType : std::uint8_t { f32, f64, i32, i64, boolean, bf16, f16 };
constexpr DType kLastDType = DType::f16;

// Inline: every Tensor::nbytes() asks, on every call of every operation.
[[noreturn]] void fail_unknown_dtype(DType dtype, const char* operation);
inline std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::boolean: return 1;
    case DType::bf16: return 2;
    case DType::f16: return 2;
  }
  fail_unknown_dtype(dtype, "dtype_size");
}
const char* dtype_name(DType dtype);
// The dtype dtype_name calls `name`; any other name is an error that starts with `what` (the
// flag or field that held it) and lists the names.
DType dtype_by_name(const std::string& name, const char* what);
bool is_floating(DType dtype);  // f32, f64, bf16, f16
bool is_half(DType dtype);      // the 16-bit floating types, bf16 and f16
inline std::ostream& operator<<(std::ostream& out, DType dtype) { return out << dtype_name(dtype); }

}  // namespace tandem

// The 16-bit types' C++ types on the host are Eigen's (core/half_types.h includes them); CUDA code
// has its own (cuda/half_types.cuh).
namespace Eigen {
struct bfloat16;
struct half;
}  // namespace Eigen

namespace tandem {

// The C++ type that stores each dtype, and back.
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::f64; };
template <> struct DTypeOf<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct DTypeOf<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::boolean; };
template <> struct DTypeOf<Eigen::bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct DTypeOf<Eigen::half> { static constexpr DType value = DType::f16; };

template <typename T>
constexpr DType dtype_of() { return DTypeOf<T>::value; }

// The C++ type of each dtype in host code; a dispatch binds scalar_t through such a map
// (TANDEM_DISPATCH_ALL_OF; CUDA code passes its own map). The 16-bit types are complete only
// where core/half_types.h is included.
template <DType> struct HostScalar;
template <> struct HostScalar<DType::f32> { using type = float; };
template <> struct HostScalar<DType::f64> { using type = double; };
template <> struct HostScalar<DType::i32> { using type = std::int32_t; };
template <> struct HostScalar<DType::i64> { using type = std::int64_t; };
template <> struct HostScalar<DType::boolean> { using type = bool; };
template <> struct HostScalar<DType::bf16> { using type = Eigen::bfloat16; };
template <> struct HostScalar<DType::f16> { using type = Eigen::half; };

}  // namespace tandem

// Runs BODY with `scalar_t` bound to the C++ type of DTYPE. The _FLOAT variant accepts only
// f32/f64, _NUMERIC adds the integer types, _ALL adds boolean and the 16-bit types (their
// kernels include core/half_types.h); other dtypes throw an error naming OP_NAME (so a kernel
// not yet written for bf16 or f16 says so).
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

#define TANDEM_DTYPE_CASE_OF(MAP, enum_value, ...)                        \
  case ::tandem::DType::enum_value: {                                    \
    using scalar_t = typename MAP<::tandem::DType::enum_value>::type;    \
    __VA_ARGS__();                                                       \
    break;                                                               \
  }

// Every dtype, with scalar_t from MAP (a template over DType with a member `type`).
#define TANDEM_DISPATCH_ALL_OF(MAP, DTYPE, OP_NAME, ...)                                      \
  switch (DTYPE) {                                                                            \
    TANDEM_DTYPE_CASE_OF(MAP, f32, __VA_ARGS__)                                               \
    TANDEM_DTYPE_CASE_OF(MAP, f64, __VA_ARGS__)                                               \
    TANDEM_DTYPE_CASE_OF(MAP, i32, __VA_ARGS__)                                               \
    TANDEM_DTYPE_CASE_OF(MAP, i64, __VA_ARGS__)                                               \
    TANDEM_DTYPE_CASE_OF(MAP, boolean, __VA_ARGS__)                                           \
    TANDEM_DTYPE_CASE_OF(MAP, bf16, __VA_ARGS__)                                              \
    TANDEM_DTYPE_CASE_OF(MAP, f16, __VA_ARGS__)                                               \
    default:                                                                                  \
      TANDEM_FAIL(OP_NAME, ": unknown dtype");                                                \
  }

#define TANDEM_DISPATCH_ALL(DTYPE, OP_NAME, ...) TANDEM_DISPATCH_ALL_OF(::tandem::HostScalar, DTYPE, OP_NAME, __VA_ARGS__)
