// Which library runs a product, chosen by measurement on the machine the program runs on, never
// by the processor's vendor: Debian's OpenBLAS runs its Haswell kernels on processors it does not
// know (AVX-512 AMD and Intel alike), oneDNN picks its JIT kernels at run time, Eigen's depend on
// the build flags; which wins depends on the shape, the thread count and the processor.
//
// Shapes are grouped into classes: the power of two below m, n and k, the transposes, the dtype
// and the thread count. At a class's first product every library that can run it is timed on a
// product of that shape (synthetic data, interleaved rounds, the fastest round counts) and the
// fastest is kept for the class, on disk, shared by every process on the machine
// (core/cpu/measured_choice.h). Products under 32^3 multiply-adds are not timed: OpenBLAS where it
// can (oneDNN's per-call cost dominates there), Eigen otherwise; those over 4096^3 are timed on a
// smaller product (the longest side halved until it fits: gemm_timed_shape).
//
// Environment:
//   TANDEM_GEMM=auto|openblas|onednn|eigen   a library for every product it can run (default auto)
//   TANDEM_CACHE_DIR=dir                     where the choices are kept (measured_choice.h)
#pragma once

#include <cstdint>
#include <string>

#include "core/cpu/gemm_kernels.h"

namespace tandem {
namespace cpu {

// The library for a product of T of this shape on this thread (1 thread inside a parallel region).
template <typename T>
GemmBackend gemm_backend_for(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb);

// The key of a product's class for a choice made per class, e.g. "gemm.f32.t2.NT.m6.n9.k9" for
// the family "gemm" (the thread count is this thread's: 1 inside a parallel region).
template <typename T>
std::string gemm_class_key(const char* family, std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb);

// A product's class for this thread as one number (thread count, transposes, log2 of m, n and k;
// m, n, k >= 1): what gemm_class_key spells out but the family and the dtype. It keys the per-thread
// memos in front of measured_choice for the choices made at every product, so that the text key
// is formatted and the choices' table locked only at a class's first product on a thread (doing
// both at every product showed in the LM's one-thread step: docs/performance.md, "Costs outside
// the products"; bench id lm.train.adam.t1).
std::uint64_t gemm_class_code(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb);

// The shape a product of m x n x k is timed on: itself up to 2^36 multiply-adds (4096^3), else
// its longest side halved until it fits.
struct GemmShape {
  std::int64_t m, n, k;
};
GemmShape gemm_timed_shape(std::int64_t m, std::int64_t n, std::int64_t k);

// Whether TANDEM_GEMM names a library (not auto).
bool gemm_backend_forced();

// Whether bf16 products run as bf16 (oneDNN, on a processor with bf16 dot products; f32 sums,
// each result rounded once) rather than widened to f32 (core/ops/half_compute.h). TANDEM_GEMM
// naming another library widens them, so that every product runs on that library.
bool bf16_products_native();

}  // namespace cpu
}  // namespace tandem
