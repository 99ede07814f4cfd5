// Element-wise kernels of the CUDA backend: fill, cast, unary and binary math, where(). The
// values are the CPU backend's (core/cpu/elementwise.cc, cpu_backend.cc); the per-element
// functions are in elementwise_ops.cuh.
//
// Broadcasting: out is contiguous, and each input is read through NumPy broadcast strides.
// make_indexer merges the axes that are contiguous in every operand, so the common cases
// (same shapes, a scalar operand) collapse to at most one axis and run as a plain linear
// index, out[i] = f(a[i * sa], b[i * sb]) with sa, sb in {0, 1}; the rest (a bias row over a
// matrix, ...) computes each element's offsets with StridedIndexer, in 32-bit arithmetic when
// the element count allows.
//
// Integer division (and an integer power, whose 0 ** -1 divides by zero) cannot throw on the
// device: its kernels set bits in a flag, and the host waits for it and throws the CPU
// backend's error (only these integer operations pay this sync).
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/error.h"
#include "core/integer_power.h"
#include "core/tensor.h"
#include "cuda/cuda_backend.h"
#include "cuda/elementwise_ops.cuh"
#include "cuda/half_types.cuh"
#include "cuda/kernel_util.cuh"
#include "cuda/strided_index.h"

namespace tandem {
namespace cuda {

namespace {

// ---- kernels ----

template <typename T>
__global__ void fill_kernel(std::int64_t n, T value, T* out) {
  TANDEM_GRID_STRIDE_LOOP(i, n) out[i] = value;
}

// out[i] = f(in[i]): unary and cast (contiguous in and out of the same shape).
template <typename In, typename Out, typename F>
__global__ void map_kernel(std::int64_t n, F f, const In* in, Out* out) {
  TANDEM_GRID_STRIDE_LOOP(i, n) out[i] = f(in[i]);
}

// Operands whose axes all merged: offsets are i * stride (stride 0 for a broadcast scalar).
template <typename In, typename Out, typename F>
__global__ void binary_linear_kernel(std::int64_t n, F f, const In* a, std::int64_t sa, const In* b,
                                     std::int64_t sb, Out* out) {
  TANDEM_GRID_STRIDE_LOOP(i, n) out[i] = f(a[i * sa], b[i * sb]);
}

template <typename Index, typename In, typename Out, typename F>
__global__ void binary_strided_kernel(std::int64_t n, F f, StridedIndexer<3> indexer, const In* a, const In* b,
                                      Out* out) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    std::int64_t offset[3];
    indexer.template offsets<Index>(i, offset);
    out[offset[0]] = f(a[offset[1]], b[offset[2]]);
  }
}

template <typename T>
__global__ void where_linear_kernel(std::int64_t n, const bool* cond, std::int64_t sc, const T* a, std::int64_t sa,
                                    const T* b, std::int64_t sb, T* out) {
  TANDEM_GRID_STRIDE_LOOP(i, n) out[i] = ops::Select<T>()(cond[i * sc], a[i * sa], b[i * sb]);
}

template <typename Index, typename T>
__global__ void where_strided_kernel(std::int64_t n, StridedIndexer<4> indexer, const bool* cond, const T* a,
                                     const T* b, T* out) {
  TANDEM_GRID_STRIDE_LOOP(i, n) {
    std::int64_t offset[4];
    indexer.template offsets<Index>(i, offset);
    out[offset[0]] = ops::Select<T>()(cond[offset[1]], a[offset[2]], b[offset[3]]);
  }
}

// ---- integer division ----

constexpr int kDivisionByZero = 1;
constexpr int kDivisionOverflow = 2;
constexpr int kZeroToNegativePowerBit = 4;

// The one integer quotient that does not fit its type: min / -1.
template <typename T>
__device__ bool is_overflowing_division(T x, T y) {
  if constexpr (std::is_signed<T>::value && std::is_integral<T>::value) {
    constexpr T kMin = std::is_same<T, std::int32_t>::value ? T(INT32_MIN) : T(INT64_MIN);
    return y == T(-1) && x == kMin;
  } else {
    return false;
  }
}

// x / y truncating toward zero, as C++; division by zero and min / -1 set a bit of *errors
// (the element gets 0 or x, and the host then throws).
template <typename T>
__device__ T checked_divide(T x, T y, int* errors) {
  if (y == T(0)) {
    atomicOr(errors, kDivisionByZero);
    return T(0);
  }
  if (is_overflowing_division(x, y)) {
    atomicOr(errors, kDivisionOverflow);
    return x;
  }
  return static_cast<T>(x / y);
}

template <typename T>
struct IntegerDiv {
  int* errors;
  __device__ T operator()(T x, T y) const { return checked_divide(x, y, errors); }
};

template <typename T>
struct IntegerRdivScalar {
  T a;
  int* errors;
  __device__ T operator()(T x) const { return checked_divide(a, x, errors); }
};

// x ** y exactly (core/integer_power.h); 0 ** negative sets a bit of *errors.
template <typename T>
struct IntegerPow {
  int* errors;
  __device__ T operator()(T x, T y) const {
    bool zero_to_negative = false;
    const T r = integer_power(x, y, &zero_to_negative);
    if (zero_to_negative) atomicOr(errors, kZeroToNegativePowerBit);
    return r;
  }
};

template <typename T>
struct IntegerPowScalar {
  T exponent;
  int* errors;
  __device__ T operator()(T x) const { return IntegerPow<T>{errors}(x, exponent); }
};

// A device flag for the errors of one integer-division (or integer-power) kernel.
class DivisionErrors {
 public:
  explicit DivisionErrors(const DeviceContext& ctx) : ctx_(ctx), flag_(sizeof(int), ctx.index) {
    TANDEM_CUDA_CHECK(cudaMemsetAsync(flag_.data(), 0, sizeof(int), ctx.stream));
  }

  int* device_flag() const { return flag_.as<int>(); }

  // Waits for the kernel and throws what the CPU backend would have thrown.
  template <typename T>
  void check() const {
    int bits = 0;
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(&bits, flag_.data(), sizeof(int), cudaMemcpyDeviceToHost, ctx_.stream));
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    if (bits & kDivisionByZero) TANDEM_FAIL("div: integer division by zero");
    if (bits & kZeroToNegativePowerBit) TANDEM_FAIL(kZeroToNegativePower);
    if constexpr (std::is_signed<T>::value) {
      if (bits & kDivisionOverflow)
        TANDEM_FAIL("div: integer overflow (", std::numeric_limits<T>::min(), " / ", T(-1), ")");
    }
  }

 private:
  const DeviceContext& ctx_;
  DeviceBuffer flag_;
};

// ---- launchers ----

template <typename In, typename Out, typename F>
void launch_map(const char* name, const DeviceContext& ctx, F f, const Tensor& in, Tensor& out) {
  launch_elementwise(name, ctx, in.numel(), map_kernel<In, Out, F>, in.numel(), f, in.data<In>(), out.data<Out>());
}

// The stride of operand k in a linear kernel: its one merged axis' stride, or 0 when every axis
// had extent 1 (then there is one element).
template <int K>
std::int64_t linear_stride(const StridedIndexer<K>& indexer, int k) {
  return indexer.dims == 0 ? 0 : indexer.strides[k][0];
}

bool fits_32_bits(std::int64_t n) { return n <= static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max()); }

// out = f(a, b) with a and b broadcast to out's shape.
template <typename In, typename Out, typename F>
void launch_binary(const char* name, const DeviceContext& ctx, F f, const Tensor& a, const Tensor& b, Tensor& out) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  const Shape& shape = out.shape();
  const StridedIndexer<3> indexer =
      make_indexer<3>(name, shape,
                      {contiguous_strides(shape), broadcast_strides(a.shape(), shape),
                       broadcast_strides(b.shape(), shape)},
                      {0, 0, 0});
  const In* pa = a.data<In>();
  const In* pb = b.data<In>();
  Out* po = out.data<Out>();
  if (indexer.dims <= 1) {
    // One merged axis: out's stride on it is 1, as out is contiguous.
    launch_elementwise(name, ctx, n, binary_linear_kernel<In, Out, F>, n, f, pa, linear_stride(indexer, 1), pb,
                       linear_stride(indexer, 2), po);
  } else if (fits_32_bits(n)) {
    launch_elementwise(name, ctx, n, binary_strided_kernel<std::uint32_t, In, Out, F>, n, f, indexer, pa, pb, po);
  } else {
    launch_elementwise(name, ctx, n, binary_strided_kernel<std::int64_t, In, Out, F>, n, f, indexer, pa, pb, po);
  }
}

template <typename T>
void binary_typed(BinaryOp op, const DeviceContext& ctx, const Tensor& a, const Tensor& b, Tensor& out) {
  const char* name = "binary";
  switch (op) {
    case BinaryOp::add: return launch_binary<T, T>(name, ctx, ops::Add<T>(), a, b, out);
    case BinaryOp::sub: return launch_binary<T, T>(name, ctx, ops::Sub<T>(), a, b, out);
    case BinaryOp::mul: return launch_binary<T, T>(name, ctx, ops::Mul<T>(), a, b, out);
    case BinaryOp::div:
      if constexpr (std::is_integral<T>::value) {
        // Integer division truncates toward zero as in C++; by zero (or min / -1) is an error.
        const DivisionErrors errors(ctx);
        launch_binary<T, T>(name, ctx, IntegerDiv<T>{errors.device_flag()}, a, b, out);
        return errors.check<T>();
      } else {
        return launch_binary<T, T>(name, ctx, ops::Div<T>(), a, b, out);
      }
    case BinaryOp::pow:
      if constexpr (kHasIntegerPower<T>) {
        const DivisionErrors errors(ctx);
        launch_binary<T, T>(name, ctx, IntegerPow<T>{errors.device_flag()}, a, b, out);
        return errors.check<T>();
      } else {
        return launch_binary<T, T>(name, ctx, ops::Pow<T>(), a, b, out);
      }
    case BinaryOp::maximum: return launch_binary<T, T>(name, ctx, ops::Maximum<T>(), a, b, out);
    case BinaryOp::minimum: return launch_binary<T, T>(name, ctx, ops::Minimum<T>(), a, b, out);
    case BinaryOp::relu_grad: return launch_binary<T, T>(name, ctx, ops::ReluGrad<T>(), a, b, out);
    case BinaryOp::gelu_grad:
      if constexpr (std::is_floating_point<T>::value) return launch_binary<T, T>(name, ctx, ops::GeluGrad<T>(), a, b, out);
      TANDEM_FAIL("gelu_grad: not defined for dtype ", dtype_name(dtype_of<T>()));
    case BinaryOp::eq: return launch_binary<T, bool>(name, ctx, ops::Equal<T>(), a, b, out);
    case BinaryOp::ne: return launch_binary<T, bool>(name, ctx, ops::NotEqual<T>(), a, b, out);
    case BinaryOp::lt: return launch_binary<T, bool>(name, ctx, ops::Less<T>(), a, b, out);
    case BinaryOp::le: return launch_binary<T, bool>(name, ctx, ops::LessEqual<T>(), a, b, out);
    case BinaryOp::gt: return launch_binary<T, bool>(name, ctx, ops::Greater<T>(), a, b, out);
    case BinaryOp::ge: return launch_binary<T, bool>(name, ctx, ops::GreaterEqual<T>(), a, b, out);
  }
  TANDEM_FAIL("binary: unknown operation ", static_cast<int>(op));
}

template <typename T>
void unary_typed(UnaryOp op, const DeviceContext& ctx, const Tensor& in, Tensor& out, double p0, double p1) {
  const char* name = "unary";
  if (in.numel() == 0) return;  // as on the CPU, nothing to compute is never an error
  const T a = static_cast<T>(p0), b = static_cast<T>(p1);
  switch (op) {
    case UnaryOp::neg: return launch_map<T, T>(name, ctx, ops::Neg<T>(), in, out);
    case UnaryOp::abs: return launch_map<T, T>(name, ctx, ops::Abs<T>(), in, out);
    case UnaryOp::square: return launch_map<T, T>(name, ctx, ops::Square<T>(), in, out);
    case UnaryOp::sign: return launch_map<T, T>(name, ctx, ops::Sign<T>(), in, out);
    case UnaryOp::relu: return launch_map<T, T>(name, ctx, ops::Relu<T>(), in, out);
    case UnaryOp::clip: return launch_map<T, T>(name, ctx, ops::Clip<T>{a, b}, in, out);
    case UnaryOp::leaky_relu: return launch_map<T, T>(name, ctx, ops::LeakyRelu<T>{a}, in, out);
    case UnaryOp::scale_shift: return launch_map<T, T>(name, ctx, ops::ScaleShift<T>{a, b}, in, out);
    case UnaryOp::rsub_scalar: return launch_map<T, T>(name, ctx, ops::RsubScalar<T>{a}, in, out);
    default: break;
  }
  if constexpr (std::is_floating_point<T>::value) {
    switch (op) {
      case UnaryOp::exp: return launch_map<T, T>(name, ctx, ops::Exp<T>(), in, out);
      case UnaryOp::log: return launch_map<T, T>(name, ctx, ops::Log<T>(), in, out);
      case UnaryOp::tanh: return launch_map<T, T>(name, ctx, ops::Tanh<T>(), in, out);
      case UnaryOp::sigmoid: return launch_map<T, T>(name, ctx, ops::Sigmoid<T>(), in, out);
      case UnaryOp::sqrt: return launch_map<T, T>(name, ctx, ops::Sqrt<T>(), in, out);
      case UnaryOp::pow_scalar:
        if (p0 == 2) return launch_map<T, T>(name, ctx, ops::Square<T>(), in, out);
        if (p0 == 0.5) return launch_map<T, T>(name, ctx, ops::Sqrt<T>(), in, out);
        return launch_map<T, T>(name, ctx, ops::PowScalar<T>{a}, in, out);
      case UnaryOp::rdiv_scalar: return launch_map<T, T>(name, ctx, ops::RdivScalar<T>{a}, in, out);
      case UnaryOp::gelu: return launch_map<T, T>(name, ctx, ops::Gelu<T>(), in, out);
      default: break;
    }
  } else {
    switch (op) {
      case UnaryOp::pow_scalar: {
        if constexpr (!kHasIntegerPower<T>) return launch_map<T, T>(name, ctx, ops::PowScalarInteger<T>{p0}, in, out);
        if (!is_integer_exponent<T>(p0)) return launch_map<T, T>(name, ctx, ops::PowScalarInteger<T>{p0}, in, out);
        const DivisionErrors errors(ctx);
        launch_map<T, T>(name, ctx, IntegerPowScalar<T>{static_cast<T>(p0), errors.device_flag()}, in, out);
        return errors.check<T>();
      }
      case UnaryOp::rdiv_scalar: {
        const DivisionErrors errors(ctx);
        launch_map<T, T>(name, ctx, IntegerRdivScalar<T>{a, errors.device_flag()}, in, out);
        return errors.check<T>();
      }
      default: break;
    }
  }
  TANDEM_FAIL("unary: operation ", static_cast<int>(op), " is not defined for dtype ", dtype_name(dtype_of<T>()));
}

}  // namespace

void CudaBackend::fill(Tensor& out, double value) {
  TANDEM_DISPATCH_ALL_OF(DeviceScalar, out.dtype(), "fill", [&] {
    const std::int64_t n = out.numel();
    if (n == 0) return;
    const DeviceContext& ctx = context_of(out, "fill");
    const auto v = convert_scalar<scalar_t>(value);
    unsigned char bytes[sizeof(scalar_t)];
    std::memcpy(bytes, &v, sizeof(scalar_t));
    bool all_zero = true;
    for (unsigned char byte : bytes) all_zero = all_zero && byte == 0;
    if (all_zero) {
      // zeros(), the commonest fill, is a memset (+0.0 is all zero bits; -0.0 is not).
      TANDEM_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), ctx.stream));
    } else {
      launch_elementwise("fill", ctx, n, fill_kernel<scalar_t>, n, v, out.data<scalar_t>());
    }
  });
}

namespace {

// One element of a cast: convert_scalar (cuda/half_types.cuh), one rounding to nearest even.
template <typename In, typename Out>
struct Convert {
  __host__ __device__ Out operator()(In x) const { return convert_scalar<Out>(x); }
};

}  // namespace

void CudaBackend::cast(const Tensor& in, Tensor& out) {
  TANDEM_DISPATCH_ALL_OF(DeviceScalar, in.dtype(), "cast", [&] {
    using in_t = scalar_t;
    TANDEM_DISPATCH_ALL_OF(DeviceScalar, out.dtype(), "cast", [&] {
      if (in.numel() == 0) return;
      launch_map<in_t, scalar_t>("cast", context_of(out, "cast"), Convert<in_t, scalar_t>(), in, out);
    });
  });
}

void CudaBackend::unary(UnaryOp op, const Tensor& in, Tensor& out, double p0, double p1) {
  TANDEM_DISPATCH_NUMERIC(in.dtype(), "unary", [&] {
    unary_typed<scalar_t>(op, context_of(out, "unary"), in, out, p0, p1);
  });
}

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  if (out.numel() == 0) return;
  const DeviceContext& ctx = context_of(out, "binary");
  if (a.dtype() == DType::boolean) {
    // Booleans support the comparisons and logical and/or spelled as mul/maximum.
    return binary_typed<bool>(op, ctx, a, b, out);
  }
  TANDEM_DISPATCH_NUMERIC(a.dtype(), "binary", [&] { binary_typed<scalar_t>(op, ctx, a, b, out); });
}

void CudaBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  TANDEM_DISPATCH_ALL_OF(DeviceScalar, out.dtype(), "where", [&] {
    const DeviceContext& ctx = context_of(out, "where");
    const Shape& shape = out.shape();
    const StridedIndexer<4> indexer =
        make_indexer<4>("where", shape,
                        {contiguous_strides(shape), broadcast_strides(cond.shape(), shape),
                         broadcast_strides(a.shape(), shape), broadcast_strides(b.shape(), shape)},
                        {0, 0, 0, 0});
    const bool* pc = cond.data<bool>();
    const scalar_t* pa = a.data<scalar_t>();
    const scalar_t* pb = b.data<scalar_t>();
    scalar_t* po = out.data<scalar_t>();
    if (indexer.dims <= 1) {
      launch_elementwise("where", ctx, n, where_linear_kernel<scalar_t>, n, pc, linear_stride(indexer, 1), pa,
                         linear_stride(indexer, 2), pb, linear_stride(indexer, 3), po);
    } else if (fits_32_bits(n)) {
      launch_elementwise("where", ctx, n, where_strided_kernel<std::uint32_t, scalar_t>, n, indexer, pc, pa, pb, po);
    } else {
      launch_elementwise("where", ctx, n, where_strided_kernel<std::int64_t, scalar_t>, n, indexer, pc, pa, pb, po);
    }
  });
}

}  // namespace cuda
}  // namespace tandem
