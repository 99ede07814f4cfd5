// The 16-bit floating types in CUDA code: __nv_bfloat16 for bf16 and __half for f16 (the host's
// are Eigen's, core/half_types.h; the bits are the same), the dtype map the CUDA kernels dispatch
// through, and conversions between every dtype that round once, to nearest even, as the CPU
// backend's do (f64 and the integers through f32 rounded to odd: core/round_to_odd.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/host_device.h"
#include "core/round_to_odd.h"

namespace tandem {

template <> struct DTypeOf<__nv_bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct DTypeOf<__half> { static constexpr DType value = DType::f16; };

namespace cuda {

// scalar_t in CUDA code: the host's types, but CUDA's own for bf16 and f16.
template <DType D> struct DeviceScalar { using type = typename HostScalar<D>::type; };
template <> struct DeviceScalar<DType::bf16> { using type = __nv_bfloat16; };
template <> struct DeviceScalar<DType::f16> { using type = __half; };

template <typename T>
constexpr bool kIsDeviceHalf = std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value;

TANDEM_HOST_DEVICE inline float half_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
TANDEM_HOST_DEVICE inline float half_to_float(__half x) { return __half2float(x); }

template <typename T>
TANDEM_HOST_DEVICE T half_from_float(float x) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) return __float2bfloat16_rn(x);
  else return __float2half_rn(x);
}

// x as To, rounded once to nearest even (core/half_types.h's convert_scalar, on the device).
template <typename To, typename From>
TANDEM_HOST_DEVICE To convert_scalar(From x) {
  if constexpr (std::is_same<To, From>::value) {
    return x;
  } else if constexpr (std::is_same<To, bool>::value) {
    if constexpr (kIsDeviceHalf<From>) return half_to_float(x) != 0.0f;
    else return x != From(0);
  } else if constexpr (kIsDeviceHalf<To>) {
    if constexpr (std::is_same<From, bool>::value) return half_from_float<To>(x ? 1.0f : 0.0f);
    else if constexpr (std::is_same<From, float>::value) return half_from_float<To>(x);
    else if constexpr (kIsDeviceHalf<From>) return half_from_float<To>(half_to_float(x));
    else if constexpr (std::is_same<From, double>::value) return half_from_float<To>(round_to_odd_f32(x));
    else return half_from_float<To>(round_to_odd_f32(static_cast<std::int64_t>(x)));
  } else if constexpr (kIsDeviceHalf<From>) {
    return static_cast<To>(half_to_float(x));
  } else {
    return static_cast<To>(x);
  }
}

}  // namespace cuda
}  // namespace tandem
