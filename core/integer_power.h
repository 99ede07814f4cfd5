// x ** y for integer tensors, exactly, the same on the CPU and the GPU (both backends include
// this header; core/host_device.h).
//
// Why not pow() in double, as before: double holds integers only up to 2^53, and CUDA's pow is
// not correctly rounded (2 ulp), so on the first GPU run an integer power came out one below
// the CPU's (a result like 2.9999999 truncated to 2). Repeated squaring is exact.
//
// Semantics, as NumPy's integer power: a result too large for T wraps modulo 2^bits (the
// squaring runs in the unsigned type, where wrapping is defined). A negative exponent gives
// 1 / x^|y| truncated toward zero, as integer division does: 1 for x = 1, -1 or 1 for x = -1,
// 0 for |x| > 1, and for x = 0 a division by zero, which the caller turns into an error.
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "core/host_device.h"

namespace tandem {

// The integer types: bool is integral to C++, but a power of booleans stays what it was
// (through double).
template <typename T>
constexpr bool kHasIntegerPower = std::is_integral<T>::value && !std::is_same<T, bool>::value;

// The result, or 0 with *zero_to_negative set when x = 0 and y < 0.
template <typename T>
TANDEM_HOST_DEVICE inline T integer_power(T x, T y, bool* zero_to_negative) {
  static_assert(kHasIntegerPower<T>, "integer_power: integer types other than bool only");
  if (y < 0) {
    if (x == 0) {
      *zero_to_negative = true;
      return T(0);
    }
    if (x == 1) return T(1);
    if (x == T(-1)) return (y % 2 == 0) ? T(1) : T(-1);
    return T(0);
  }
  using U = typename std::make_unsigned<T>::type;
  U base = static_cast<U>(x), result = 1;
  for (U e = static_cast<U>(y); e != 0; e >>= 1) {
    if (e & 1u) result = static_cast<U>(result * base);
    base = static_cast<U>(base * base);
  }
  return static_cast<T>(result);
}

// The error both backends raise for x = 0, y < 0.
constexpr const char* kZeroToNegativePower = "pow: integer 0 to a negative power (a division by zero)";

// Whether a scalar exponent (pow_scalar takes a double) is a whole number that T holds: such
// a power of an integer tensor is computed exactly, any other through pow() in double.
template <typename T>
inline bool is_integer_exponent(double p) {
  return std::floor(p) == p && p >= static_cast<double>(std::numeric_limits<T>::min()) &&
         p < -static_cast<double>(std::numeric_limits<T>::min());  // 2^(bits-1), exactly
}

}  // namespace tandem
