// A stand-in for libFuzzer's main() in the ordinary (gcc) build, so that every fuzz target runs
// as a smoke test under `bazel test //tests/fuzz/...`:
//
//   <target>_fuzz_test [--seconds=S] [--iterations=N] [--seed=K] CORPUS_DIR...
//
// First every file under the corpus directories (recursively, including their regression/
// subdirectories) is replayed, in sorted order. Then inputs made by deterministic pseudo-random
// mutations of those files (bit flips, byte edits, inserts, deletes, truncation, splicing,
// interesting integers such as 0xFFFFFFFF written over length fields) are run until N inputs
// or S seconds, whichever comes first. The same seed always gives the same inputs.
//
// A target accepts an input by returning (tandem::Error is caught inside the target). Anything
// else is a bug: a signal, an uncaught exception (std::terminate), an input that runs longer
// than the per-input watchdog, or an allocation past the address-space limit (std::bad_alloc,
// which the targets do not catch; under AddressSanitizer, one allocation over 2 GiB). In each case the offending input is written to
// $TEST_UNDECLARED_OUTPUTS_DIR (or the working directory) as crash-<target> before the process
// dies, so that it can be replayed and kept under corpus/<name>/regression/.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

// ASan and TSan reserve terabytes of shadow memory: no address-space limit under them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TANDEM_FUZZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TANDEM_FUZZ_ASAN 1
#endif
#endif

#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
// Optional, as in libFuzzer.
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

using Bytes = std::vector<std::uint8_t>;

constexpr unsigned kWatchdogSeconds = 20;  // one input running longer is a hang

// The input being run, and where to save it when the process dies. Written before each run so
// that the signal handlers only need async-signal-safe calls.
const std::uint8_t* g_input = nullptr;
std::size_t g_input_size = 0;
char g_crash_path[4096] = "";

void save_current_input() {
  if (g_crash_path[0] == '\0') return;
  const int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  std::size_t done = 0;
  while (done < g_input_size) {
    const ssize_t n = ::write(fd, g_input + done, g_input_size - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  static const char kNote[] = "standalone_driver: the failing input was saved to ";
  [[maybe_unused]] ssize_t ignored = ::write(2, kNote, sizeof kNote - 1);
  ignored = ::write(2, g_crash_path, std::strlen(g_crash_path));
  ignored = ::write(2, "\n", 1);
}

void on_fatal_signal(int signal_number) {
  if (signal_number == SIGALRM) {
    static const char kHang[] = "standalone_driver: an input ran past the watchdog (hang)\n";
    [[maybe_unused]] ssize_t ignored = ::write(2, kHang, sizeof kHang - 1);
  }
  save_current_input();
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number == SIGALRM ? SIGABRT : signal_number);
}

void on_terminate() {
  std::fprintf(stderr, "standalone_driver: an exception escaped the fuzz target");
  try {
    if (auto current = std::current_exception()) std::rethrow_exception(current);
  } catch (const std::exception& e) {
    std::fprintf(stderr, ": %s", e.what());
  } catch (...) {
  }
  std::fprintf(stderr, "\n");
  save_current_input();
  ::signal(SIGABRT, SIG_DFL);
  std::abort();
}

void install_handlers(const std::string& target) {
  const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  const std::string path = (dir != nullptr && dir[0] != '\0' ? std::string(dir) + "/" : std::string()) + "crash-" + target;
  std::snprintf(g_crash_path, sizeof g_crash_path, "%s", path.c_str());
  for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM}) ::signal(s, on_fatal_signal);
  std::set_terminate(on_terminate);
#ifndef TANDEM_FUZZ_ASAN  // ASan reserves terabytes of shadow; __asan_default_options limits it instead
  constexpr rlim_t kAddressSpaceLimit = rlim_t{4} << 30;  // 4 GiB: a larger allocation is a bug
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur > kAddressSpaceLimit)) {
    limit.rlim_cur = kAddressSpaceLimit;
    ::setrlimit(RLIMIT_AS, &limit);
  }
#endif
}

void run_one(const Bytes& input) {
  // A copy of exactly the input's size, so that a read past its end is a read past an allocation.
  std::unique_ptr<std::uint8_t[]> copy(new std::uint8_t[std::max<std::size_t>(input.size(), 1)]);
  std::copy(input.begin(), input.end(), copy.get());
  g_input = copy.get();
  g_input_size = input.size();
  ::alarm(kWatchdogSeconds);
  LLVMFuzzerTestOneInput(copy.get(), input.size());
  ::alarm(0);
  g_input = nullptr;
  g_input_size = 0;
}

std::vector<std::string> corpus_files(const std::vector<std::string>& dirs) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const std::string& dir : dirs) {
    if (fs::is_regular_file(dir)) {
      files.push_back(dir);
      continue;
    }
    for (const auto& entry : fs::recursive_directory_iterator(dir))
      if (entry.is_regular_file()) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// ---- mutations -------------------------------------------------------------------------------

class Mutator {
 public:
  Mutator(std::uint64_t seed, const std::vector<Bytes>& corpus) : rng_(seed), corpus_(corpus) {}

  Bytes next() {
    Bytes out = corpus_.empty() ? Bytes() : corpus_[below(corpus_.size())];
    const int rounds = 1 + static_cast<int>(below(4));
    for (int r = 0; r < rounds; ++r) mutate(out);
    return out;
  }

 private:
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng_() % n); }
  std::uint8_t byte() { return static_cast<std::uint8_t>(rng_()); }

  // Lengths, counts and offsets that parsers get wrong: zero, one, signed and unsigned limits
  // of each width, and values just past them.
  std::uint64_t interesting() {
    static const std::uint64_t kValues[] = {
        0, 1, 2, 7, 8, 16, 63, 64, 127, 128, 255, 256, 0x7FFF, 0x8000, 0xFFFF, 0x10000,
        0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF, 0x100000000, std::uint64_t{1} << 40,
        0x7FFFFFFFFFFFFFFF, 0x8000000000000000, 0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFE};
    return kValues[below(std::size(kValues))];
  }

  void write_int(Bytes& out, std::size_t at, std::uint64_t value, int width, bool big_endian) {
    for (int i = 0; i < width && at + i < out.size(); ++i) {
      const int shift = 8 * (big_endian ? width - 1 - i : i);
      out[at + i] = static_cast<std::uint8_t>(value >> shift);
    }
  }

  void mutate(Bytes& out) {
    switch (below(10)) {
      case 0:  // flip one bit
        if (!out.empty()) out[below(out.size())] ^= static_cast<std::uint8_t>(1u << below(8));
        break;
      case 1:  // set one byte
        if (!out.empty()) out[below(out.size())] = byte();
        break;
      case 2: {  // insert a few random bytes
        const std::size_t at = below(out.size() + 1), n = 1 + below(8);
        Bytes bytes(n);
        for (auto& b : bytes) b = byte();
        out.insert(out.begin() + static_cast<std::ptrdiff_t>(at), bytes.begin(), bytes.end());
        break;
      }
      case 3: {  // delete a range
        if (out.empty()) break;
        const std::size_t at = below(out.size()), n = 1 + below(std::min<std::size_t>(out.size() - at, 16));
        out.erase(out.begin() + static_cast<std::ptrdiff_t>(at), out.begin() + static_cast<std::ptrdiff_t>(at + n));
        break;
      }
      case 4:  // truncate
        out.resize(below(out.size() + 1));
        break;
      case 5: {  // splice: a prefix of this input and a suffix of another
        if (corpus_.empty()) break;
        const Bytes& other = corpus_[below(corpus_.size())];
        const std::size_t keep = below(out.size() + 1), from = below(other.size() + 1);
        out.resize(keep);
        out.insert(out.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
        break;
      }
      case 6:
      case 7: {  // an interesting integer over 1, 2, 4 or 8 bytes, either byte order
        if (out.empty()) break;
        static const int kWidths[] = {1, 2, 4, 8};
        write_int(out, below(out.size()), interesting(), kWidths[below(4)], below(2) == 0);
        break;
      }
      case 8: {  // add a small delta to a 4-byte field (a length off by a little)
        if (out.size() < 4) break;
        const std::size_t at = below(out.size() - 3);
        const bool big_endian = below(2) == 0;
        std::uint32_t value = 0;
        for (int i = 0; i < 4; ++i) value |= std::uint32_t{out[at + i]} << (8 * (big_endian ? 3 - i : i));
        value += static_cast<std::uint32_t>(static_cast<int>(below(33)) - 16);
        write_int(out, at, value, 4, big_endian);
        break;
      }
      default: {  // duplicate a chunk in place
        if (out.empty()) break;
        const std::size_t at = below(out.size()), n = 1 + below(std::min<std::size_t>(out.size() - at, 64));
        const Bytes chunk(out.begin() + static_cast<std::ptrdiff_t>(at), out.begin() + static_cast<std::ptrdiff_t>(at + n));
        out.insert(out.begin() + static_cast<std::ptrdiff_t>(at), chunk.begin(), chunk.end());
        break;
      }
    }
  }

  std::mt19937_64 rng_;
  const std::vector<Bytes>& corpus_;
};

bool parse_flag(const char* arg, const char* name, double& value) {
  const std::size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0) return false;
  value = std::atof(arg + n);
  return true;
}

}  // namespace

#ifdef TANDEM_FUZZ_ASAN
// Under AddressSanitizer (bazel test --config=fuzz): one allocation over 2 GiB is reported.
extern "C" const char* __asan_default_options() { return "max_allocation_size_mb=2048"; }
#endif

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  double seconds = 3, iterations = 20000, seed = 1;
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    if (parse_flag(argv[i], "--seconds=", seconds) || parse_flag(argv[i], "--iterations=", iterations) ||
        parse_flag(argv[i], "--seed=", seed))
      continue;
    dirs.emplace_back(argv[i]);
  }
  const std::string target = std::filesystem::path(argv[0]).filename().string();
  if (dirs.empty()) {
    std::fprintf(stderr, "usage: %s [--seconds=S] [--iterations=N] [--seed=K] CORPUS_DIR...\n", argv[0]);
    return 2;
  }
  install_handlers(target);

  std::vector<Bytes> corpus;
  for (const std::string& path : corpus_files(dirs)) {
    corpus.push_back(read_bytes(path));
    run_one(corpus.back());
  }
  std::printf("%s: replayed %zu corpus files\n", target.c_str(), corpus.size());
  FUZZ_REQUIRE(!corpus.empty(), target + ": the corpus is empty");

  Mutator mutator(static_cast<std::uint64_t>(seed), corpus);
  const auto start = std::chrono::steady_clock::now();
  const auto limit = std::chrono::duration<double>(seconds);
  long long count = 0;
  while (count < static_cast<long long>(iterations) && std::chrono::steady_clock::now() - start < limit) {
    run_one(mutator.next());
    ++count;
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: ran %lld mutated inputs in %.2f s (seed %.0f), no failures\n", target.c_str(), count, elapsed, seed);
  return 0;
}
