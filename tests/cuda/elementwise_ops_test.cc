// The per-element functors of the CUDA element-wise kernels (cuda/elementwise_ops.cuh) run on
// the host against the CPU backend's unary / binary / cast / where (the reference), on edge
// values: +-0, +-1, NaN, +-inf, subnormals, the largest and smallest finite values, integer
// extremes, values where exp over- or underflows. Each functor is picked for an op exactly as
// cuda/elementwise.cu picks it (pow_scalar 2 -> Square, 0.5 -> Sqrt, ...).
//
// Bit for bit wherever both sides do the same IEEE operations. The exceptions, each checked as
// narrowly as it allows:
//  - exp, log, tanh, sigmoid, pow_scalar (floating point): the CPU evaluates them with Eigen's
//    vectorised approximations, the functors with the C library here and CUDA's libdevice on a
//    GPU. They agree to a few ulps (cpu_ulps) and exactly on NaN, infinities and zeros, except
//    where Eigen strays from IEEE (known_cpu_deviation: log of subnormals, exp's underflow, pow's
//    lost signs, and neg(+0) = +0): there the functors keep the IEEE / C library value, as CUDA
//    does. sqrt (and pow 0.5) is std::sqrt on the CPU, correctly rounded: compared bit for bit.
//  - scale_shift, x * a + b: GCC here (-march=native, -ffp-contract=fast) and nvcc on the GPU
//    may each contract it into a fused multiply-add; the test accepts either rounding.
//  - integer inputs on which the C++ expression is undefined (signed overflow in neg / abs /
//    square / + - *, a float-to-integer conversion out of range, as in pow or cast) are left
//    out: the CPU's result there is whatever the compiler makes of it (and UBSan's error under
//    --config=asan), the GPU's is the hardware's (wrap-around, saturation).
//  - integer division (BinaryOp::div, UnaryOp::rdiv_scalar on integers) is not a functor of
//    this header: it reports errors through a device flag, in cuda/elementwise.cu.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/backend.h"
#include "core/integer_power.h"
#include "core/tensor.h"
#include "cuda/elementwise_ops.cuh"

using namespace tandem;
namespace ops = tandem::cuda::ops;

namespace {

using I = std::int64_t;

Backend& cpu() { return backend_for(Device::cpu(), "elementwise_ops_test"); }

template <typename T>
constexpr bool kFloat = std::is_floating_point<T>::value;

// ---- tensors from and to host vectors (bool included) ----

template <typename T>
Tensor tensor_of(const std::vector<T>& v) {
  const Shape shape{static_cast<I>(v.size())};
  if constexpr (std::is_same<T, bool>::value) {
    return from_vector<bool>(v, shape, Device::cpu());
  } else {
    return from_vector(v, shape);
  }
}

template <typename T>
std::vector<T> values_of(const Tensor& t) {
  return t.to_vector<T>();
}

// ---- comparisons ----

template <typename T>
bool same_value(T a, T b) {
  if constexpr (kFloat<T>) {
    if (std::isnan(a) && std::isnan(b)) return true;  // IEEE fixes neither sign nor payload
    return std::memcmp(&a, &b, sizeof(T)) == 0;       // tells -0 from +0
  } else {
    return a == b;
  }
}

// The distance in units in the last place between two floats of the same sign class (the number
// of representable values between them); 0 for two NaNs, huge for a NaN and a number.
template <typename T>
std::uint64_t ulp_distance(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : ~std::uint64_t(0);
  using Bits = typename std::conditional<sizeof(T) == 4, std::int32_t, std::int64_t>::type;
  auto ordered = [](T x) {
    Bits bits;
    std::memcpy(&bits, &x, sizeof(T));
    // Sign-magnitude to a monotonic two's complement line (-0 and +0 both map to 0).
    return bits < 0 ? static_cast<std::int64_t>(std::numeric_limits<Bits>::min() - bits)
                    : static_cast<std::int64_t>(bits);
  };
  const std::int64_t x = ordered(a), y = ordered(b);
  return x > y ? static_cast<std::uint64_t>(x - y) : static_cast<std::uint64_t>(y - x);
}

// (std::vector<bool>'s elements are proxies: these overloads take them as bool.)
inline bool same_value(bool a, bool b) { return a == b; }

template <typename T>
std::string show(T v) {
  std::ostringstream s;
  if constexpr (std::is_same<T, bool>::value) {
    s << (v ? "true" : "false");
  } else if constexpr (kFloat<T>) {
    s.precision(std::numeric_limits<T>::max_digits10);
    s << v;
    if (v == 0 && std::signbit(v)) s << " (-0)";
  } else {
    s << static_cast<long long>(v);
  }
  return s.str();
}

// ---- edge values ----

template <typename T>
std::vector<T> float_edges() {
  using L = std::numeric_limits<T>;
  std::vector<T> v{T(0), T(-0.0), T(1), T(-1), T(0.5), T(-0.5), T(2), T(-2), T(3), T(-3), T(0.1), T(-0.1),
                   T(1) / T(3), T(-0.75), T(1.5), T(10), T(-10), T(20), T(-20), T(88), T(-88), T(89), T(-89),
                   T(100), T(-100), T(1e-3), T(-1e-7), T(1e10), T(-1e10), T(1e30), T(-1e30),
                   // the smallest normals, subnormals, the extremes, around 1
                   L::min(), -L::min(), L::min() / T(3), -L::min() / T(5), L::denorm_min(), -L::denorm_min(),
                   L::max(), L::lowest(), L::epsilon(), T(1) - L::epsilon(), T(1) + L::epsilon(),
                   L::infinity(), -L::infinity(), L::quiet_NaN(), -L::quiet_NaN()};
  if constexpr (std::is_same<T, double>::value) {
    for (double e : {700.0, -700.0, 710.0, -710.0, 745.0, -745.0, 750.0, -750.0, 1e300, -1e300}) v.push_back(e);
  }
  return v;
}

template <typename T>
std::vector<T> integer_edges() {
  using L = std::numeric_limits<T>;
  std::vector<T> v{T(0), T(1), T(-1), T(2), T(-2), T(3), T(-3), T(5), T(-7), T(10), T(100), T(-100), T(12345),
                   T(46340), T(46341), T(-46341), L::max(), L::min(), T(L::max() - 1), T(L::min() + 1),
                   T(L::max() / 2), T(L::min() / 2)};
  if constexpr (sizeof(T) == 8) {
    for (std::int64_t e : {std::int64_t(3037000499), std::int64_t(3037000500), std::int64_t(1) << 31,
                           -(std::int64_t(1) << 31), (std::int64_t(1) << 53) + 1, -((std::int64_t(1) << 53) + 1),
                           std::int64_t(1) << 62})
      v.push_back(static_cast<T>(e));
  }
  return v;
}

template <typename T>
std::vector<T> edges() {
  if constexpr (kFloat<T>) return float_edges<T>();
  else return integer_edges<T>();
}

// Floats for the functions the CPU approximates: the edges, then a sweep over many binades.
template <typename T>
std::vector<T> float_sweep() {
  std::vector<T> v = float_edges<T>();
  std::mt19937_64 engine(42);
  std::uniform_real_distribution<double> mantissa(-1, 1);
  std::uniform_int_distribution<int> exponent(-30, 12);
  for (int i = 0; i < 4000; ++i) v.push_back(static_cast<T>(std::ldexp(mantissa(engine), exponent(engine))));
  return v;
}

// ---- integer definedness: the inputs on which the C++ expressions are defined ----

// Whether the double r converts to the integer type T without overflow (truncation toward 0).
template <typename T>
bool fits(double r) {
  if (std::isnan(r)) return false;
  const double limit = std::ldexp(1.0, std::numeric_limits<T>::digits);  // 2^31 or 2^63
  return r < limit && std::trunc(r) >= -limit;
}

// The result of a + b, a - b, a * b in a wider type (for the overflow checks).
using Wide = __int128;

template <typename T>
bool fits_wide(Wide r) {
  return r >= static_cast<Wide>(std::numeric_limits<T>::min()) && r <= static_cast<Wide>(std::numeric_limits<T>::max());
}

// ---- the kernels' functor choice (cuda/elementwise.cu, unary_typed) ----

template <typename T, typename F>
std::vector<T> map(const F& f, const std::vector<T>& x) {
  std::vector<T> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = f(x[i]);
  return y;
}

template <typename T>
std::vector<T> kernel_unary(UnaryOp op, const std::vector<T>& x, double p0, double p1) {
  const T a = static_cast<T>(p0), b = static_cast<T>(p1);
  switch (op) {
    case UnaryOp::neg: return map(ops::Neg<T>(), x);
    case UnaryOp::abs: return map(ops::Abs<T>(), x);
    case UnaryOp::square: return map(ops::Square<T>(), x);
    case UnaryOp::sign: return map(ops::Sign<T>(), x);
    case UnaryOp::relu: return map(ops::Relu<T>(), x);
    case UnaryOp::clip: return map(ops::Clip<T>{a, b}, x);
    case UnaryOp::leaky_relu: return map(ops::LeakyRelu<T>{a}, x);
    case UnaryOp::scale_shift: return map(ops::ScaleShift<T>{a, b}, x);
    case UnaryOp::rsub_scalar: return map(ops::RsubScalar<T>{a}, x);
    default: break;
  }
  if constexpr (kFloat<T>) {
    switch (op) {
      case UnaryOp::exp: return map(ops::Exp<T>(), x);
      case UnaryOp::log: return map(ops::Log<T>(), x);
      case UnaryOp::tanh: return map(ops::Tanh<T>(), x);
      case UnaryOp::sigmoid: return map(ops::Sigmoid<T>(), x);
      case UnaryOp::sqrt: return map(ops::Sqrt<T>(), x);
      case UnaryOp::pow_scalar:
        if (p0 == 2) return map(ops::Square<T>(), x);
        if (p0 == 0.5) return map(ops::Sqrt<T>(), x);
        return map(ops::PowScalar<T>{a}, x);
      case UnaryOp::rdiv_scalar: return map(ops::RdivScalar<T>{a}, x);
      default: break;
    }
  } else {
    if (op == UnaryOp::pow_scalar) {
      // Whole exponents: the exact integer power (cuda/elementwise.cu's IntegerPowScalar).
      if constexpr (kHasIntegerPower<T>) {
        if (is_integer_exponent<T>(p0)) {
          const T e = static_cast<T>(p0);
          return map([e](T v) {
            bool zero_to_negative = false;
            return integer_power(v, e, &zero_to_negative);
          }, x);
        }
      }
      return map(ops::PowScalarInteger<T>{p0}, x);
    }
  }
  FAIL("no functor for unary op " << static_cast<int>(op));
  return {};
}

template <typename T>
std::vector<T> cpu_unary(UnaryOp op, const std::vector<T>& x, double p0, double p1) {
  const Tensor in = tensor_of(x);
  Tensor out(in.shape(), in.dtype());
  cpu().unary(op, in, out, p0, p1);
  return values_of<T>(out);
}

// The integer inputs of `op` on which the CPU's expression is defined.
template <typename T>
bool unary_defined(UnaryOp op, T x, double p0, double p1) {
  if constexpr (kFloat<T>) {
    return true;
  } else {
    const Wide w = x, a = static_cast<T>(p0), b = static_cast<T>(p1);
    switch (op) {
      case UnaryOp::neg:
      case UnaryOp::abs: return x != std::numeric_limits<T>::min();
      case UnaryOp::square: return fits_wide<T>(w * w);
      case UnaryOp::leaky_relu: return fits_wide<T>(w * a);
      case UnaryOp::scale_shift: return fits_wide<T>(w * a) && fits_wide<T>(w * a + b);
      case UnaryOp::rsub_scalar: return fits_wide<T>(a - w);
      case UnaryOp::pow_scalar: return fits<T>(std::pow(static_cast<double>(x), p0));
      default: return true;
    }
  }
}

struct Params {
  double p0, p1;
};

// Parameters per op (p0, p1 as the front ends pass them).
template <typename T>
std::vector<Params> unary_params(UnaryOp op) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  switch (op) {
    case UnaryOp::clip:
      if constexpr (kFloat<T>)
        return {{-1, 1}, {0, 0}, {-0.0, 0.0}, {-inf, 2}, {-2, inf}, {0.5, 0.75}, {nan, 1}, {-1, nan}};
      else return {{-1, 1}, {0, 0}, {-100, 12345}, {-2147483648.0, 2147483647.0}};
    case UnaryOp::leaky_relu:
      if constexpr (kFloat<T>) return {{0.2, 0}, {0, 0}, {-0.5, 0}, {1e-30, 0}, {inf, 0}, {nan, 0}};
      else return {{0.2, 0}, {2, 0}, {-3, 0}};
    case UnaryOp::scale_shift:
      if constexpr (kFloat<T>)
        return {{1, 0}, {1, 0.1}, {-1, 0}, {0, 0}, {0.1, -0.3},
                {3, 1e-8}, {1e30, -1e30}, {-0.0, -0.0}, {inf, 1}, {1, nan}};
      else return {{1, 0}, {2, -3}, {-1, 7}, {0, 5}};
    case UnaryOp::rsub_scalar:
      if constexpr (kFloat<T>) return {{0, 0}, {-0.0, 0}, {1, 0}, {-2.5, 0}, {inf, 0}, {nan, 0}};
      else return {{0, 0}, {1, 0}, {-1, 0}, {100, 0}};
    case UnaryOp::pow_scalar:
      if constexpr (kFloat<T>)
        return {{2, 0}, {0.5, 0}, {3, 0}, {-1, 0}, {0, 0}, {1, 0},
                {2.5, 0}, {-0.5, 0}, {-2, 0}, {1.0 / 3, 0}, {inf, 0}, {nan, 0}};
      else return {{2, 0}, {0.5, 0}, {3, 0}, {-1, 0}, {0, 0}, {1, 0}, {2.5, 0}, {-2, 0}};
    case UnaryOp::rdiv_scalar: return {{1, 0}, {-1, 0}, {0, 0}, {-0.0, 0}, {3, 0}, {inf, 0}, {nan, 0}};
    default: return {{0, 0}};
  }
}

const char* unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg: return "neg";
    case UnaryOp::exp: return "exp";
    case UnaryOp::log: return "log";
    case UnaryOp::tanh: return "tanh";
    case UnaryOp::sigmoid: return "sigmoid";
    case UnaryOp::relu: return "relu";
    case UnaryOp::sqrt: return "sqrt";
    case UnaryOp::abs: return "abs";
    case UnaryOp::square: return "square";
    case UnaryOp::sign: return "sign";
    case UnaryOp::pow_scalar: return "pow_scalar";
    case UnaryOp::clip: return "clip";
    case UnaryOp::leaky_relu: return "leaky_relu";
    case UnaryOp::scale_shift: return "scale_shift";
    case UnaryOp::rsub_scalar: return "rsub_scalar";
    case UnaryOp::rdiv_scalar: return "rdiv_scalar";
    case UnaryOp::gelu: return "gelu";
  }
  return "?";
}

// The ops that the CPU computes with Eigen's vectorised approximations (exp, log, tanh, sigmoid,
// pow), where the functors call the C library (host) or CUDA's libdevice (GPU). sqrt is exact on
// both (core/cpu/elementwise.cc does not use Eigen's fast packet sqrt).
bool is_approximate_on_cpu(UnaryOp op) {
  switch (op) {
    case UnaryOp::exp: case UnaryOp::log: case UnaryOp::tanh: case UnaryOp::sigmoid:
    case UnaryOp::pow_scalar:  // p0 == 2 is x.square() on both sides, exact: compared bit for bit anyway
      return true;
    default:
      return false;
  }
}

// The most ulps by which the CPU's result of `op` differs from the C library's on the other
// inputs. Measured on these (Eigen 3.4, glibc): log 1, exp / tanh / sigmoid 4 (f32) and
// 2 (f64), pow 1-3, but 14 (f32) and 74 (f64) for x^(1/3) of the largest and smallest normal
// numbers. Twice that here, for other versions of either library.
std::uint64_t cpu_ulps(UnaryOp op) {
  switch (op) {
    case UnaryOp::pow_scalar: return 160;
    default: return 8;
  }
}

// Where the CPU's result, from Eigen's vectorised functions, strays from IEEE / the C library
// (which the functors follow, as CUDA does): a description, or nullptr. The GPU does not copy
// these; each is a difference between the backends that the GPU tests must tolerate. (Only the
// elements in Eigen's packets stray: the few in a chunk's scalar tail go through std::sqrt,
// std::exp, ..., so on the CPU the result for a value depends on where it sits in the tensor.)
template <typename T>
const char* known_cpu_deviation(UnaryOp op, double p0, T x, T cpu, T functor) {
  using L = std::numeric_limits<T>;
  const bool subnormal = x != 0 && std::fabs(x) < L::min();
  if (op == UnaryOp::neg && x == 0 && !std::signbit(x) && cpu == 0 && !std::signbit(cpu))
    return "neg(+0) is +0 on the CPU: Eigen's AVX negation computes 0 - x";
  if (op == UnaryOp::exp && std::fabs(cpu) < L::min() && std::fabs(functor) < L::min())
    return "exp underflowing: the CPU flushes subnormal results to 0 (f32) or stops at exp(-708.4) (f64)";
  if (op == UnaryOp::log && subnormal && x > 0)
    return "log of a subnormal is log(the smallest normal) on the CPU (Eigen clamps the argument)";
  if (op == UnaryOp::pow_scalar && std::signbit(x) && cpu == -functor && (functor == 0 || std::isinf(functor)))
    return "pow of a negative base, odd exponent, zero or infinite result: the CPU drops the sign";
  return nullptr;
}

template <typename T>
void check_unary_op(UnaryOp op, const Params& p) {
  const bool approximate = kFloat<T> && is_approximate_on_cpu(op);
  const std::vector<T> all = approximate ? float_sweep<T>() : edges<T>();
  std::vector<T> x;
  for (T v : all)
    if (unary_defined(op, v, p.p0, p.p1)) x.push_back(v);
  const std::vector<T> expected = cpu_unary(op, x, p.p0, p.p1);
  const std::vector<T> got = kernel_unary(op, x, p.p0, p.p1);
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (same_value(expected[i], got[i])) continue;
    INFO(unary_name(op) << "<" << dtype_name(dtype_of<T>()) << ">(" << show(x[i]) << ") with p0 " << p.p0
                        << ", p1 " << p.p1 << ": CPU " << show(expected[i]) << ", functor " << show(got[i]));
    if constexpr (kFloat<T>) {
      if (op == UnaryOp::scale_shift) {
        // Either rounding of x * a + b: fused or not.
        const T a = static_cast<T>(p.p0), b = static_cast<T>(p.p1);
        volatile T product = x[i] * a;
        const T separate = product + b, fused = std::fma(x[i], a, b);
        CHECK((same_value(expected[i], separate) || same_value(expected[i], fused)));
        CHECK((same_value(got[i], separate) || same_value(got[i], fused)));
        continue;
      }
      if (known_cpu_deviation(op, p.p0, x[i], expected[i], got[i]) != nullptr) continue;
      if (approximate) {
        // Otherwise both are the same kind of number (NaN, infinity and zero, with its sign,
        // would have compared equal above), close to each other.
        const bool special = std::isnan(expected[i]) || std::isinf(expected[i]) || expected[i] == 0 ||
                             std::isnan(got[i]) || std::isinf(got[i]) || got[i] == 0;
        CHECK_FALSE(special);
        const std::uint64_t d = ulp_distance(expected[i], got[i]);
        CHECK(d <= cpu_ulps(op));
        continue;
      }
    }
    CHECK(same_value(expected[i], got[i]));
  }
}

// The C library functions that the functors must equal on the host (on a GPU, libdevice's: not
// checked here): the formulas around them (sigmoid, pow's dispatch) and the special values.
template <typename T>
void check_against_libm() {
  const std::vector<T> x = float_sweep<T>();
  for (T v : x) {
    INFO(dtype_name(dtype_of<T>()) << " x = " << show(v));
    CHECK(same_value(ops::Exp<T>()(v), static_cast<T>(std::exp(v))));
    CHECK(same_value(ops::Log<T>()(v), static_cast<T>(std::log(v))));
    CHECK(same_value(ops::Tanh<T>()(v), static_cast<T>(std::tanh(v))));
    CHECK(same_value(ops::Sqrt<T>()(v), static_cast<T>(std::sqrt(v))));
    CHECK(same_value(ops::Sigmoid<T>()(v), static_cast<T>(T(1) / (T(1) + std::exp(-v)))));
    CHECK(same_value(ops::PowScalar<T>{T(3)}(v), static_cast<T>(std::pow(v, T(3)))));
  }
  // sigmoid saturates without NaN: exp(-x) overflowing to inf gives 0, underflowing gives 1.
  CHECK(ops::Sigmoid<T>()(-std::numeric_limits<T>::infinity()) == 0);
  CHECK(ops::Sigmoid<T>()(T(-1000)) == 0);
  CHECK(ops::Sigmoid<T>()(std::numeric_limits<T>::infinity()) == 1);
  CHECK(ops::Sigmoid<T>()(T(1000)) == 1);
  CHECK(std::isnan(ops::Sigmoid<T>()(std::numeric_limits<T>::quiet_NaN())));
  // Sqrt, Log and PowScalar on the IEEE special values the CPU gets wrong (see above).
  CHECK(std::signbit(ops::Sqrt<T>()(T(-0.0))));
  CHECK(ops::Sqrt<T>()(std::numeric_limits<T>::infinity()) == std::numeric_limits<T>::infinity());
  CHECK(ops::Log<T>()(std::numeric_limits<T>::denorm_min()) < std::log(std::numeric_limits<T>::min()));
  CHECK(ops::PowScalar<T>{T(3)}(-std::numeric_limits<T>::infinity()) == -std::numeric_limits<T>::infinity());
  CHECK(ops::PowScalar<T>{T(-1)}(T(-0.0)) == -std::numeric_limits<T>::infinity());
}

template <typename T>
void check_all_unary() {
  std::vector<UnaryOp> ops{UnaryOp::neg, UnaryOp::abs, UnaryOp::square, UnaryOp::sign, UnaryOp::relu, UnaryOp::clip,
                           UnaryOp::leaky_relu, UnaryOp::scale_shift, UnaryOp::rsub_scalar, UnaryOp::pow_scalar};
  if constexpr (kFloat<T>) {
    for (UnaryOp op :
         {UnaryOp::exp, UnaryOp::log, UnaryOp::tanh, UnaryOp::sigmoid, UnaryOp::sqrt, UnaryOp::rdiv_scalar})
      ops.push_back(op);
  }
  for (UnaryOp op : ops)
    for (const Params& p : unary_params<T>(op)) check_unary_op<T>(op, p);
}

// ---- binary ----

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
    case BinaryOp::pow: return "pow";
    case BinaryOp::maximum: return "maximum";
    case BinaryOp::minimum: return "minimum";
    case BinaryOp::relu_grad: return "relu_grad";
    case BinaryOp::eq: return "eq";
    case BinaryOp::ne: return "ne";
    case BinaryOp::lt: return "lt";
    case BinaryOp::le: return "le";
    case BinaryOp::gt: return "gt";
    case BinaryOp::ge: return "ge";
    case BinaryOp::gelu_grad: return "gelu_grad";
  }
  return "?";
}

// The integer pairs on which the CPU's expression is defined.
template <typename T>
bool binary_defined(BinaryOp op, T x, T y) {
  if constexpr (std::is_same<T, bool>::value || kFloat<T>) {
    return true;
  } else {
    const Wide a = x, b = y;
    switch (op) {
      case BinaryOp::add: return fits_wide<T>(a + b);
      case BinaryOp::sub: return fits_wide<T>(a - b);
      case BinaryOp::mul: return fits_wide<T>(a * b);
      case BinaryOp::pow: return !(x == 0 && y < 0);  // exact, wrapping (core/integer_power.h); 0 ** -1 throws
      default: return true;
    }
  }
}

template <typename T, typename Out, typename F>
void apply_pairs(const F& f, const std::vector<T>& a, const std::vector<T>& b, std::vector<Out>& out) {
  out.resize(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = f(a[i], b[i]);
}

template <typename T, typename Out>
void kernel_binary(BinaryOp op, const std::vector<T>& a, const std::vector<T>& b, std::vector<Out>& out) {
  if constexpr (std::is_same<Out, bool>::value) {
    switch (op) {
      case BinaryOp::eq: return apply_pairs(ops::Equal<T>(), a, b, out);
      case BinaryOp::ne: return apply_pairs(ops::NotEqual<T>(), a, b, out);
      case BinaryOp::lt: return apply_pairs(ops::Less<T>(), a, b, out);
      case BinaryOp::le: return apply_pairs(ops::LessEqual<T>(), a, b, out);
      case BinaryOp::gt: return apply_pairs(ops::Greater<T>(), a, b, out);
      case BinaryOp::ge: return apply_pairs(ops::GreaterEqual<T>(), a, b, out);
      default: break;
    }
  }
  if constexpr (std::is_same<Out, T>::value) {
    switch (op) {
      case BinaryOp::add: return apply_pairs(ops::Add<T>(), a, b, out);
      case BinaryOp::sub: return apply_pairs(ops::Sub<T>(), a, b, out);
      case BinaryOp::mul: return apply_pairs(ops::Mul<T>(), a, b, out);
      case BinaryOp::div:
        if constexpr (kFloat<T>) return apply_pairs(ops::Div<T>(), a, b, out);
        break;
      case BinaryOp::pow:
        if constexpr (kHasIntegerPower<T>) {  // cuda/elementwise.cu's IntegerPow
          return apply_pairs([](T x, T y) {
            bool zero_to_negative = false;
            return integer_power(x, y, &zero_to_negative);
          }, a, b, out);
        }
        return apply_pairs(ops::Pow<T>(), a, b, out);
      case BinaryOp::maximum: return apply_pairs(ops::Maximum<T>(), a, b, out);
      case BinaryOp::minimum: return apply_pairs(ops::Minimum<T>(), a, b, out);
      case BinaryOp::relu_grad: return apply_pairs(ops::ReluGrad<T>(), a, b, out);
      default: break;
    }
  }
  FAIL("no functor for binary op " << binary_name(op));
}

template <typename T, typename Out>
void check_binary_op(BinaryOp op, const std::vector<T>& values) {
  // Every defined pair, as two same-shaped operands.
  std::vector<T> a, b;
  for (T x : values)
    for (T y : values)
      if (binary_defined(op, x, y)) {
        a.push_back(x);
        b.push_back(y);
      }
  const Tensor ta = tensor_of(a), tb = tensor_of(b);
  Tensor out(ta.shape(), dtype_of<Out>());
  cpu().binary(op, ta, tb, out);
  const std::vector<Out> expected = values_of<Out>(out);
  std::vector<Out> got;
  kernel_binary<T, Out>(op, a, b, got);
  REQUIRE(got.size() == expected.size());
  I mismatches = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (same_value(expected[i], got[i])) continue;
    if (++mismatches > 5) continue;
    INFO(binary_name(op) << "<" << dtype_name(dtype_of<T>()) << ">(" << show<T>(a[i]) << ", " << show<T>(b[i])
                         << "): CPU " << show<Out>(expected[i]) << ", functor " << show<Out>(got[i]));
    CHECK(same_value(expected[i], got[i]));
  }
  INFO(binary_name(op) << "<" << dtype_name(dtype_of<T>()) << ">: " << a.size() << " pairs");
  CHECK(mismatches == 0);
}

template <typename T>
void check_all_binary() {
  const std::vector<T> values = edges<T>();
  for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::pow, BinaryOp::maximum,
                      BinaryOp::minimum, BinaryOp::relu_grad})
    check_binary_op<T, T>(op, values);
  if constexpr (kFloat<T>) check_binary_op<T, T>(BinaryOp::div, values);
  for (BinaryOp op : {BinaryOp::eq, BinaryOp::ne, BinaryOp::lt, BinaryOp::le, BinaryOp::gt, BinaryOp::ge})
    check_binary_op<T, bool>(op, values);
}

// ---- cast ----

template <typename In>
std::vector<In> cast_inputs() {
  if constexpr (std::is_same<In, bool>::value) return {false, true};
  else return edges<In>();
}

// Whether converting x to Out is defined in C++ (a float out of an integer's range is not).
template <typename In, typename Out>
bool cast_defined(In x) {
  if constexpr (kFloat<In> && std::is_integral<Out>::value && !std::is_same<Out, bool>::value) {
    return fits<Out>(static_cast<double>(x));
  } else if constexpr (std::is_same<In, double>::value && std::is_same<Out, float>::value) {
    return true;  // out of range gives +-inf (IEEE), on both
  } else {
    return true;
  }
}

template <typename In, typename Out>
void check_cast() {
  std::vector<In> x;
  for (In v : cast_inputs<In>())
    if (cast_defined<In, Out>(v)) x.push_back(v);
  const Tensor in = tensor_of(x);
  Tensor out(in.shape(), dtype_of<Out>());
  cpu().cast(in, out);
  const std::vector<Out> expected = values_of<Out>(out);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const Out got = ops::Cast<In, Out>()(x[i]);
    INFO("cast " << dtype_name(dtype_of<In>()) << " " << show(x[i]) << " to " << dtype_name(dtype_of<Out>())
                 << ": CPU " << show(expected[i]) << ", functor " << show(got));
    CHECK(same_value(expected[i], got));
  }
}

template <typename In>
void check_casts_from() {
  check_cast<In, float>();
  check_cast<In, double>();
  check_cast<In, std::int32_t>();
  check_cast<In, std::int64_t>();
  check_cast<In, bool>();
}

// ---- where ----

template <typename T>
void check_select() {
  const std::vector<T> values = cast_inputs<T>();
  std::vector<bool> cond;
  std::vector<T> a, b;
  for (T x : values)
    for (T y : values)
      for (bool c : {false, true}) {
        cond.push_back(c);
        a.push_back(x);
        b.push_back(y);
      }
  const Tensor tc = tensor_of(cond), ta = tensor_of(a), tb = tensor_of(b);
  Tensor out(ta.shape(), dtype_of<T>());
  cpu().where(tc, ta, tb, out);
  const std::vector<T> expected = values_of<T>(out);
  I mismatches = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    mismatches += !same_value<T>(expected[i], ops::Select<T>()(cond[i], a[i], b[i]));
  INFO("where<" << dtype_name(dtype_of<T>()) << ">");
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("unary functors equal the CPU backend on edge values") {
  SECTION("f32") { check_all_unary<float>(); }
  SECTION("f64") { check_all_unary<double>(); }
  SECTION("i32") { check_all_unary<std::int32_t>(); }
  SECTION("i64") { check_all_unary<std::int64_t>(); }
}

TEST_CASE("transcendental functors are the C library's functions") {
  check_against_libm<float>();
  check_against_libm<double>();
}

TEST_CASE("binary functors equal the CPU backend on every pair of edge values") {
  SECTION("f32") { check_all_binary<float>(); }
  SECTION("f64") { check_all_binary<double>(); }
  SECTION("i32") { check_all_binary<std::int32_t>(); }
  SECTION("i64") { check_all_binary<std::int64_t>(); }
  SECTION("bool") {
    // What the front end allows on bool: mul (and), maximum (or), minimum, the comparisons.
    const std::vector<bool> values{false, true};
    for (BinaryOp op : {BinaryOp::mul, BinaryOp::maximum, BinaryOp::minimum}) check_binary_op<bool, bool>(op, values);
    for (BinaryOp op : {BinaryOp::eq, BinaryOp::ne, BinaryOp::lt, BinaryOp::le, BinaryOp::gt, BinaryOp::ge})
      check_binary_op<bool, bool>(op, values);
  }
}

TEST_CASE("cast functors equal the CPU backend") {
  check_casts_from<float>();
  check_casts_from<double>();
  check_casts_from<std::int32_t>();
  check_casts_from<std::int64_t>();
  check_casts_from<bool>();
}

TEST_CASE("select equals the CPU backend's where") {
  check_select<float>();
  check_select<double>();
  check_select<std::int32_t>();
  check_select<std::int64_t>();
  check_select<bool>();
}

TEST_CASE("abs_value of the most negative integer wraps like two's complement") {
  CHECK(ops::abs_value(std::numeric_limits<std::int32_t>::min()) == std::numeric_limits<std::int32_t>::min());
  CHECK(ops::abs_value(std::numeric_limits<std::int64_t>::min()) == std::numeric_limits<std::int64_t>::min());
  CHECK(ops::abs_value(std::int32_t(-5)) == 5);
  CHECK(std::signbit(ops::abs_value(-0.0f)) == false);
  CHECK(std::signbit(ops::abs_value(-std::numeric_limits<double>::quiet_NaN())) == false);
}

// GELU and its backward: the CPU's Eigen tanh against the functors' C library (libdevice on a
// GPU) tanh, which 1 + tanh(u) amplifies for negative x (it cancels towards 0), so the two agree
// to a bound in the scale of the terms, not in ulps of the result. Special values (NaN, +-inf,
// +-0) agree exactly.
template <typename T>
void check_gelu() {
  std::vector<T> x;
  for (int i = -2000; i <= 2000; ++i) x.push_back(static_cast<T>(i * 0.005));  // [-10, 10]
  for (T v : {T(0), T(-0.0), T(30), T(-30), T(1e-30), std::numeric_limits<T>::infinity(),
              -std::numeric_limits<T>::infinity(), std::numeric_limits<T>::quiet_NaN()})
    x.push_back(v);
  const T eps = std::numeric_limits<T>::epsilon();
  const Tensor tx = tensor_of(x);
  Tensor y(tx.shape(), dtype_of<T>()), g(tx.shape(), dtype_of<T>());
  cpu().unary(UnaryOp::gelu, tx, y, 0, 0);
  std::vector<T> gy(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) gy[i] = static_cast<T>(0.5 + 0.25 * static_cast<double>(i % 7));
  cpu().binary(BinaryOp::gelu_grad, tensor_of(gy), tx, g);
  const std::vector<T> cpu_y = values_of<T>(y), cpu_g = values_of<T>(g);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const T fy = ops::Gelu<T>()(x[i]), fg = ops::GeluGrad<T>()(gy[i], x[i]);
    INFO(dtype_name(dtype_of<T>()) << " x = " << show(x[i]) << ": gelu CPU " << show(cpu_y[i]) << ", functor "
                                   << show(fy) << "; gelu_grad CPU " << show(cpu_g[i]) << ", functor " << show(fg));
    if (std::isnan(x[i]) || std::isinf(x[i]) || x[i] == 0) {
      CHECK(same_value(cpu_y[i], fy));
      if (!std::isinf(x[i])) CHECK(same_value(cpu_g[i], fg));  // gelu'(+-inf): inf * 0 on both sides, NaN
      continue;
    }
    const double ax = std::fabs(static_cast<double>(x[i]));
    CHECK(std::fabs(static_cast<double>(cpu_y[i]) - fy) <= 8 * eps * (1 + ax));
    CHECK(std::fabs(static_cast<double>(cpu_g[i]) - fg) <= 8 * eps * (1 + ax * ax * ax) * gy[i]);
  }
}

TEST_CASE("gelu and gelu_grad functors agree with the CPU backend") {
  check_gelu<float>();
  check_gelu<double>();
}
