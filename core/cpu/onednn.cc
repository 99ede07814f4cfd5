#include "core/cpu/onednn.h"

#ifdef TANDEM_HAS_DNNL
#include <vector>

#include "core/cpu/parallel.h"

namespace tandem {
namespace cpu {

dnnl::engine& onednn_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& onednn_stream() {
  thread_local dnnl::stream stream(onednn_engine());
  return stream;
}

bool onednn_native_bf16() {
  static const bool native = [] {
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & bf16) == bf16;
  }();
  return native;
}

int onednn_threads() { return max_chunks(); }

dnnl::memory onednn_scratchpad(const dnnl::memory::desc& md) {
  // Grown, never shrunk: a few MB at most per thread.
  thread_local std::vector<unsigned char> buffer;
  if (buffer.size() < md.get_size()) buffer.resize(md.get_size());
  return dnnl::memory(md, onednn_engine(), buffer.data());
}

dnnl::primitive_attr onednn_matmul_attr(bool accumulate) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  return attr;
}

dnnl::matmul::primitive_desc onednn_matmul_pd(const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                                              const dnnl::memory::desc& c, const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::matmul::primitive_desc(onednn_engine(), a, b, c, attr);
#else
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, onednn_engine());
#endif
}

}  // namespace cpu
}  // namespace tandem
#endif
