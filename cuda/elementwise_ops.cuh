// The per-element functions of the CUDA element-wise kernels (cuda/elementwise.cu), one functor
// per UnaryOp / BinaryOp. Each one spells out the CPU backend's formula (core/cpu/elementwise.cc)
// so that both give the same values, including on NaN, -0 and integer edge cases; the comments
// say which CPU expression each one mirrors. They are plain host/device code: nothing here
// needs a GPU. Integer division, which must report errors, lives with its kernels.
#pragma once

#include <math.h>

#include <cstdint>
#include <type_traits>

#include "core/host_device.h"

namespace tandem {
namespace cuda {
namespace ops {

// ---- math functions overloaded on float and double (the f-suffixed ones for float) ----
TANDEM_HOST_DEVICE inline float math_exp(float x) { return ::expf(x); }
TANDEM_HOST_DEVICE inline double math_exp(double x) { return ::exp(x); }
TANDEM_HOST_DEVICE inline float math_log(float x) { return ::logf(x); }
TANDEM_HOST_DEVICE inline double math_log(double x) { return ::log(x); }
TANDEM_HOST_DEVICE inline float math_tanh(float x) { return ::tanhf(x); }
TANDEM_HOST_DEVICE inline double math_tanh(double x) { return ::tanh(x); }
TANDEM_HOST_DEVICE inline float math_sqrt(float x) { return ::sqrtf(x); }
TANDEM_HOST_DEVICE inline double math_sqrt(double x) { return ::sqrt(x); }
TANDEM_HOST_DEVICE inline float math_pow(float x, float y) { return ::powf(x, y); }
TANDEM_HOST_DEVICE inline double math_pow(double x, double y) { return ::pow(x, y); }

// |x|: fabs for floating point (clears the sign of -0 and NaN), and for integers what
// std::abs does in two's complement (the most negative value maps to itself).
template <typename T>
TANDEM_HOST_DEVICE T abs_value(T x) {
  if constexpr (std::is_same<T, float>::value) {
    return ::fabsf(x);
  } else if constexpr (std::is_same<T, double>::value) {
    return ::fabs(x);
  } else {
    using U = typename std::make_unsigned<T>::type;
    return x < T(0) ? static_cast<T>(U(0) - static_cast<U>(x)) : x;
  }
}

// ---- UnaryOp (numeric dtypes; a = static_cast<T>(p0), b = static_cast<T>(p1)) ----

template <typename T>
struct Neg {
  TANDEM_HOST_DEVICE T operator()(T x) const { return -x; }
};

template <typename T>
struct Abs {
  TANDEM_HOST_DEVICE T operator()(T x) const { return abs_value(x); }
};

template <typename T>
struct Square {
  TANDEM_HOST_DEVICE T operator()(T x) const { return x * x; }
};

// (x > 0) - (x < 0): 0 for NaN.
template <typename T>
struct Sign {
  TANDEM_HOST_DEVICE T operator()(T x) const { return static_cast<T>(T(x > T(0)) - T(x < T(0))); }
};

// Eigen's x.max(0) is std::max(x, 0) = (x < 0) ? 0 : x: NaN and -0 pass through unchanged.
template <typename T>
struct Relu {
  TANDEM_HOST_DEVICE T operator()(T x) const { return x < T(0) ? T(0) : x; }
};

// x.max(lo).min(hi) = std::min(std::max(x, lo), hi): NaN passes through.
template <typename T>
struct Clip {
  T lo, hi;
  TANDEM_HOST_DEVICE T operator()(T x) const {
    const T y = x < lo ? lo : x;
    return hi < y ? hi : y;
  }
};

// (x > 0).select(x, x * slope).
template <typename T>
struct LeakyRelu {
  T slope;
  TANDEM_HOST_DEVICE T operator()(T x) const { return x > T(0) ? x : x * slope; }
};

template <typename T>
struct ScaleShift {
  T scale, shift;
  TANDEM_HOST_DEVICE T operator()(T x) const { return x * scale + shift; }
};

template <typename T>
struct RsubScalar {
  T a;
  TANDEM_HOST_DEVICE T operator()(T x) const { return a - x; }
};

// Floating point only (the CPU rejects them for integers).
template <typename T>
struct Exp {
  TANDEM_HOST_DEVICE T operator()(T x) const { return math_exp(x); }
};

template <typename T>
struct Log {
  TANDEM_HOST_DEVICE T operator()(T x) const { return math_log(x); }
};

template <typename T>
struct Tanh {
  TANDEM_HOST_DEVICE T operator()(T x) const { return math_tanh(x); }
};

// 1 / (1 + exp(-x)): exp overflows to inf for very negative x and the result to 0.
template <typename T>
struct Sigmoid {
  TANDEM_HOST_DEVICE T operator()(T x) const { return T(1) / (T(1) + math_exp(-x)); }
};

template <typename T>
struct Sqrt {
  TANDEM_HOST_DEVICE T operator()(T x) const { return math_sqrt(x); }
};

// x ** p in T (the host picks Square for p == 2 and Sqrt for p == 0.5, as the CPU does).
template <typename T>
struct PowScalar {
  T p;
  TANDEM_HOST_DEVICE T operator()(T x) const { return math_pow(x, p); }
};

// Integers to a fractional power: std::pow in double, converted back (whole exponents are
// exact, IntegerPowScalar in elementwise.cu).
template <typename T>
struct PowScalarInteger {
  double p;
  TANDEM_HOST_DEVICE T operator()(T x) const { return static_cast<T>(::pow(static_cast<double>(x), p)); }
};

template <typename T>
struct RdivScalar {
  T a;
  TANDEM_HOST_DEVICE T operator()(T x) const { return a / x; }
};

// ---- BinaryOp (numeric dtypes and bool; comparisons return bool) ----
// The arithmetic ones convert back to T as the CPU's T(x + y) does (for bool: x + y != 0).

template <typename T>
struct Add {
  TANDEM_HOST_DEVICE T operator()(T x, T y) const { return static_cast<T>(x + y); }
};

template <typename T>
struct Sub {
  TANDEM_HOST_DEVICE T operator()(T x, T y) const { return static_cast<T>(x - y); }
};

template <typename T>
struct Mul {
  TANDEM_HOST_DEVICE T operator()(T x, T y) const { return static_cast<T>(x * y); }
};

// Floating point; integers go through the checked division in elementwise.cu.
template <typename T>
struct Div {
  TANDEM_HOST_DEVICE T operator()(T x, T y) const { return static_cast<T>(x / y); }
};

// std::pow in double for the floating dtypes, f32 included, converted back (integers:
// IntegerPow in elementwise.cu).
template <typename T>
struct Pow {
  TANDEM_HOST_DEVICE T operator()(T x, T y) const {
    return static_cast<T>(::pow(static_cast<double>(x), static_cast<double>(y)));
  }
};

// x > y ? x : y: a NaN in y is dropped, a NaN in x kept (exactly the CPU's expression).
template <typename T>
struct Maximum {
  TANDEM_HOST_DEVICE T operator()(T x, T y) const { return x > y ? x : y; }
};

template <typename T>
struct Minimum {
  TANDEM_HOST_DEVICE T operator()(T x, T y) const { return x < y ? x : y; }
};

// GELU's tanh form and its backward gy * gelu'(x) (floating dtypes), as the CPU computes them.
template <typename T>
struct Gelu {
  TANDEM_HOST_DEVICE T operator()(T x) const {
    const T k = T(0.7978845608028654), c = T(0.044715);
    return T(0.5) * x * (T(1) + math_tanh(k * (x + c * x * x * x)));
  }
};

template <typename T>
struct GeluGrad {
  TANDEM_HOST_DEVICE T operator()(T g, T x) const {
    const T k = T(0.7978845608028654), c = T(0.044715), t = math_tanh(k * (x + c * x * x * x));
    return g * (T(0.5) * (T(1) + t) + T(0.5) * k * x * (T(1) - t * t) * (T(1) + T(3) * c * x * x));
  }
};

// relu_grad(gy, y) = y > 0 ? gy : 0.
template <typename T>
struct ReluGrad {
  TANDEM_HOST_DEVICE T operator()(T g, T y) const { return y > T(0) ? g : T(0); }
};

template <typename T>
struct Equal {
  TANDEM_HOST_DEVICE bool operator()(T x, T y) const { return x == y; }
};

template <typename T>
struct NotEqual {
  TANDEM_HOST_DEVICE bool operator()(T x, T y) const { return x != y; }
};

template <typename T>
struct Less {
  TANDEM_HOST_DEVICE bool operator()(T x, T y) const { return x < y; }
};

template <typename T>
struct LessEqual {
  TANDEM_HOST_DEVICE bool operator()(T x, T y) const { return x <= y; }
};

template <typename T>
struct Greater {
  TANDEM_HOST_DEVICE bool operator()(T x, T y) const { return x > y; }
};

template <typename T>
struct GreaterEqual {
  TANDEM_HOST_DEVICE bool operator()(T x, T y) const { return x >= y; }
};

// ---- cast and where ----

// static_cast, with the conversion to bool written as the comparison it is (NaN is true).
template <typename In, typename Out>
struct Cast {
  TANDEM_HOST_DEVICE Out operator()(In x) const {
    if constexpr (std::is_same<Out, bool>::value) {
      return x != In(0);
    } else {
      return static_cast<Out>(x);
    }
  }
};

template <typename T>
struct Select {
  TANDEM_HOST_DEVICE T operator()(bool c, T x, T y) const { return c ? x : y; }
};

}  // namespace ops
}  // namespace cuda
}  // namespace tandem
