// One dense product on raw row-major buffers, for CPU kernels that drive GEMMs themselves
// (the convolution), on the library measured fastest for the shape (core/cpu/gemm_choice.h). Called from inside a parallel region it runs on the calling thread alone.
#pragma once

#include <cstdint>

namespace tandem {
namespace cpu {

// c [m, n] = (or += when accumulate) op(a) op(b), with a stored [m, k] ([k, m] when transpose_a)
// and b stored [k, n] ([n, k] when transpose_b). ldc is c's row stride (n when 0).
template <typename T>
void gemm(const T* a, const T* b, T* c, std::int64_t m, std::int64_t n, std::int64_t k, bool transpose_a,
          bool transpose_b, bool accumulate, std::int64_t ldc = 0);

}  // namespace cpu
}  // namespace tandem
