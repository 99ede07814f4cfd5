#include "core/cpu/gemm_choice.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "core/cpu/measured_choice.h"
#include "core/cpu/parallel.h"
#include "core/deterministic.h"
#include "core/error.h"
#include "core/half_types.h"
#include "core/kernel_choices.h"

namespace tandem {
namespace cpu {

namespace {

// Products under this many multiply-adds are not timed (see the header).
constexpr std::int64_t kTimedFrom = 32 * 32 * 32;
// Products over this many (4096^3) are timed on a smaller shape of the same proportions. At 2048^3
// the libraries have not reached their full rate, and which is faster there need not be which is
// faster at 4096^3: a 4096 class timed at 2048 took the slower library (docs/performance.md, "CPU
// kernels: the fastest library per shape"; bench id gemm.n4096.t2).
constexpr std::int64_t kTimedUpTo = std::int64_t(1) << 36;

template <typename T>
const char* dtype_word() {
  if constexpr (std::is_same_v<T, float>) return "f32";
  else if constexpr (std::is_same_v<T, double>) return "f64";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "i32";
  else if constexpr (std::is_same_v<T, bfloat16>) return "bf16";
  else return "i64";
}

int log2_floor(std::int64_t x) { return 63 - __builtin_clzll(static_cast<unsigned long long>(x)); }

bool parse_backend(const std::string& word, GemmBackend* out) {
  for (GemmBackend b : kGemmBackends) {
    if (word == gemm_backend_name(b)) {
      *out = b;
      return true;
    }
  }
  return false;
}

// TANDEM_GEMM, read at every lookup (a getenv is nothing beside a product). A name this build
// cannot run is an error, not a silent fallback.
struct Forced {
  bool set = false;
  GemmBackend backend = GemmBackend::kEigen;
};

Forced forced_backend() {
  Forced f;
  const char* env = std::getenv("TANDEM_GEMM");
  if (env == nullptr || *env == 0 || std::strcmp(env, "auto") == 0) return f;
  TANDEM_CHECK(parse_backend(env, &f.backend), "TANDEM_GEMM=", env, ": expected auto, openblas, onednn or eigen");
  TANDEM_CHECK(gemm_backend_supports<float>(f.backend), "TANDEM_GEMM=", env, ": this build has no ", env,
               " (see core/BUILD.bazel: --define=tandem_blas / tandem_dnnl)");
  f.set = true;
  return f;
}

// Times every candidate on a product of this shape (synthetic data).
template <typename T>
std::vector<double> time_candidates(const std::vector<GemmBackend>& candidates, std::int64_t m, std::int64_t n,
                                    std::int64_t k, bool ta, bool tb) {
  std::vector<T> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n)),
      c(static_cast<std::size_t>(m * n));
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<T>(static_cast<int>(i % 7) - 3);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<T>(static_cast<int>(i % 5) - 2);
  const std::int64_t lda = ta ? m : k, ldb = tb ? k : n, work = m * n * k;
  const int rounds = work >= (std::int64_t(1) << 32) ? 1 : work >= (std::int64_t(1) << 26) ? 3 : 5;
  const int repeats = static_cast<int>(std::clamp<std::int64_t>((std::int64_t(1) << 21) / work, 1, 64));
  return time_interleaved(
      candidates.size(),
      [&](std::size_t i) { gemm_on(candidates[i], a.data(), lda, b.data(), ldb, c.data(), n, m, n, k, ta, tb, false); },
      rounds, repeats);
}

}  // namespace

template <typename T>
GemmBackend gemm_backend_for(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb) {
  if constexpr (std::is_same_v<T, bfloat16>) return GemmBackend::kOneDnn;  // the only one (bf16_products_native)
  const Forced forced = forced_backend();
  if (forced.set && gemm_backend_supports<T>(forced.backend)) return forced.backend;
  // Deterministic mode: one library per dtype, whatever the shape, timing or threads; one that
  // takes its thread count from OpenMP, so that a serial call is serial (core/cpu/matmul.cc).
  if (deterministic())
    return gemm_backend_supports<T>(GemmBackend::kOneDnn) ? GemmBackend::kOneDnn : GemmBackend::kEigen;
  // The default first: measured_choice falls back on candidate 0.
  const GemmBackend fallback =
      gemm_backend_supports<T>(GemmBackend::kOpenBlas) ? GemmBackend::kOpenBlas : GemmBackend::kEigen;
  std::vector<GemmBackend> candidates = {fallback};
  for (GemmBackend b : kGemmBackends) {
    if (b != fallback && gemm_backend_supports<T>(b)) candidates.push_back(b);
  }
  if (candidates.size() < 2 || m * n * k < kTimedFrom) return fallback;
  // Per thread and dtype (a static of this instantiation): no lock, nothing shared; started
  // again when a resumed snapshot pins its run's choices.
  thread_local std::unordered_map<std::uint64_t, GemmBackend> memo;
  thread_local unsigned memo_generation = 0;
  if (memo_generation != kernel_choices_generation()) memo.clear(), memo_generation = kernel_choices_generation();
  const std::uint64_t code = gemm_class_code(m, n, k, ta, tb);
  if (const auto it = memo.find(code); it != memo.end()) return it->second;

  const std::string key = gemm_class_key<T>("gemm", m, n, k, ta, tb);
  std::vector<std::string> names;
  for (GemmBackend b : candidates) names.push_back(gemm_backend_name(b));
  // A huge product is timed on a smaller one (its longest side halved until it is at most 2^36
  // multiply-adds, 4096^3, a fraction of a second a candidate: docs/performance.md, "CPU kernels:
  // the fastest library per shape"): the first call of an 8192^3 class would otherwise stall for
  // seconds per candidate.
  const GemmShape timed = gemm_timed_shape(m, n, k);
  const std::int64_t tm = timed.m, tn = timed.n, tk = timed.k;
  // Without timing (TANDEM_KERNEL_TUNING=fixed): oneDNN where it runs this dtype. Its JIT kernels
  // follow the processor's instruction sets, where Debian's OpenBLAS runs its Haswell kernels on
  // processors it does not know (see the header).
  const std::size_t fixed = static_cast<std::size_t>(
      std::find(candidates.begin(), candidates.end(), GemmBackend::kOneDnn) - candidates.begin());
  bool recorded = false;
  const std::size_t chosen = measured_choice(
      key, names, [&] { return time_candidates<T>(candidates, tm, tn, tk, ta, tb); },
      2.0 * double(tm) * double(tn) * double(tk),
      std::to_string(tm) + "x" + std::to_string(tn) + "x" + std::to_string(tk), &recorded,
      fixed < candidates.size() ? fixed : 0);
  if (recorded) memo.emplace(code, candidates[chosen]);
  return candidates[chosen];
}

std::uint64_t gemm_class_code(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb) {
  // 6 bits per log2 (< 64), 2 for the transposes, the thread count above them.
  return (static_cast<std::uint64_t>(max_chunks()) << 20) | (std::uint64_t(ta) << 19) | (std::uint64_t(tb) << 18) |
         (static_cast<std::uint64_t>(log2_floor(m)) << 12) | (static_cast<std::uint64_t>(log2_floor(n)) << 6) |
         static_cast<std::uint64_t>(log2_floor(k));
}

GemmShape gemm_timed_shape(std::int64_t m, std::int64_t n, std::int64_t k) {
  GemmShape s{m, n, k};
  while (s.m * s.n * s.k > kTimedUpTo) {
    std::int64_t& longest = s.m >= s.n && s.m >= s.k ? s.m : (s.n >= s.k ? s.n : s.k);
    longest = (longest + 1) / 2;
  }
  return s;
}

template <typename T>
std::string gemm_class_key(const char* family, std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb) {
  char key[128];
  std::snprintf(key, sizeof(key), "%s.%s.t%d.%c%c.m%d.n%d.k%d", family, dtype_word<T>(), max_chunks(), ta ? 'T' : 'N',
                tb ? 'T' : 'N', log2_floor(m), log2_floor(n), log2_floor(k));
  return key;
}

bool gemm_backend_forced() { return forced_backend().set; }

bool bf16_products_native() {
  if (!gemm_backend_supports<bfloat16>(GemmBackend::kOneDnn)) return false;
  const Forced forced = forced_backend();
  return !forced.set || forced.backend == GemmBackend::kOneDnn;
}

template std::string gemm_class_key<float>(const char*, std::int64_t, std::int64_t, std::int64_t, bool, bool);
template std::string gemm_class_key<double>(const char*, std::int64_t, std::int64_t, std::int64_t, bool, bool);
template std::string gemm_class_key<std::int32_t>(const char*, std::int64_t, std::int64_t, std::int64_t, bool, bool);
template std::string gemm_class_key<std::int64_t>(const char*, std::int64_t, std::int64_t, std::int64_t, bool, bool);
template GemmBackend gemm_backend_for<float>(std::int64_t, std::int64_t, std::int64_t, bool, bool);
template GemmBackend gemm_backend_for<double>(std::int64_t, std::int64_t, std::int64_t, bool, bool);
template GemmBackend gemm_backend_for<std::int32_t>(std::int64_t, std::int64_t, std::int64_t, bool, bool);
template GemmBackend gemm_backend_for<std::int64_t>(std::int64_t, std::int64_t, std::int64_t, bool, bool);
template std::string gemm_class_key<bfloat16>(const char*, std::int64_t, std::int64_t, std::int64_t, bool, bool);
template GemmBackend gemm_backend_for<bfloat16>(std::int64_t, std::int64_t, std::int64_t, bool, bool);

}  // namespace cpu
}  // namespace tandem
