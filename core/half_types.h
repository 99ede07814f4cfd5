// The host's 16-bit floating types, Eigen's bfloat16 and half (core/dtype.h names them bf16 and
// f16), and conversions between every dtype that round once, to nearest even.
//
// Eigen converts f32 to either type with one rounding to nearest even (IEEE's NaN, infinities,
// subnormals, and overflow to infinity included), and either type to f32 exactly. Wider sources
// need care: Eigen takes them through f32 first, and two roundings can land on the wrong side of
// a tie (an f64 just above a bf16 midpoint rounds to the midpoint in f32, then down to even).
// Here f64 and the integers go to f32 rounding to odd (core/round_to_odd.h), after which one
// rounding to the 16-bit type lands where a rounding of the exact value would.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/round_to_odd.h"

namespace tandem {

using bfloat16 = Eigen::bfloat16;
using half = Eigen::half;

template <typename T>
constexpr bool is_half_type() {
  return std::is_same<T, bfloat16>::value || std::is_same<T, half>::value;
}

// x as To, rounded once to nearest even (NaN stays NaN; bool is 0 or 1; a NaN or out-of-range
// value converted to an integer type is undefined, as in C++).
template <typename To, typename From>
inline To convert_scalar(From x) {
  if constexpr (std::is_same<To, From>::value) {
    return x;
  } else if constexpr (std::is_same<To, bool>::value) {
    if constexpr (is_half_type<From>()) return static_cast<float>(x) != 0.0f;
    else return x != From(0);
  } else if constexpr (is_half_type<To>()) {
    if constexpr (std::is_same<From, bool>::value) return To(x ? 1.0f : 0.0f);
    else if constexpr (std::is_same<From, float>::value) return To(x);
    else if constexpr (is_half_type<From>()) return To(static_cast<float>(x));  // exact, then one rounding
    else if constexpr (std::is_same<From, double>::value) return To(round_to_odd_f32(x));
    else return To(round_to_odd_f32(static_cast<std::int64_t>(x)));  // the integer types
  } else if constexpr (is_half_type<From>()) {
    return static_cast<To>(static_cast<float>(x));  // exact in f32, then as from f32
  } else {
    return static_cast<To>(x);
  }
}

}  // namespace tandem
