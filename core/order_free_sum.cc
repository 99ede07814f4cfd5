#include "core/order_free_sum.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu/parallel.h"
#include "core/error.h"

namespace tandem {

namespace {

// 2^e for a normal exponent (-1022 <= e <= 1023), from its bits (std::ldexp is a library call).
inline double power_of_two(int e) {
  const std::uint64_t bits = static_cast<std::uint64_t>(e + 1023) << 52;
  double out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

inline bool normal_exponent(int e) { return e >= -1022 && e <= 1023; }

// The grid level of a nonzero finite x: the L with 2^(L*W) <= |x| < 2^((L+1)*W), rounded down.
inline std::int16_t level_of(double x) {
  std::uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const int field = static_cast<int>((bits >> 52) & 0x7ff);
  const int e = field != 0 ? field - 1023 : std::ilogb(x);  // 2^e <= |x| < 2^(e+1)
  const int w = OrderFreeSum::kLevelBits;
  return static_cast<std::int16_t>(e >= 0 ? e / w : -((-e + w - 1) / w));
}

// The part of x worth whole multiples of 2^e, truncated towards zero: exact (scaling by powers of
// two and truncation are), by multiplication where both scales are normal numbers.
inline double whole_multiples(double x, int e) {
  if (normal_exponent(e) && normal_exponent(-e)) return std::trunc(x * power_of_two(-e)) * power_of_two(e);
  return std::ldexp(std::trunc(std::ldexp(x, -e)), e);
}

// Elements per chunk of the parallel loops below (each element costs a few dozen operations).
constexpr std::int64_t kCost = 30, kGrain = 1 << 16;

}  // namespace

OrderFreeSum::OrderFreeSum(std::int64_t size)
    : top_(static_cast<std::size_t>(size), kEmpty), slices_(static_cast<std::size_t>(size) * kLevels, 0.0) {
  TANDEM_CHECK(size >= 0, "OrderFreeSum: negative size ", size);
}

void OrderFreeSum::clear() {
  std::fill(top_.begin(), top_.end(), kEmpty);
  std::fill(slices_.begin(), slices_.end(), 0.0);
}

// Moves element i's slices down to make `level` its top (level > top_[i]); slices that fall below
// the lowest kept level are dropped, as they would have been had the larger term come first.
void OrderFreeSum::raise_to(std::int64_t i, std::int16_t level) {
  double* s = element(i);
  if (top_[i] == kEmpty || level == kNonFinite || level - top_[i] >= kLevels) {
    std::fill(s, s + kLevels, 0.0);
  } else {
    const int d = level - top_[i];
    for (int k = kLevels - 1; k >= d; --k) s[k] = s[k - d];
    std::fill(s, s + d, 0.0);
  }
  top_[i] = level;
}

void OrderFreeSum::add_one(std::int64_t i, double x) {
  if (x == 0.0) return;
  double* s = element(i);
  if (!std::isfinite(x)) {
    if (top_[i] != kNonFinite) raise_to(i, kNonFinite);
    s[0] += x;  // IEEE: inf + inf = inf, inf - inf = NaN, NaN stays; in any order
    return;
  }
  if (top_[i] == kNonFinite) return;
  const std::int16_t level = level_of(x);
  if (top_[i] == kEmpty || level > top_[i]) raise_to(i, level);
  // Slice from the top level down: q is the part of the rest worth whole multiples of
  // 2^(L*W); scaling by powers of two, truncation and the subtraction are all exact.
  double rest = x;
  for (int k = 0; k < kLevels && rest != 0.0; ++k) {
    const double q = whole_multiples(rest, (top_[i] - k) * kLevelBits);
    s[k] += q;
    rest -= q;
  }
}

void OrderFreeSum::add(const float* values) {
  cpu::parallel_for(size(), kCost, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) add_one(i, static_cast<double>(values[i]));
  });
}

void OrderFreeSum::add(const double* values) {
  cpu::parallel_for(size(), kCost, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) add_one(i, values[i]);
  });
}

void OrderFreeSum::assign(const float* values) {
  cpu::parallel_for(size(), kCost, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      top_[i] = kEmpty;
      std::fill(element(i), element(i) + kLevels, 0.0);
      add_one(i, static_cast<double>(values[i]));
    }
  });
}

void OrderFreeSum::assign(const double* values) {
  cpu::parallel_for(size(), kCost, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      top_[i] = kEmpty;
      std::fill(element(i), element(i) + kLevels, 0.0);
      add_one(i, values[i]);
    }
  });
}

void OrderFreeSum::merge(const OrderFreeSum& other) {
  TANDEM_CHECK(other.size() == size(), "OrderFreeSum::merge: sizes differ (", size(), " and ", other.size(), ")");
  cpu::parallel_for(size(), kCost, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int16_t theirs = other.top_[i];
      if (theirs == kEmpty) continue;
      if (top_[i] == kEmpty || theirs > top_[i]) raise_to(i, theirs);
      double* s = element(i);
      const double* o = other.element(i);
      if (top_[i] == kNonFinite) {
        if (theirs == kNonFinite) s[0] += o[0];
        continue;
      }
      // Their slice k is at level theirs - k, ours at top_[i] - k.
      const int d = top_[i] - theirs;
      for (int k = d; k < kLevels; ++k) s[k] += o[k - d];
    }
  });
}

void OrderFreeSum::align_to(const std::vector<std::int16_t>& levels) {
  TANDEM_CHECK(static_cast<std::int64_t>(levels.size()) == size(), "OrderFreeSum::align_to: ", levels.size(),
               " levels for ", size(), " elements");
  cpu::parallel_for(size(), kCost, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      if (levels[i] == top_[i]) continue;
      TANDEM_CHECK(top_[i] == kEmpty || levels[i] > top_[i], "OrderFreeSum::align_to: element ", i, " is at level ",
                   top_[i], ", above the level ", levels[i], " it is to be aligned to");
      raise_to(i, levels[i]);
    }
  });
}

namespace {

template <typename T>
void round_all(const std::vector<double>& slices, std::int64_t n, double scale, T* out) {
  cpu::parallel_for(n, kCost, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const double* s = &slices[static_cast<std::size_t>(i) * OrderFreeSum::kLevels];
      double total = 0.0;
      for (int k = OrderFreeSum::kLevels - 1; k >= 0; --k) total += s[k];  // smallest first
      out[i] = static_cast<T>(total * scale);
    }
  });
}

}  // namespace

void OrderFreeSum::round_to(float* out, double scale) const { round_all(slices_, size(), scale, out); }
void OrderFreeSum::round_to(double* out, double scale) const { round_all(slices_, size(), scale, out); }

}  // namespace tandem
