#include "core/cpu/gemm_choice.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "core/cpu/onednn.h"
#include "core/cpu/parallel.h"
#include "core/error.h"
#include "core/hash.h"

namespace tandem {
namespace cpu {

namespace {

// Products under this many multiply-adds are not timed (see the header).
constexpr std::int64_t kTimedFrom = 32 * 32 * 32;

template <typename T>
const char* dtype_word() {
  if constexpr (std::is_same_v<T, float>) return "f32";
  else if constexpr (std::is_same_v<T, double>) return "f64";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "i32";
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

// What makes timings from one machine invalid on another: the processor, its instruction sets,
// the libraries linked and how this build was compiled.
std::string machine_signature() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(cpuinfo, line) && (model.empty() || flags.empty())) {
    if (model.empty() && line.rfind("model name", 0) == 0) model = line;
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = line;
  }
  std::ostringstream what;
  what << model << '|' << flags;
#ifdef TANDEM_HAS_BLAS
  what << "|openblas";
#endif
#ifdef TANDEM_HAS_DNNL
  what << "|onednn " << DNNL_VERSION_MAJOR << '.' << DNNL_VERSION_MINOR << '.' << DNNL_VERSION_PATCH;
#endif
#ifdef __AVX512F__
  what << "|avx512";
#endif
#ifdef __AVX2__
  what << "|avx2";
#endif
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(Fnv1a64().bytes(what.str()).digest()));
  return hex;
}

// mkdir -p; true when the folder exists afterwards.
bool make_folders(const std::string& path) {
  for (std::size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') ::mkdir(path.substr(0, i).c_str(), 0755);
  }
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string choice_file_path() {
  std::string dir;
  if (const char* d = std::getenv("TANDEM_CACHE_DIR"); d && *d) dir = d;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) dir = std::string(x) + "/tandem";
  else if (const char* h = std::getenv("HOME"); h && *h) dir = std::string(h) + "/.cache/tandem";
  if (dir.empty() || !make_folders(dir)) return "";
  return dir + "/gemm-" + machine_signature() + ".txt";
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Times every candidate on a product of this shape and returns the seconds of each one's fastest
// round. Rounds interleave the candidates, so a burst of noise hits them alike.
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
  std::vector<double> best(candidates.size(), std::numeric_limits<double>::infinity());
  for (GemmBackend backend : candidates) gemm_on(backend, a.data(), lda, b.data(), ldb, c.data(), n, m, n, k, ta, tb, false);
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const double start = seconds_now();
      for (int r = 0; r < repeats; ++r) {
        gemm_on(candidates[i], a.data(), lda, b.data(), ldb, c.data(), n, m, n, k, ta, tb, false);
      }
      best[i] = std::min(best[i], (seconds_now() - start) / repeats);
    }
  }
  return best;
}

// The choices of this process, backed by the machine's file.
struct ChoiceStore {
  std::mutex mutex;
  std::unordered_map<std::string, GemmBackend> choices;
  bool path_known = false;
  std::string path;
};

ChoiceStore& store() {
  static ChoiceStore* s = new ChoiceStore;  // never destroyed: products may run during exit
  return *s;
}

// Reads every "<class> <backend> ..." line of the file into the map.
void read_choices(int fd, std::unordered_map<std::string, GemmBackend>& into) {
  std::string text;
  char buffer[4096];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t got; (got = ::read(fd, buffer, sizeof(buffer))) > 0;) text.append(buffer, static_cast<std::size_t>(got));
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string key, name;
    GemmBackend backend;
    if (words >> key >> name && key[0] != '#' && parse_backend(name, &backend)) into.emplace(key, backend);
  }
}

// One line per class, e.g. "f32.t2.NT.m6.n9.k9 onednn openblas=180.4 onednn=213.4 eigen=151.5
// (100x1000x784)": the choice, then every candidate's GFLOP/s on the shape that was timed.
template <typename T>
std::string calibrate(const std::string& key, std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb,
                      GemmBackend* chosen) {
  std::vector<GemmBackend> candidates;
  for (GemmBackend b : kGemmBackends) {
    if (gemm_backend_supports<T>(b)) candidates.push_back(b);
  }
  const std::vector<double> seconds = time_candidates<T>(candidates, m, n, k, ta, tb);
  const std::size_t best = static_cast<std::size_t>(std::min_element(seconds.begin(), seconds.end()) - seconds.begin());
  *chosen = candidates[best];
  std::ostringstream line;
  line << key << ' ' << gemm_backend_name(*chosen);
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    char gflops[32];
    std::snprintf(gflops, sizeof(gflops), "%.1f", 2.0 * double(m) * double(n) * double(k) / seconds[i] / 1e9);
    line << ' ' << gemm_backend_name(candidates[i]) << '=' << gflops;
  }
  line << " (" << m << 'x' << n << 'x' << k << ")\n";
  return line.str();
}

}  // namespace

std::string gemm_choice_file() {
  ChoiceStore& s = store();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.path_known) s.path = choice_file_path(), s.path_known = true;
  return s.path;
}

template <typename T>
GemmBackend gemm_backend_for(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb) {
  const Forced forced = forced_backend();
  if (forced.set && gemm_backend_supports<T>(forced.backend)) return forced.backend;
  const GemmBackend fallback =
      gemm_backend_supports<T>(GemmBackend::kOpenBlas) ? GemmBackend::kOpenBlas : GemmBackend::kEigen;
  int supported = 0;
  for (GemmBackend b : kGemmBackends) supported += gemm_backend_supports<T>(b) ? 1 : 0;
  if (supported < 2 || m * n * k < kTimedFrom) return fallback;

  char key[96];
  std::snprintf(key, sizeof(key), "%s.t%d.%c%c.m%d.n%d.k%d", dtype_word<T>(), max_chunks(), ta ? 'T' : 'N',
                tb ? 'T' : 'N', log2_floor(m), log2_floor(n), log2_floor(k));
  ChoiceStore& s = store();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (auto it = s.choices.find(key); it != s.choices.end()) return it->second;
  if (!s.path_known) s.path = choice_file_path(), s.path_known = true;
  // Another process on this machine may have timed the class already: read the file under its
  // lock, and time the class only when it is still missing (the lock keeps the other ranks from
  // computing on the cores meanwhile).
  const int fd = s.path.empty() ? -1 : ::open(s.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ::flock(fd, LOCK_EX);
    read_choices(fd, s.choices);
  }
  GemmBackend chosen;
  if (auto it = s.choices.find(key); it != s.choices.end()) {
    chosen = it->second;
  } else {
    const std::string line = calibrate<T>(key, m, n, k, ta, tb, &chosen);
    s.choices.emplace(key, chosen);
    if (fd >= 0) {
      ::lseek(fd, 0, SEEK_END);
      if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
        std::fprintf(stderr, "tandem: could not record a GEMM choice in %s\n", s.path.c_str());
      }
    }
  }
  if (fd >= 0) ::close(fd);  // releases the lock
  return chosen;
}

template GemmBackend gemm_backend_for<float>(std::int64_t, std::int64_t, std::int64_t, bool, bool);
template GemmBackend gemm_backend_for<double>(std::int64_t, std::int64_t, std::int64_t, bool, bool);
template GemmBackend gemm_backend_for<std::int32_t>(std::int64_t, std::int64_t, std::int64_t, bool, bool);
template GemmBackend gemm_backend_for<std::int64_t>(std::int64_t, std::int64_t, std::int64_t, bool, bool);

}  // namespace cpu
}  // namespace tandem
