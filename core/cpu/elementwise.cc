// Element-wise kernels for the CPU backend: unary math through Eigen's vectorised array
// functions, binary operations and where() over broadcast strides.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include <Eigen/Core>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/ieee_exp.h"
#include "core/cpu/strided_loop.h"
#include "core/error.h"
#include "core/half_types.h"
#include "core/integer_power.h"
#include "core/tensor.h"

namespace tandem {

namespace {

template <typename T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// The one integer quotient that does not fit its type (and traps on x86): min / -1.
template <typename T>
bool is_overflowing_division(T x, T y) {
  if constexpr (std::is_signed<T>::value && std::is_integral<T>::value) {
    return y == T(-1) && x == std::numeric_limits<T>::min();
  } else {
    return false;
  }
}

template <typename T>
void exact_sqrt(const T* in, T* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = std::sqrt(in[i]);
}


// GELU's tanh form: 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3).
constexpr double kGeluScale = 0.7978845608028654, kGeluCubic = 0.044715;

// gy * gelu'(x), gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2 / pi) (1 + 3 * 0.044715 x^2), t = tanh(u):
// one vectorised pass (the generic binary loop would call std::tanh per element).
// In blocks of 512 with tanh's values on the stack: a chunk-sized temporary was a heap block of
// up to the whole tensor (megabytes: fresh pages to fault in at every call).
template <typename T>
void gelu_grad_chunk(const T* gy, const T* in, T* out, std::int64_t n) {
  constexpr std::int64_t kBlock = 512;
  alignas(64) T tanh_values[kBlock];
  const T k = T(kGeluScale), c = T(kGeluCubic);
  for (std::int64_t begin = 0; begin < n; begin += kBlock) {
    const std::int64_t len = std::min(kBlock, n - begin);
    ConstArrayMap<T> g(gy + begin, len), x(in + begin, len);
    ArrayMap<T> y(out + begin, len), t(tanh_values, len);
    t = (k * (x + c * x.cube())).tanh();
    y = g * (T(0.5) * (T(1) + t) + T(0.5) * k * x * (T(1) - t.square()) * (T(1) + T(3) * c * x.square()));
  }
}

template <typename T>
void unary_chunk(UnaryOp op, const T* in, T* out, std::int64_t n, double p0, double p1) {
  ConstArrayMap<T> x(in, n);
  ArrayMap<T> y(out, n);
  const T a = static_cast<T>(p0), b = static_cast<T>(p1);
  switch (op) {
    case UnaryOp::neg: y = -x; return;
    case UnaryOp::abs: y = x.abs(); return;
    case UnaryOp::square: y = x.square(); return;
    case UnaryOp::sign: y = (x > T(0)).template cast<T>() - (x < T(0)).template cast<T>(); return;
    case UnaryOp::relu: y = x.max(T(0)); return;
    case UnaryOp::clip: y = x.max(a).min(b); return;
    case UnaryOp::leaky_relu: y = (x > T(0)).select(x, x * a); return;
    case UnaryOp::scale_shift: y = x * a + b; return;
    case UnaryOp::rsub_scalar: y = a - x; return;
    default: break;
  }
  if constexpr (std::is_floating_point<T>::value) {
    switch (op) {
      case UnaryOp::exp: cpu::exp_chunk(x, y, out, n); return;
      case UnaryOp::log: y = x.log(); return;
      case UnaryOp::tanh: y = x.tanh(); return;
      // 1 / (1 + exp(-x)) overflows gracefully to 0 for very negative x in IEEE arithmetic.
      case UnaryOp::sigmoid: y = T(1) / (T(1) + (-x).exp()); return;
      // Not Eigen's packet sqrt: with EIGEN_FAST_MATH (kept for its fast tanh) it is an rsqrt
      // estimate that gives NaN for +inf, +0 for -0 and 0 for subnormals, in the vector body only
      // (so the answer depended on an element's position). std::sqrt is IEEE's, as on the GPU.
      case UnaryOp::sqrt: exact_sqrt(in, out, n); return;
      case UnaryOp::pow_scalar:
        if (p0 == 2) y = x.square();
        else if (p0 == 0.5) exact_sqrt(in, out, n);
        else y = x.pow(a);
        return;
      case UnaryOp::rdiv_scalar: y = a / x; return;
      case UnaryOp::gelu: {
        const T k = T(kGeluScale), c = T(kGeluCubic);
        y = T(0.5) * x * (T(1) + (k * (x + c * x.cube())).tanh());
        return;
      }
      default: break;
    }
  } else {
    switch (op) {
      case UnaryOp::pow_scalar:
        if constexpr (kHasIntegerPower<T>) {
          if (is_integer_exponent<T>(p0)) {  // exact (core/integer_power.h)
            const T e = static_cast<T>(p0);
            bool zero_to_negative = false;
            for (std::int64_t i = 0; i < n; ++i) out[i] = integer_power(in[i], e, &zero_to_negative);
            if (zero_to_negative) TANDEM_FAIL(kZeroToNegativePower);
            return;
          }
        }
        for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(std::pow(static_cast<double>(in[i]), p0));
        return;
      case UnaryOp::rdiv_scalar:
        for (std::int64_t i = 0; i < n; ++i) {
          TANDEM_CHECK(in[i] != 0, "div: integer division by zero");
          TANDEM_CHECK(!is_overflowing_division(a, in[i]), "div: integer overflow (", a, " / ", in[i], ")");
          out[i] = a / in[i];
        }
        return;
      default: break;
    }
  }
  TANDEM_FAIL("unary: operation ", static_cast<int>(op), " is not defined for dtype ",
              dtype_name(dtype_of<T>()));
}

// Transcendental functions cost tens of cycles per element; this tells the parallel loop so.
std::int64_t unary_cost(UnaryOp op) {
  switch (op) {
    case UnaryOp::exp: case UnaryOp::log: case UnaryOp::tanh: case UnaryOp::sigmoid:
    case UnaryOp::pow_scalar: case UnaryOp::gelu:
      return 8;
    default:
      return 1;
  }
}

template <typename T, typename Out, typename F>
void binary_loop(const Tensor& a, const Tensor& b, Tensor& out, const F& f) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  Out* po = out.data<Out>();
  // Small operands of the output's shape, or one of them a single value: one flat loop, without the
  // strides' set-up, which costs many times a small op's loop (docs/performance.md, "Costs outside
  // the products"). Below the grain the strided loop runs on this thread too, in this order.
  const std::int64_t n = out.numel();
  if (n < cpu::kElementwiseGrain && a.shape() == out.shape()) {
    if (b.shape() == out.shape()) {
      for (std::int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
      return;
    }
    if (b.numel() == 1) {
      const T bv = *pb;
      for (std::int64_t i = 0; i < n; ++i) po[i] = f(pa[i], bv);
      return;
    }
  }
  const cpu::StridedLoop<3> loop(out.shape(), {contiguous_strides(out.shape()),
                                               cpu::broadcast_strides(a.shape(), out.shape()),
                                               cpu::broadcast_strides(b.shape(), out.shape())});
  loop.run([&](const std::array<std::int64_t, 3>& off, std::int64_t n, const std::array<std::int64_t, 3>& st) {
    Out* o = po + off[0];
    const T* x = pa + off[1];
    const T* y = pb + off[2];
    // The three layouts that cover almost all calls get their own loops so that each one
    // vectorises; the output is always contiguous.
    if (st[1] == 1 && st[2] == 1) {
      for (std::int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (st[1] == 1 && st[2] == 0) {
      const T yv = *y;
      for (std::int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else if (st[1] == 0 && st[2] == 1) {
      const T xv = *x;
      for (std::int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
    } else {
      for (std::int64_t i = 0; i < n; ++i) o[i] = f(x[i * st[1]], y[i * st[2]]);
    }
  });
}

template <typename T>
void binary_typed(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  switch (op) {
    case BinaryOp::add: return binary_loop<T, T>(a, b, out, [](T x, T y) { return T(x + y); });
    case BinaryOp::sub: return binary_loop<T, T>(a, b, out, [](T x, T y) { return T(x - y); });
    case BinaryOp::mul: return binary_loop<T, T>(a, b, out, [](T x, T y) { return T(x * y); });
    case BinaryOp::div:
      if constexpr (std::is_integral<T>::value) {
        // Integer division truncates toward zero as in C++; dividing by zero is an error, not UB.
        return binary_loop<T, T>(a, b, out, [](T x, T y) {
          if (y == 0) TANDEM_FAIL("div: integer division by zero");
          if (is_overflowing_division(x, y)) TANDEM_FAIL("div: integer overflow (", x, " / ", y, ")");
          return T(x / y);
        });
      } else {
        return binary_loop<T, T>(a, b, out, [](T x, T y) { return T(x / y); });
      }
    case BinaryOp::pow:
      if constexpr (kHasIntegerPower<T>) {
        return binary_loop<T, T>(a, b, out, [](T x, T y) {  // exact (core/integer_power.h)
          bool zero_to_negative = false;
          const T r = integer_power(x, y, &zero_to_negative);
          if (zero_to_negative) TANDEM_FAIL(kZeroToNegativePower);
          return r;
        });
      } else {
        return binary_loop<T, T>(a, b, out, [](T x, T y) {
          return static_cast<T>(std::pow(static_cast<double>(x), static_cast<double>(y)));
        });
      }
    case BinaryOp::maximum: return binary_loop<T, T>(a, b, out, [](T x, T y) { return x > y ? x : y; });
    case BinaryOp::minimum: return binary_loop<T, T>(a, b, out, [](T x, T y) { return x < y ? x : y; });
    case BinaryOp::relu_grad: return binary_loop<T, T>(a, b, out, [](T g, T y) { return y > T(0) ? g : T(0); });
    case BinaryOp::gelu_grad:
      if constexpr (std::is_floating_point<T>::value) {
        if (a.shape() == out.shape() && b.shape() == out.shape()) {
          const T *g = a.data<T>(), *x = b.data<T>();
          T* o = out.data<T>();
          return cpu::parallel_for(out.numel(), 8, cpu::kElementwiseGrain, [&](std::int64_t i, std::int64_t e) {
            gelu_grad_chunk(g + i, x + i, o + i, e - i);
          });
        }
        return binary_loop<T, T>(a, b, out, [](T g, T x) {
          const T k = T(kGeluScale), c = T(kGeluCubic), t = std::tanh(k * (x + c * x * x * x));
          return T(g * (T(0.5) * (T(1) + t) + T(0.5) * k * x * (T(1) - t * t) * (T(1) + T(3) * c * x * x)));
        });
      }
      TANDEM_FAIL("gelu_grad: not defined for dtype ", dtype_name(dtype_of<T>()));
    case BinaryOp::eq: return binary_loop<T, bool>(a, b, out, [](T x, T y) { return x == y; });
    case BinaryOp::ne: return binary_loop<T, bool>(a, b, out, [](T x, T y) { return x != y; });
    case BinaryOp::lt: return binary_loop<T, bool>(a, b, out, [](T x, T y) { return x < y; });
    case BinaryOp::le: return binary_loop<T, bool>(a, b, out, [](T x, T y) { return x <= y; });
    case BinaryOp::gt: return binary_loop<T, bool>(a, b, out, [](T x, T y) { return x > y; });
    case BinaryOp::ge: return binary_loop<T, bool>(a, b, out, [](T x, T y) { return x >= y; });
  }
}

}  // namespace

void CpuBackend::unary(UnaryOp op, const Tensor& in, Tensor& out, double p0, double p1) {
  TANDEM_DISPATCH_NUMERIC(in.dtype(), "unary", [&] {
    const scalar_t* x = in.data<scalar_t>();
    scalar_t* y = out.data<scalar_t>();
    cpu::parallel_for(in.numel(), unary_cost(op), cpu::kElementwiseGrain,
                      [&](std::int64_t b, std::int64_t e) { unary_chunk(op, x + b, y + b, e - b, p0, p1); });
  });
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  if (out.numel() == 0) return;
  if (a.dtype() == DType::boolean) {
    // Booleans support the comparisons and logical and/or spelled as mul/maximum.
    return binary_typed<bool>(op, a, b, out);
  }
  TANDEM_DISPATCH_NUMERIC(a.dtype(), "binary", [&] { binary_typed<scalar_t>(op, a, b, out); });
}

void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  if (out.numel() == 0) return;
  TANDEM_DISPATCH_ALL(out.dtype(), "where", [&] {
    const bool* pc = cond.data<bool>();
    const scalar_t* pa = a.data<scalar_t>();
    const scalar_t* pb = b.data<scalar_t>();
    scalar_t* po = out.data<scalar_t>();
    const cpu::StridedLoop<4> loop(out.shape(), {contiguous_strides(out.shape()),
                                                 cpu::broadcast_strides(cond.shape(), out.shape()),
                                                 cpu::broadcast_strides(a.shape(), out.shape()),
                                                 cpu::broadcast_strides(b.shape(), out.shape())});
    loop.run([&](const std::array<std::int64_t, 4>& off, std::int64_t n, const std::array<std::int64_t, 4>& st) {
      for (std::int64_t i = 0; i < n; ++i)
        po[off[0] + i] = pc[off[1] + i * st[1]] ? pa[off[2] + i * st[2]] : pb[off[3] + i * st[3]];
    });
  });
}

}  // namespace tandem
