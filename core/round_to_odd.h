// Rounding to f32 "to odd": toward zero, then the last significand bit set when that was inexact.
// A value rounded so and then rounded once more, to nearest even, to a format of at most
// 24 - 2 significant bits lands where one rounding of the exact value would: the odd bit keeps
// "above the midpoint" from turning into "on it". tandem converts f64 and the integers to bf16 and
// f16 this way (core/half_types.h, cuda/half_types.cuh); host and device share the code.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace tandem {

TANDEM_HOST_DEVICE inline float round_to_odd_f32(double x) {
  float f = static_cast<float>(x);  // to nearest even
  if (x != x || static_cast<double>(f) == x) return f;  // NaN, or exact
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  // f is not zero here (zero would be exact or nearer zero than x). Rounded away from zero: one
  // step back toward zero (also from infinity to the largest finite value).
  const double magnitude_f = f < 0 ? -static_cast<double>(f) : static_cast<double>(f);
  const double magnitude_x = x < 0 ? -x : x;
  if (magnitude_f > magnitude_x) bits -= 1;
  bits |= 1;
  std::memcpy(&f, &bits, sizeof bits);
  return f;
}

TANDEM_HOST_DEVICE inline float round_to_odd_f32(std::int64_t x) {
  const bool negative = x < 0;
  // The magnitude as unsigned (INT64_MIN's too).
  const std::uint64_t u = negative ? std::uint64_t(0) - static_cast<std::uint64_t>(x) : static_cast<std::uint64_t>(x);
  int length = 0;
  for (std::uint64_t v = u; v != 0; v >>= 1) ++length;
  float magnitude;
  if (length <= 24) {
    magnitude = static_cast<float>(u);  // exact
  } else {
    const int shift = length - 24;
    const std::uint64_t top = u >> shift;
    const bool inexact = (u & ((std::uint64_t(1) << shift) - 1)) != 0;
    // 24 bits times a power of two: exact.
    magnitude = static_cast<float>(top | (inexact ? 1u : 0u)) * static_cast<float>(std::uint64_t(1) << shift);
  }
  return negative ? -magnitude : magnitude;
}

}  // namespace tandem
