// Memory, fill, cast and strided copies for the CPU backend.
#include "core/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>

#include "core/cpu/block_cache.h"
#include "core/cpu/strided_loop.h"
#include "core/error.h"
#include "core/half_types.h"
#include "core/tensor.h"

namespace tandem {

CpuBackend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

Backend& builtin_cpu_backend() { return cpu_backend(); }

void* CpuBackend::allocate(std::size_t nbytes, int) { return cpu::BlockCache::instance().allocate(nbytes); }

void CpuBackend::deallocate(void* ptr, std::size_t nbytes, int) { cpu::BlockCache::instance().deallocate(ptr, nbytes); }

void CpuBackend::copy_to_host(void* host_dst, const void* src, std::size_t nbytes, int) {
  std::memcpy(host_dst, src, nbytes);
}

void CpuBackend::copy_from_host(void* dst, const void* host_src, std::size_t nbytes, int) {
  std::memcpy(dst, host_src, nbytes);
}

void CpuBackend::fill(Tensor& out, double value) {
  TANDEM_DISPATCH_ALL(out.dtype(), "fill", [&] {
    scalar_t* data = out.data<scalar_t>();
    const auto v = convert_scalar<scalar_t>(value);
    cpu::parallel_for(out.numel(), 1, cpu::kElementwiseGrain,
                      [&](std::int64_t b, std::int64_t e) { std::fill(data + b, data + e, v); });
  });
}

void CpuBackend::cast(const Tensor& in, Tensor& out) {
  TANDEM_DISPATCH_ALL(in.dtype(), "cast", [&] {
    using in_t = scalar_t;
    const in_t* src = in.data<in_t>();
    TANDEM_DISPATCH_ALL(out.dtype(), "cast", [&] {
      scalar_t* dst = out.data<scalar_t>();
      cpu::parallel_for(in.numel(), 1, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) dst[i] = convert_scalar<scalar_t>(src[i]);
      });
    });
  });
}

namespace {

template <typename T>
void copy_strided_typed(const T* src, const StridedView& src_view, T* dst, const StridedView& dst_view,
                        const Shape& shape) {
  const cpu::StridedLoop<2> loop(shape, {dst_view.strides, src_view.strides});
  loop.run([&](const std::array<std::int64_t, 2>& off, std::int64_t n, const std::array<std::int64_t, 2>& st) {
    T* d = dst + dst_view.offset + off[0];
    const T* s = src + src_view.offset + off[1];
    if (st[0] == 1 && st[1] == 1) {
      std::memcpy(d, s, n * sizeof(T));
    } else {
      for (std::int64_t i = 0; i < n; ++i) d[i * st[0]] = s[i * st[1]];
    }
  });
}

}  // namespace

void CpuBackend::copy_strided(const Tensor& src, const StridedView& src_view, Tensor& dst,
                              const StridedView& dst_view, const Shape& shape) {
  if (shape_numel(shape) == 0) return;
  // Only the element width matters for a copy.
  switch (dtype_size(src.dtype())) {
    case 1:
      copy_strided_typed(static_cast<const std::uint8_t*>(src.raw_data()), src_view,
                         static_cast<std::uint8_t*>(dst.raw_data()), dst_view, shape);
      break;
    case 2:
      copy_strided_typed(static_cast<const std::uint16_t*>(src.raw_data()), src_view,
                         static_cast<std::uint16_t*>(dst.raw_data()), dst_view, shape);
      break;
    case 4:
      copy_strided_typed(static_cast<const std::uint32_t*>(src.raw_data()), src_view,
                         static_cast<std::uint32_t*>(dst.raw_data()), dst_view, shape);
      break;
    case 8:
      copy_strided_typed(static_cast<const std::uint64_t*>(src.raw_data()), src_view,
                         static_cast<std::uint64_t*>(dst.raw_data()), dst_view, shape);
      break;
    default:
      TANDEM_FAIL("copy_strided: unsupported element size ", dtype_size(src.dtype()));
  }
}

}  // namespace tandem
