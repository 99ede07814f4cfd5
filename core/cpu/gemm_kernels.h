// The product libraries tandem can run one GEMM on: OpenBLAS, oneDNN's matmul and Eigen. Which
// one runs a given shape is decided by measurement (core/cpu/gemm_choice.h); this file only runs
// a product on the library it is told.
#pragma once

#include <cstdint>

namespace tandem {
namespace cpu {

enum class GemmBackend { kOpenBlas, kOneDnn, kEigen };

constexpr GemmBackend kGemmBackends[] = {GemmBackend::kOpenBlas, GemmBackend::kOneDnn, GemmBackend::kEigen};

const char* gemm_backend_name(GemmBackend backend);  // "openblas", "onednn", "eigen"

// Whether this build can run products of T on the backend (OpenBLAS: f32/f64 when linked;
// oneDNN: f32 when linked, and bf16 where the processor has bf16 dot products; Eigen: every type
// but bf16, which it would sum in bf16).
template <typename T>
bool gemm_backend_supports(GemmBackend backend);

// c [m, n] = (or += when accumulate) op(a) op(b) on the backend, with a stored [m, k] ([k, m]
// when ta) with rows lda apart, b stored [k, n] ([n, k] when tb) with rows ldb apart, and c's
// rows ldc apart. m, n, k > 0, and gemm_backend_supports<T>(backend). Threads: the library's own
// inside one call, or the calling thread alone when called inside a parallel region.
template <typename T>
void gemm_on(GemmBackend backend, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc,
             std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, bool accumulate);

}  // namespace cpu
}  // namespace tandem
