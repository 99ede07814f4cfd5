// The 16-bit floating dtypes bf16 and f16 (core/dtype.h, core/half_types.h): every conversion
// rounds once to nearest even, as IEEE 754 says, checked against references written from the
// definition rather than from the conversion code:
//   - f32 -> bf16 and f32 -> f16 over all 2^32 f32 bit patterns (every 61st significand under the
//     sanitizers, TANDEM_TEST_SHORT), against a rounding done on the significand as integers,
//     itself checked on a sample against a rounding done in f64 arithmetic (ilogb, floor);
//   - bf16 and f16 -> f32 over all 2^16 patterns, against the format's formula;
//   - f64, the integers and the other 16-bit type -> bf16 and f16, where two roundings (through f32)
//     would differ from one: values just above and below the 16-bit midpoints;
// and the tensor operations that only move bits (fill, copies, views, concat, where, printing).
// The arithmetic on 16-bit tensors: half_ops_test.cc.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/half_types.h"
#include "core/ops.h"

using namespace tandem;

namespace {

// A 16-bit floating format: significant bits (the implicit one included), the exponent of its
// smallest normal number and its largest finite value.
struct Format {
  const char* name;
  DType dtype;
  int precision;
  int min_exponent;
  double max_finite;
};
const Format kBf16{"bf16", DType::bf16, 8, -126, std::ldexp(255.0, 120)};
const Format kF16{"f16", DType::f16, 11, -14, 65504.0};

// x rounded to the format, to nearest even, in f64 arithmetic: the multiple of the format's
// quantum at x's magnitude nearest to x (ties to an even multiple), infinity past the largest
// finite value. Exact for every x whose quotient by the quantum f64 holds exactly (all f32 and
// bf16/f16 values, and the f64 test values below).
double round_by_value(double x, const Format& f) {
  if (std::isnan(x) || std::isinf(x)) return x;
  const double a = std::fabs(x);
  const int e = a == 0 ? f.min_exponent : std::max(std::ilogb(a), f.min_exponent);
  const double quantum = std::ldexp(1.0, e - (f.precision - 1));
  const double q = a / quantum;
  double k = std::floor(q);
  const double rest = q - k;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(k, 2.0) != 0)) k += 1;
  double r = k * quantum;
  if (r > f.max_finite) r = std::numeric_limits<double>::infinity();
  return std::copysign(r, x);
}

// 2^e for the exponents the f32 patterns need, from a table (ldexp is slow over 2^32 values).
double power_of_two(int e) {
  static const std::vector<double> table = [] {
    std::vector<double> t(512);
    for (int i = 0; i < 512; ++i) t[static_cast<std::size_t>(i)] = std::ldexp(1.0, i - 256);
    return t;
  }();
  return table[static_cast<std::size_t>(e + 256)];
}

// The f32 with these bits rounded to the format: the significand as an integer m (value
// m * 2^(e - 23)), cut at the format's quantum, rounded up when the rest is above half of it or
// exactly half with an odd quotient.
double round_f32_bits(std::uint32_t bits, const Format& f) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  if (std::isnan(x) || std::isinf(x)) return x;
  const std::uint32_t u = bits & 0x7fffffffu;
  const int biased = static_cast<int>(u >> 23);
  const std::uint64_t m = biased == 0 ? (u & 0x7fffffu) : ((u & 0x7fffffu) | 0x800000u);
  const int e = biased == 0 ? -126 : biased - 127;
  const int scale = std::max(e, f.min_exponent) - (f.precision - 1);  // the quantum is 2^scale
  const int shift = 23 - e + scale;                                   // bits of m below the quantum
  std::uint64_t k = 0;
  if (shift < 64) {
    k = m >> shift;
    const std::uint64_t rest = m & ((std::uint64_t(1) << shift) - 1);
    const std::uint64_t half = std::uint64_t(1) << (shift - 1);
    if (rest > half || (rest == half && (k & 1))) ++k;
  }
  double r = static_cast<double>(k) * power_of_two(scale);
  if (r > f.max_finite) r = std::numeric_limits<double>::infinity();
  return (bits >> 31) ? -r : r;
}

// The value of a 16-bit pattern, from the format's definition.
double bf16_value(std::uint16_t bits) {
  const std::uint32_t wide = std::uint32_t(bits) << 16;  // bf16 is the top half of an f32
  float x;
  std::memcpy(&x, &wide, sizeof x);
  return x;
}
double f16_value(std::uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 10) & 0x1f, fraction = bits & 0x3ff;
  double v;
  if (exponent == 0) v = std::ldexp(fraction, -24);
  else if (exponent == 31) v = fraction ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else v = std::ldexp(1024 + fraction, exponent - 25);
  return sign ? -v : v;
}

// Same value (NaN matches NaN), and the same sign (so -0 is not 0, and NaN keeps its sign).
bool same(double got, double want) {
  if (std::signbit(got) != std::signbit(want)) return false;
  return std::isnan(want) ? std::isnan(got) : got == want;
}

std::vector<std::uint16_t> bits_of(const Tensor& t) {
  REQUIRE(dtype_size(t.dtype()) == 2);
  std::vector<std::uint16_t> out(static_cast<std::size_t>(t.numel()));
  std::memcpy(out.data(), t.raw_data(), t.nbytes());
  return out;
}

Tensor from_bits(const std::vector<std::uint16_t>& bits, DType dtype) {
  return from_buffer(bits.data(), {static_cast<std::int64_t>(bits.size())}, dtype);
}

// An integer rounded to the format in integer arithmetic: its top `precision` bits, rounded up
// when the rest is above half or exactly half with an odd top (integers are never subnormal).
double round_integer(std::int64_t v, const Format& f) {
  const std::uint64_t u = v < 0 ? std::uint64_t(0) - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  int length = 0;
  for (std::uint64_t w = u; w != 0; w >>= 1) ++length;
  double r = static_cast<double>(u);
  if (length > f.precision) {
    const int shift = length - f.precision;
    std::uint64_t k = u >> shift;
    const std::uint64_t rest = u & ((std::uint64_t(1) << shift) - 1), half = std::uint64_t(1) << (shift - 1);
    if (rest > half || (rest == half && (k & 1))) ++k;
    r = std::ldexp(static_cast<double>(k), shift);
  }
  if (r > f.max_finite) r = std::numeric_limits<double>::infinity();
  return v < 0 ? -r : r;
}

double value_of(std::uint16_t bits, DType dtype) { return dtype == DType::bf16 ? bf16_value(bits) : f16_value(bits); }

// value_of for every pattern of a format, from a table (the exhaustive test's hot loop).
const std::vector<double>& values_of_every_pattern(DType dtype) {
  static const auto make = [](DType d) {
    std::vector<double> t(1 << 16);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = value_of(static_cast<std::uint16_t>(i), d);
    return t;
  };
  static const std::vector<double> bf16 = make(DType::bf16), f16 = make(DType::f16);
  return dtype == DType::bf16 ? bf16 : f16;
}

bool short_run() {
  const char* s = std::getenv("TANDEM_TEST_SHORT");
  return s != nullptr && std::string(s) == "1";
}

}  // namespace

TEST_CASE("half: dtype names, sizes and kinds") {
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_size(DType::f16) == 2);
  CHECK(std::string(dtype_name(DType::bf16)) == "bf16");
  CHECK(std::string(dtype_name(DType::f16)) == "f16");
  CHECK(is_floating(DType::bf16));
  CHECK(is_half(DType::f16));
  CHECK_FALSE(is_half(DType::f32));
  CHECK(dtype_of<bfloat16>() == DType::bf16);
  CHECK(dtype_of<half>() == DType::f16);
  CHECK(Tensor({2, 3}, DType::bf16).nbytes() == 12);
  CHECK(Tensor({2, 3}, DType::f16).description() == "f16[2, 3]");
}

TEST_CASE("half: the integer reference agrees with the f64 one on a sample of f32 patterns") {
  for (const Format* f : {&kBf16, &kF16}) {
    INFO(f->name);
    for (std::uint64_t b = 0; b < (std::uint64_t(1) << 32); b += 99991) {
      const auto bits = static_cast<std::uint32_t>(b);
      float x;
      std::memcpy(&x, &bits, sizeof x);
      INFO("bits 0x" << std::hex << bits);
      REQUIRE(same(round_f32_bits(bits, *f), round_by_value(x, *f)));
    }
  }
}

TEST_CASE("half: f32 -> bf16 and f16 over every f32 bit pattern round once to nearest even") {
  // The patterns by sign and exponent (512 classes of 2^23 significands), so that the
  // reference's quantum and shift are worked out once per class: round_f32_bits, unrolled.
  // Every 61st significand under the sanitizers (an odd stride meets every low-bit residue).
  const std::uint32_t stride = short_run() ? 61 : 1;
  const std::int64_t n = ((std::int64_t(1) << 23) + stride - 1) / stride;
  std::vector<std::uint32_t> patterns(static_cast<std::size_t>(n));
  std::uint64_t checked = 0;
  for (std::uint32_t klass = 0; klass < 512; ++klass) {
    const bool negative = (klass >> 8) != 0;
    const int biased = static_cast<int>(klass & 0xff);
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i)
      patterns[static_cast<std::size_t>(i)] = (klass << 23) | static_cast<std::uint32_t>(i * stride);
    const Tensor x = from_buffer(patterns.data(), {n}, DType::f32);
    for (const Format* f : {&kBf16, &kF16}) {
      const Tensor y = x.to(f->dtype);
      const auto* got = static_cast<const std::uint16_t*>(y.raw_data());
      const std::vector<double>& decoded = values_of_every_pattern(f->dtype);
      const int e = biased == 0 ? -126 : biased - 127;
      const std::uint32_t lead = biased == 0 ? 0 : 0x800000u;
      const int scale = std::max(e, f->min_exponent) - (f->precision - 1);
      const int shift = 23 - e + scale;
      const double quantum = power_of_two(scale);
      std::atomic<std::int64_t> first_bad{-1};
#pragma omp parallel for schedule(static)
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint32_t fraction = patterns[static_cast<std::size_t>(i)] & 0x7fffffu;
        const double value = decoded[got[i]];
        bool good;
        if (biased == 255) {  // infinity, or NaN
          good = fraction == 0 ? std::isinf(value) : std::isnan(value);
        } else {
          const std::uint64_t m = lead | fraction;
          std::uint64_t k = 0;
          if (shift < 64) {
            k = m >> shift;
            const std::uint64_t rest = m & ((std::uint64_t(1) << shift) - 1), half = std::uint64_t(1) << (shift - 1);
            if (rest > half || (rest == half && (k & 1))) ++k;
          }
          double want = static_cast<double>(k) * quantum;
          if (want > f->max_finite) want = std::numeric_limits<double>::infinity();
          good = value == (negative ? -want : want);
        }
        if (!good || std::signbit(value) != negative) {
          std::int64_t none = -1;
          first_bad.compare_exchange_strong(none, i);
        }
      }
      if (first_bad >= 0) {
        const auto i = static_cast<std::size_t>(first_bad.load());
        float v;
        std::memcpy(&v, &patterns[i], sizeof v);
        FAIL(f->name << ": f32 bits 0x" << std::hex << patterns[i] << std::dec << " (" << v << ") became bits 0x"
                     << std::hex << got[i] << std::dec << " = " << value_of(got[i], f->dtype) << ", want "
                     << round_f32_bits(patterns[i], *f));
      }
    }
    checked += static_cast<std::uint64_t>(n);
  }
  CHECK(checked == 512 * static_cast<std::uint64_t>(n));
}

TEST_CASE("half: bf16 and f16 -> f32 and f64 over every 16-bit pattern are exact") {
  std::vector<std::uint16_t> all(1 << 16);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  for (const Format* f : {&kBf16, &kF16}) {
    INFO(f->name);
    const Tensor h = from_bits(all, f->dtype);
    const std::vector<float> as_f32 = h.to(DType::f32).to_vector<float>();
    const std::vector<double> as_f64 = h.to(DType::f64).to_vector<double>();
    for (std::size_t i = 0; i < all.size(); ++i) {
      INFO("bits 0x" << std::hex << i);
      const double want = value_of(all[i], f->dtype);
      REQUIRE(same(as_f32[i], want));
      REQUIRE(same(as_f64[i], want));
    }
    // And back: each value is its own rounding (NaN stays a NaN of the same sign).
    const std::vector<std::uint16_t> back = bits_of(h.to(DType::f32).to(f->dtype));
    const std::vector<std::uint16_t> back64 = bits_of(h.to(DType::f64).to(f->dtype));
    for (std::size_t i = 0; i < all.size(); ++i) {
      INFO("bits 0x" << std::hex << i);
      REQUIRE(same(value_of(back[i], f->dtype), value_of(all[i], f->dtype)));
      REQUIRE(same(value_of(back64[i], f->dtype), value_of(all[i], f->dtype)));
    }
  }
}

TEST_CASE("half: f64 -> bf16 and f16 rounds once, also just beside the midpoints") {
  // Two roundings (f64 -> f32 -> 16 bits) go wrong exactly here: a value a little above a
  // midpoint of the 16-bit format rounds to the midpoint in f32, then to even (down).
  std::mt19937_64 rng(7);
  for (const Format* f : {&kBf16, &kF16}) {
    INFO(f->name);
    std::vector<double> xs = {0.0, -0.0, 1.0, -1.0, f->max_finite, -f->max_finite, std::ldexp(1.0, f->min_exponent),
                              std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                              std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::quiet_NaN(),
                              1e300, -1e300, 1e-300, -1e-300, std::numeric_limits<double>::denorm_min()};
    // The midpoints between neighbours a and b of the format, then one f64 ulp either side.
    const double top = f->max_finite + std::ldexp(1.0, std::ilogb(f->max_finite) - f->precision);  // toward inf
    xs.push_back(top);
    xs.push_back(std::nextafter(top, 0.0));
    std::uniform_int_distribution<int> exponent(f->min_exponent - f->precision - 2, std::ilogb(f->max_finite));
    std::uniform_int_distribution<int> significand(0, (1 << (f->precision - 1)) - 1);
    for (int i = 0; i < 20000; ++i) {
      const int e = exponent(rng);
      const double a = std::ldexp(double((1 << (f->precision - 1)) + significand(rng)), e - (f->precision - 1));
      const double mid = a + std::ldexp(1.0, std::max(e, f->min_exponent) - f->precision);
      for (double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e308), a, -mid,
                       -std::nextafter(mid, 1e308), std::nextafter(mid, 1e308) * (1 + 1e-12)})
        xs.push_back(x);
    }
    std::uniform_real_distribution<double> anywhere(-70000.0, 70000.0);
    for (int i = 0; i < 20000; ++i) xs.push_back(anywhere(rng));
    const std::vector<std::uint16_t> got = bits_of(from_vector<double>(xs).to(f->dtype));
    for (std::size_t i = 0; i < xs.size(); ++i) {
      INFO("x = " << std::hexfloat << xs[i]);
      REQUIRE(same(value_of(got[i], f->dtype), round_by_value(xs[i], *f)));
    }
    // A filled tensor rounds its f64 value the same way.
    for (double x : {xs[xs.size() / 2], xs[xs.size() / 3]}) {
      INFO("fill " << std::hexfloat << x);
      REQUIRE(same(value_of(bits_of(full({3}, x, f->dtype))[2], f->dtype), round_by_value(x, *f)));
    }
  }
}

TEST_CASE("half: integers -> bf16 and f16 round once; bf16 <-> f16 over every pattern") {
  for (const Format* f : {&kBf16, &kF16}) {
    INFO(f->name);
    std::vector<std::int64_t> ints = {0, 1, -1, 255, 257, 65519, 65520, -65520, 2049, 4097, (1 << 24) + 1,
                                      std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min()};
    // 2^60 + 2^52 + 1 lies just above a bf16 midpoint; through f64 it would land on it.
    ints.push_back((std::int64_t(1) << 60) + (std::int64_t(1) << 52) + 1);
    ints.push_back(-((std::int64_t(1) << 60) + (std::int64_t(1) << 52) + 1));
    std::mt19937_64 rng(11);
    for (int i = 0; i < 5000; ++i) ints.push_back(static_cast<std::int64_t>(rng()) >> (rng() % 63));
    const std::vector<std::uint16_t> got = bits_of(from_vector<std::int64_t>(ints).to(f->dtype));
    for (std::size_t i = 0; i < ints.size(); ++i) {
      INFO("x = " << ints[i]);
      const double want = round_integer(ints[i], *f);
      REQUIRE(same(value_of(got[i], f->dtype), want));
    }
    std::vector<std::int32_t> small = {0, 7, -7, 65504, 65519, 65520, 16777217, -16777217};
    const std::vector<std::uint16_t> got32 = bits_of(from_vector<std::int32_t>(small).to(f->dtype));
    for (std::size_t i = 0; i < small.size(); ++i) {
      INFO("x = " << small[i]);
      REQUIRE(same(value_of(got32[i], f->dtype), round_by_value(small[i], *f)));
    }
  }
  std::vector<std::uint16_t> all(1 << 16);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  for (const auto& [from, to] : {std::pair<const Format*, const Format*>{&kBf16, &kF16}, {&kF16, &kBf16}}) {
    INFO(from->name << " -> " << to->name);
    const std::vector<std::uint16_t> got = bits_of(from_bits(all, from->dtype).to(to->dtype));
    for (std::size_t i = 0; i < all.size(); ++i) {
      INFO("bits 0x" << std::hex << i);
      REQUIRE(same(value_of(got[i], to->dtype), round_by_value(value_of(all[i], from->dtype), *to)));
    }
  }
  // To bool and the integers: through the exact value.
  const Tensor h = from_vector<float>({0.0f, -0.0f, 2.5f, -3.0f, 65504.0f}).to(DType::f16);
  CHECK(h.to(DType::boolean).to_vector<bool>() == std::vector<bool>{false, false, true, true, true});
  CHECK(h.to(DType::i32).to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 0, 2, -3, 65504});
  CHECK(h.to(DType::bf16).to(DType::i64).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0, 2, -3, 65536});
  CHECK(from_vector<bool>({true, false}).to(DType::bf16).to_vector<double>() == std::vector<double>{1, 0});
}

TEST_CASE("half: tensors of bf16 and f16 move bits: views, copies, concat, where, item, printing") {
  for (const Format* f : {&kBf16, &kF16}) {
    INFO(f->name);
    const Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).to(f->dtype);
    CHECK(x.dtype() == f->dtype);
    CHECK(transpose(x).to_vector<double>() == std::vector<double>{1, 4, 2, 5, 3, 6});
    CHECK(x.clone().to_vector<double>() == x.to_vector<double>());
    CHECK(x.reshape({3, 2}).slice_rows(1, 3).to_vector<double>() == std::vector<double>{3, 4, 5, 6});
    const Tensor both = concat({x, x}, 1);
    CHECK(both.dtype() == f->dtype);
    CHECK(both.to_vector<double>() == std::vector<double>{1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6});
    const Tensor cond = from_vector<bool>({true, false, true}, {3});
    CHECK(where(cond, x, zeros_like(x)).to_vector<double>() == std::vector<double>{1, 0, 3, 4, 0, 6});
    CHECK(full({}, 0.1, f->dtype).item() == round_by_value(0.1, *f));
    std::ostringstream printed;
    printed << from_vector<float>({0.5f, -2.0f}).to(f->dtype);
    CHECK(printed.str() == std::string("Tensor(") + f->name + "[2], [0.5, -2])");
  }
}

TEST_CASE("half: bf16 and f16 operands do not mix silently") {
  const Tensor x = ones({2}, DType::bf16);
  CHECK_THROWS_WITH(add(x, ones({2}, DType::f16)), Catch::Contains("different dtypes") && Catch::Contains("f16[2]"));
  CHECK_THROWS_WITH(add(x, ones({2})), Catch::Contains("different dtypes") && Catch::Contains("bf16[2]"));
}
