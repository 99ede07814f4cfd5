#include "core/cpu/onednn.h"

#ifdef TANDEM_HAS_DNNL
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

int onednn_threads() { return max_chunks(); }

}  // namespace cpu
}  // namespace tandem
#endif
