// oneDNN (Debian's libdnnl-dev; third_party/onednn.BUILD), the JIT kernels for the processor the
// program runs on. TANDEM_HAS_DNNL is defined when the build links it (`--define=tandem_dnnl=off`
// and the clang sanitizer builds leave it out: its OpenMP runtime is GCC's libgomp). Only CPU
// kernels include this header; it keeps <dnnl.hpp> out of everything else.
//
// oneDNN 3.0 changed how primitive descriptors are made (the operation descriptors went away);
// the makers below hide that, so tandem builds against 2.x (Debian 12) and 3.x (Debian 13).
#pragma once

#ifdef TANDEM_HAS_DNNL
#include <dnnl.hpp>

namespace tandem {
namespace cpu {

// The CPU engine, made once.
dnnl::engine& onednn_engine();

// A stream per thread: tandem calls kernels from inside its own parallel regions, and the
// products run there are serial, one per thread.
dnnl::stream& onednn_stream();

// Whether this processor runs oneDNN's bf16 products natively (AVX512-BF16 or AMX: bf16 dot
// products at twice f32's rate). Elsewhere oneDNN emulates them or has none, and tandem widens
// bf16 operands to f32 instead (core/ops/half_compute.h).
bool onednn_native_bf16();

// The thread count a primitive made now would be built for: 1 inside a parallel region (oneDNN
// then runs it on the calling thread alone), else OpenMP's. Part of every primitive cache key.
int onednn_threads();

// This thread's scratchpad memory for a primitive made with scratchpad_mode::user. Every tandem
// primitive is: Debian's oneDNN keeps its own scratchpad in one global buffer (it is not built
// for concurrent execution), so two threads running products at once (tandem's parallel regions
// run one serial product per thread) overwrote each other's temporaries.
dnnl::memory onednn_scratchpad(const dnnl::memory::desc& md);

// The attributes of every tandem product: a user scratchpad (onednn_scratchpad), and with
// `accumulate` the sum post-op, which reads C before writing it (C += A B, BLAS's beta = 1).
dnnl::primitive_attr onednn_matmul_attr(bool accumulate);

// A matmul primitive descriptor (C = A B with the attributes) on the engine, for 2.x and 3.x.
dnnl::matmul::primitive_desc onednn_matmul_pd(const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                                              const dnnl::memory::desc& c, const dnnl::primitive_attr& attr);

}  // namespace cpu
}  // namespace tandem
#endif
