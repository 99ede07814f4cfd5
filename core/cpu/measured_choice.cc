#include "core/cpu/measured_choice.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/cpu/blas.h"
#include "core/cpu/onednn.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/kernel_choices.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tandem {
namespace cpu {

namespace {

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
  // OpenBLAS's kernels follow OPENBLAS_CORETYPE where it is set (Bazel's test sandbox drops it):
  // forced to Haswell on an AVX-512 processor its products run far slower (docs/performance.md,
  // "Running the benchmarks"), so timings taken under one core name do not hold under another.
  const char* core = openblas_get_corename();
  what << "|openblas " << (core ? core : "?");
#endif
#ifdef TANDEM_HAS_DNNL
  what << "|onednn " << DNNL_VERSION_MAJOR << '.' << DNNL_VERSION_MINOR << '.' << DNNL_VERSION_PATCH;
#endif
  // How the candidates are timed: a change that makes earlier timings stale (gemm_choice.cc's
  // kTimedUpTo, 2^33 -> 2^36 in timing 2) starts a new file.
  what << "|timing 2";
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

// The first folder that exists or can be made: TANDEM_CACHE_DIR, the user's cache folder, the
// test's own temporary folder (Bazel runs tests without HOME), else one under TMPDIR or /tmp.
std::string choice_file_path() {
  std::vector<std::string> folders;
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  if (!env("TANDEM_CACHE_DIR").empty()) {
    folders.push_back(env("TANDEM_CACHE_DIR"));  // asked for: nothing else
  } else {
    if (!env("XDG_CACHE_HOME").empty()) folders.push_back(env("XDG_CACHE_HOME") + "/tandem");
    if (!env("HOME").empty()) folders.push_back(env("HOME") + "/.cache/tandem");
    if (!env("TEST_TMPDIR").empty()) folders.push_back(env("TEST_TMPDIR") + "/tandem-cache");
    folders.push_back((env("TMPDIR").empty() ? std::string("/tmp") : env("TMPDIR")) + "/tandem-cache-" +
                      std::to_string(::getuid()));
  }
  for (const std::string& dir : folders) {
    if (!make_folders(dir) || ::access(dir.c_str(), W_OK) != 0) continue;
    return dir + "/choices-" + machine_signature() + ".txt";
  }
  std::fprintf(stderr,
               "tandem: no writable folder for the measured kernel choices (tried %s; set TANDEM_CACHE_DIR): each "
               "process measures its own, so two runs may pick different kernels and round differently\n",
               folders.front().c_str());
  return "";
}

// The choices of this process, backed by the machine's file under TANDEM_KERNEL_TUNING=measure.
//
// Two locks: `table` guards the maps for the moment of a lookup; `measuring` is held while one
// thread reads the file and measures. A measurement may make nested choices on the same thread
// (a convolution's products), hence recursive, and may run parallel regions: a worker of such a
// region that needs a choice the measurement has not made must not wait for the measuring thread,
// which waits for it at the region's end. It takes the fixed default for that one call,
// unrecorded; the callers make their nested choices before they measure, so this does not happen
// in practice.
struct ChoiceStore {
  std::mutex table;
  std::unordered_map<std::string, std::string> known;   // the file's lines (measure) or TANDEM_KERNEL_CHOICES's
  std::unordered_map<std::string, std::string> pinned;  // from a resumed snapshot: ahead of everything
  std::map<std::string, std::string> made;              // the answers this process gave
  bool fixed_file_read = false;
  bool measuring_outside_regions = false;  // guarded by table
  std::thread::id measurer;                // guarded by table

  std::recursive_mutex measuring;
  int depth = 0;  // nested measurements on the measuring thread
  int fd = -1;    // the file, locked, while depth > 0
  bool path_known = false;
  std::string path;

  const std::string& file() {
    if (!path_known) path = choice_file_path(), path_known = true;
    return path;
  }
};

ChoiceStore& store() {
  static ChoiceStore* s = new ChoiceStore;  // never destroyed: kernels may run during exit
  return *s;
}

// A function's static: a test may set it while other translation units are being initialised.
std::atomic<bool>& keep_under_load() {
  static std::atomic<bool> keep{[] {
    const char* env = std::getenv("TANDEM_KERNEL_TIMING_UNDER_LOAD");
    return env != nullptr && std::strcmp(env, "keep") == 0;
  }()};
  return keep;
}
std::atomic<int> tuning_set{-1};  // -1: TANDEM_KERNEL_TUNING decides
std::atomic<unsigned> generation{0};

// Reads every "<key> <name> ..." line of `text` into the map (the first line of a key wins).
void parse_choices(const std::string& text, std::unordered_map<std::string, std::string>& into) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string key, name;
    if (words >> key >> name && key[0] != '#') into.emplace(key, name);
  }
}

void read_choices(int fd, std::unordered_map<std::string, std::string>& into) {
  std::string text;
  char buffer[4096];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t got; (got = ::read(fd, buffer, sizeof(buffer))) > 0;) text.append(buffer, static_cast<std::size_t>(got));
  parse_choices(text, into);
}

// TANDEM_KERNEL_CHOICES's lines, read once (fixed mode): a file that cannot be read is an error,
// not a silent fall back on the defaults.
void read_fixed_file(ChoiceStore& s) {
  if (s.fixed_file_read) return;
  s.fixed_file_read = true;
  const char* path = std::getenv("TANDEM_KERNEL_CHOICES");
  if (path == nullptr || *path == 0) return;
  std::ifstream in(path);
  TANDEM_CHECK(in.good(), "TANDEM_KERNEL_CHOICES=", path, ": cannot read the file");
  std::ostringstream text;
  text << in.rdbuf();
  parse_choices(text.str(), s.known);
}

std::size_t index_of(const std::vector<std::string>& names, const std::string& name) {
  return static_cast<std::size_t>(std::find(names.begin(), names.end(), name) - names.begin());
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// What the machine was doing: CPU time of every process (from /proc/stat), this process's, and
// how many runnable threads belong to other processes at this instant.
struct LoadSample {
  double wall = 0, machine_busy = 0, own = 0;
  int others_running = 0;
  bool valid = false;
};

LoadSample sample_load() {
  LoadSample l;
  l.wall = seconds_now();
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  l.own = double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  std::ifstream stat("/proc/stat");
  std::string line;
  int running = -1;
  while (std::getline(stat, line)) {
    std::istringstream words(line);
    std::string name;
    words >> name;
    if (name == "cpu") {
      // user nice system idle iowait irq softirq steal
      long long v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (long long& x : v) words >> x;
      const double tick = double(::sysconf(_SC_CLK_TCK));
      l.machine_busy = double(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / tick;
    } else if (name == "procs_running") {
      words >> running;
    }
  }
  if (running < 0) return l;
  int own_running = 0;
  if (DIR* tasks = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(tasks)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream task(std::string("/proc/self/task/") + e->d_name + "/stat");
      std::string text;
      std::getline(task, text);
      const std::size_t close = text.rfind(')');  // "pid (name) S ...": the name may hold spaces
      if (close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'R') ++own_running;
    }
    ::closedir(tasks);
  }
  l.others_running = std::max(0, running - own_running);
  l.valid = true;
  return l;
}

// Whether other processes kept the machine busy between the two samples: threads of theirs
// runnable at both ends, or (over a span long enough for /proc/stat's ticks) more than a quarter
// of the machine's CPU time.
bool machine_was_busy(const LoadSample& before, const LoadSample& after) {
  if (!before.valid || !after.valid) return false;
  if (std::min(before.others_running, after.others_running) >= 1) return true;
  const double wall = after.wall - before.wall;
  if (wall < 0.05) return false;
  const double others = (after.machine_busy - before.machine_busy) - (after.own - before.own);
  return others > 0.25 * double(::sysconf(_SC_NPROCESSORS_ONLN)) * wall;
}

KernelTuning tuning_from_environment() {
  const char* env = std::getenv("TANDEM_KERNEL_TUNING");
  if (env == nullptr || *env == 0 || std::strcmp(env, "fixed") == 0) return KernelTuning::kFixed;
  TANDEM_CHECK(std::strcmp(env, "measure") == 0, "TANDEM_KERNEL_TUNING=", env, ": expected fixed or measure");
  return KernelTuning::kMeasure;
}

}  // namespace

void keep_measurements_under_load(bool keep) { keep_under_load().store(keep); }

std::string measured_choice_file() {
  ChoiceStore& s = store();
  std::lock_guard<std::recursive_mutex> lock(s.measuring);
  return s.file();
}

std::vector<double> time_interleaved(std::size_t candidates, const std::function<void(std::size_t)>& run, int rounds,
                                     int repeats) {
  std::vector<double> best(candidates, std::numeric_limits<double>::infinity());
  for (std::size_t i = 0; i < candidates; ++i) run(i);
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t i = 0; i < candidates; ++i) {
      const double start = seconds_now();
      for (int r = 0; r < repeats; ++r) run(i);
      best[i] = std::min(best[i], (seconds_now() - start) / repeats);
    }
  }
  return best;
}

std::string measured_word(const std::string& key, const std::function<bool(const std::string&)>& accept,
                          const std::function<std::pair<std::string, std::string>()>& measure,
                          const std::string& fixed) {
  ChoiceStore& s = store();
  // Under the table's lock: a pinned answer, one given before, or one from the file read.
  auto lookup = [&](std::string* word) {
    for (const auto* table : {&s.pinned, &s.known}) {
      const auto it = table->find(key);
      if (it == table->end()) continue;
      if (!accept(it->second)) {
        TANDEM_CHECK(table != &s.pinned, "kernel choice ", key, ": the snapshot's choice '", it->second,
                     "' is not one this build can run");
        continue;  // e.g. a candidate no longer offered: measured (or fixed) again
      }
      *word = it->second;
      s.made[key] = *word;
      return true;
    }
    if (const auto it = s.made.find(key); it != s.made.end()) {
      *word = it->second;
      return true;
    }
    return false;
  };
  std::string word;
  {
    std::lock_guard<std::mutex> lock(s.table);
    if (lookup(&word)) return word;
    if (kernel_tuning() == KernelTuning::kFixed) {
      read_fixed_file(s);
      if (!lookup(&word)) word = s.made[key] = fixed;
      return word;
    }
#ifdef _OPENMP
    if (omp_in_parallel() && s.measuring_outside_regions && s.measurer != std::this_thread::get_id()) return "";
#endif
  }
  std::lock_guard<std::recursive_mutex> measuring(s.measuring);
  const bool outermost = s.depth == 0;
  if (outermost) {
    // Another process on this machine may have measured it already: read the file under its
    // lock, and measure only when the key is still missing (the lock also keeps the other ranks
    // from computing on the cores meanwhile).
    const std::string& path = s.file();
    s.fd = path.empty() ? -1 : ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (s.fd >= 0) ::flock(s.fd, LOCK_EX);
  }
  {
    std::lock_guard<std::mutex> lock(s.table);
    if (outermost && s.fd >= 0) read_choices(s.fd, s.known);
    if (lookup(&word)) {
      if (outermost && s.fd >= 0) ::close(s.fd), s.fd = -1;  // releases the file's lock
      return word;
    }
    if (outermost) {
#ifdef _OPENMP
      s.measuring_outside_regions = !omp_in_parallel();
#endif
      s.measurer = std::this_thread::get_id();
    }
  }
  ++s.depth;
  std::pair<std::string, std::string> measured;
  bool busy = false;
  try {
    const LoadSample before = sample_load();
    measured = measure();
    busy = !keep_under_load().load() && machine_was_busy(before, sample_load());
  } catch (...) {
    --s.depth;
    if (outermost) {
      std::lock_guard<std::mutex> lock(s.table);
      s.measuring_outside_regions = false;
      if (s.fd >= 0) ::close(s.fd), s.fd = -1;
    }
    throw;
  }
  --s.depth;
  word = measured.first;
  if (busy) {
    static std::atomic<bool> told{false};
    if (!told.exchange(true)) {
      std::fprintf(stderr,
                   "tandem: other processes kept the cores busy while kernel choice %s was timed: this process "
                   "uses what it measured, the machine's choices file does not keep it (TANDEM_KERNEL_TUNING=measure)\n",
                   key.c_str());
    }
  } else if (s.fd >= 0) {
    const std::string text = key + ' ' + word + (measured.second.empty() ? "" : " " + measured.second) + '\n';
    ::lseek(s.fd, 0, SEEK_END);
    if (::write(s.fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      std::fprintf(stderr, "tandem: could not record a kernel choice in %s\n", s.path.c_str());
    }
  }
  std::lock_guard<std::mutex> lock(s.table);
  s.made[key] = word;
  if (outermost) {
    s.measuring_outside_regions = false;
    if (s.fd >= 0) ::close(s.fd), s.fd = -1;  // releases the file's lock
  }
  return word;
}

std::size_t measured_choice(const std::string& key, const std::vector<std::string>& names,
                            const std::function<std::vector<double>()>& measure, double flops,
                            const std::string& detail, bool* recorded, std::size_t fixed) {
  const std::string word = measured_word(
      key, [&](const std::string& name) { return index_of(names, name) < names.size(); },
      [&] {
        const std::vector<double> seconds = measure();
        const auto chosen = static_cast<std::size_t>(std::min_element(seconds.begin(), seconds.end()) - seconds.begin());
        // e.g. "gemm.f32.t2.NT.m6.n9.k9 onednn openblas=180.4 onednn=213.4 eigen=151.5 (100x1000x784)":
        // GFLOP/s when the work is known, else microseconds ("us").
        std::ostringstream figures;
        for (std::size_t i = 0; i < names.size(); ++i) {
          char figure[32];
          if (flops > 0) std::snprintf(figure, sizeof(figure), "%.1f", flops / seconds[i] / 1e9);
          else std::snprintf(figure, sizeof(figure), "%.1fus", seconds[i] * 1e6);
          figures << (i ? " " : "") << names[i] << '=' << figure;
        }
        if (!detail.empty()) figures << " (" << detail << ')';
        return std::make_pair(names[chosen], figures.str());
      },
      names.at(fixed));
  // "" from a worker of a region a measurement runs: the fixed candidate, unrecorded (see ChoiceStore).
  if (recorded) *recorded = !word.empty();
  return word.empty() ? fixed : index_of(names, word);
}

}  // namespace cpu

KernelTuning kernel_tuning() {
  const int set = cpu::tuning_set.load(std::memory_order_relaxed);
  if (set >= 0) return static_cast<KernelTuning>(set);
  static const KernelTuning from_environment = cpu::tuning_from_environment();
  return from_environment;
}

void set_kernel_tuning(KernelTuning tuning) { cpu::tuning_set.store(static_cast<int>(tuning)); }

std::string kernel_choices_text() {
  cpu::ChoiceStore& s = cpu::store();
  std::lock_guard<std::mutex> lock(s.table);
  std::string text;
  for (const auto& [key, word] : s.made) text += key + ' ' + word + '\n';
  return text;
}

void pin_kernel_choices(const std::string& text) {
  std::unordered_map<std::string, std::string> pins;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    std::istringstream words(line);
    std::string key, word, extra;
    TANDEM_CHECK(words >> key >> word && !(words >> extra), "pin_kernel_choices: expected a line 'key choice', got '",
                 line, "'");
    pins[key] = word;
  }
  cpu::ChoiceStore& s = cpu::store();
  std::lock_guard<std::mutex> lock(s.table);
  for (auto& [key, word] : pins) {
    s.made.erase(key);
    s.pinned[key] = word;
  }
  cpu::generation.fetch_add(1);
}

unsigned kernel_choices_generation() { return cpu::generation.load(std::memory_order_relaxed); }

}  // namespace tandem
