#include "core/cpu/gemm_kernels.h"

#include <Eigen/Core>
#include <algorithm>
#include <climits>
#include <mutex>
#include <type_traits>
#include <unordered_map>

#include "core/cpu/blas.h"
#include "core/cpu/onednn.h"
#include "core/error.h"
#include "core/half_types.h"
#include "core/hash.h"

namespace tandem {
namespace cpu {

namespace {

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <typename T>
void eigen_gemm(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc, std::int64_t m,
                std::int64_t n, std::int64_t k, bool ta, bool tb, bool accumulate) {
  using Stride = Eigen::OuterStride<>;
  Eigen::Map<RowMatrix<T>, 0, Stride> C(c, m, n, Stride(ldc));
  Eigen::Map<const RowMatrix<T>, 0, Stride> A(a, ta ? k : m, ta ? m : k, Stride(lda));
  Eigen::Map<const RowMatrix<T>, 0, Stride> B(b, tb ? n : k, tb ? k : n, Stride(ldb));
  auto assign = [&](const auto& product) {
    if (accumulate) C.noalias() += product;
    else C.noalias() = product;
  };
  if (!ta && !tb) assign(A * B);
  else if (ta && !tb) assign(A.transpose() * B);
  else if (!ta && tb) assign(A * B.transpose());
  else assign(A.transpose() * B.transpose());
}

template <typename T>
void openblas_gemm(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc, std::int64_t m,
                   std::int64_t n, std::int64_t k, bool ta, bool tb, bool accumulate) {
#ifdef TANDEM_HAS_BLAS
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    const auto op_a = ta ? CblasTrans : CblasNoTrans, op_b = tb ? CblasTrans : CblasNoTrans;
    // beta = 0 overwrites C without reading it, so C may start uninitialised.
    const T beta = accumulate ? T(1) : T(0);
    if constexpr (std::is_same_v<T, float>) {
      cblas_sgemm(CblasRowMajor, op_a, op_b, int(m), int(n), int(k), 1.0f, a, int(lda), b, int(ldb), beta, c,
                  int(ldc));
    } else {
      cblas_dgemm(CblasRowMajor, op_a, op_b, int(m), int(n), int(k), 1.0, a, int(lda), b, int(ldb), beta, c,
                  int(ldc));
    }
    return;
  }
#endif
  eigen_gemm(a, lda, b, ldb, c, ldc, m, n, k, ta, tb, accumulate);  // not reached: gemm_backend_supports
}

#ifdef TANDEM_HAS_DNNL
// One oneDNN matmul primitive per product shape, layout and thread count, made at first use (a JIT
// compilation; what it costs: docs/performance.md, "Costs outside the products") and kept: a
// training step repeats the same few shapes. The cache is bounded (shapes that vary every step, as
// variable-length sequences make, would otherwise grow it forever).
struct MatmulKey {
  std::int64_t m, n, k, lda, ldb, ldc;
  bool ta, tb, accumulate;
  int threads;
  dnnl::memory::data_type type;
  bool operator==(const MatmulKey& o) const {
    return m == o.m && n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && ldc == o.ldc && ta == o.ta &&
           tb == o.tb && accumulate == o.accumulate && threads == o.threads && type == o.type;
  }
};

struct MatmulKeyHash {
  std::size_t operator()(const MatmulKey& key) const {
    Fnv1a64 h;
    for (std::int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc,
                           std::int64_t(key.ta) | std::int64_t(key.tb) << 1 | std::int64_t(key.accumulate) << 2,
                           std::int64_t(key.threads), std::int64_t(key.type)}) {
      h.mix(static_cast<std::uint64_t>(v));
    }
    return static_cast<std::size_t>(h.digest());
  }
};

constexpr std::size_t kMaxCachedMatmuls = 1024;

// f32 products, and bf16 ones (f32 sums, each result rounded once to bf16; the sum post-op of
// `accumulate` adds C in f32 before that one rounding).
template <typename T>
void onednn_gemm(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc, std::int64_t m,
                 std::int64_t n, std::int64_t k, bool ta, bool tb, bool accumulate) {
  using dnnl::memory;
  constexpr memory::data_type type = std::is_same_v<T, float> ? memory::data_type::f32 : memory::data_type::bf16;
  // A [m, k] stored transposed is the same matrix with strides {1, lda}: no copy either way.
  const MatmulKey key{m, n, k, lda, ldb, ldc, ta, tb, accumulate, onednn_threads(), type};
  const memory::desc a_md({m, k}, type, ta ? memory::dims{1, lda} : memory::dims{lda, 1});
  const memory::desc b_md({k, n}, type, tb ? memory::dims{1, ldb} : memory::dims{ldb, 1});
  const memory::desc c_md({m, n}, type, memory::dims{ldc, 1});
  static std::mutex mutex;
  static std::unordered_map<MatmulKey, std::pair<dnnl::matmul, memory::desc>, MatmulKeyHash> cache;
  dnnl::matmul primitive;
  memory::desc scratchpad_md;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it == cache.end()) {
      if (cache.size() >= kMaxCachedMatmuls) cache.clear();
      const auto pd = onednn_matmul_pd(a_md, b_md, c_md, onednn_matmul_attr(accumulate));
      it = cache.emplace(key, std::make_pair(dnnl::matmul(pd), pd.scratchpad_desc())).first;
    }
    primitive = it->second.first;  // a shared handle: the entry may be evicted while this one runs
    scratchpad_md = it->second.second;
  }
  auto& engine = onednn_engine();
  memory am(a_md, engine, const_cast<T*>(a)), bm(b_md, engine, const_cast<T*>(b)), cm(c_md, engine, c);
  auto& stream = onednn_stream();
  primitive.execute(stream, {{DNNL_ARG_SRC, am},
                             {DNNL_ARG_WEIGHTS, bm},
                             {DNNL_ARG_DST, cm},
                             {DNNL_ARG_SCRATCHPAD, onednn_scratchpad(scratchpad_md)}});
  stream.wait();
}
#endif

}  // namespace

const char* gemm_backend_name(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::kOpenBlas: return "openblas";
    case GemmBackend::kOneDnn: return "onednn";
    case GemmBackend::kEigen: return "eigen";
  }
  return "?";
}

template <typename T>
bool gemm_backend_supports(GemmBackend backend) {
  // bf16 products only where oneDNN runs them natively (Eigen's would sum in bf16).
  if constexpr (std::is_same_v<T, bfloat16>) {
#ifdef TANDEM_HAS_DNNL
    return backend == GemmBackend::kOneDnn && onednn_native_bf16();
#else
    return false;
#endif
  }
  switch (backend) {
    case GemmBackend::kEigen: return true;
    case GemmBackend::kOpenBlas:
#ifdef TANDEM_HAS_BLAS
      return std::is_same_v<T, float> || std::is_same_v<T, double>;
#else
      return false;
#endif
    case GemmBackend::kOneDnn:
#ifdef TANDEM_HAS_DNNL
      return std::is_same_v<T, float>;
#else
      return false;
#endif
  }
  return false;
}

template <typename T>
void gemm_on(GemmBackend backend, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc,
             std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, bool accumulate) {
  // BLAS takes int sizes; a product past them runs on Eigen.
  if (backend == GemmBackend::kOpenBlas && std::max({m, n, k, lda, ldb, ldc}) > INT_MAX) backend = GemmBackend::kEigen;
  TANDEM_CHECK(gemm_backend_supports<T>(backend), "gemm: this build cannot run this dtype's products on ",
               gemm_backend_name(backend));
  switch (backend) {
    case GemmBackend::kOpenBlas: openblas_gemm(a, lda, b, ldb, c, ldc, m, n, k, ta, tb, accumulate); return;
    case GemmBackend::kOneDnn:
#ifdef TANDEM_HAS_DNNL
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bfloat16>) {
        onednn_gemm(a, lda, b, ldb, c, ldc, m, n, k, ta, tb, accumulate);
        return;
      }
#endif
      break;
    case GemmBackend::kEigen: break;
  }
  if constexpr (!std::is_same_v<T, bfloat16>) eigen_gemm(a, lda, b, ldb, c, ldc, m, n, k, ta, tb, accumulate);
}

#define TANDEM_GEMM_KERNELS(T)                                                                                 \
  template bool gemm_backend_supports<T>(GemmBackend);                                                          \
  template void gemm_on<T>(GemmBackend, const T*, std::int64_t, const T*, std::int64_t, T*, std::int64_t,       \
                           std::int64_t, std::int64_t, std::int64_t, bool, bool, bool);
TANDEM_GEMM_KERNELS(float)
TANDEM_GEMM_KERNELS(double)
TANDEM_GEMM_KERNELS(std::int32_t)
TANDEM_GEMM_KERNELS(std::int64_t)
TANDEM_GEMM_KERNELS(bfloat16)
#undef TANDEM_GEMM_KERNELS

}  // namespace cpu
}  // namespace tandem
