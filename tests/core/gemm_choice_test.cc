// The product libraries (core/cpu/gemm_kernels.h) against a double-precision triple loop, every
// layout, and the measured choice between them (core/cpu/gemm_choice.h): kept on disk, shared,
// and overridable.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/cpu/gemm_choice.h"
#include "core/cpu/gemm_kernels.h"
#include "core/cpu/measured_choice.h"
#include "core/cpu/parallel.h"
#include "core/error.h"
#include "core/kernel_choices.h"
#include "core/ops.h"
#include "core/threads.h"
#include "tests/core/test_util.h"

using namespace tandem;
using namespace tandem::cpu;
using Catch::Matchers::Contains;

namespace {

// The folder of the choices file under test. The file is fixed at the process's first lookup,
// which any parallel loop on 2 threads may make (its grain scale, core/cpu/parallel.h), so
// TANDEM_CACHE_DIR is set before the first test case runs.
std::string choice_dir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/gemm-choice-test";
}
const bool choice_dir_set = (::setenv("TANDEM_CACHE_DIR", choice_dir().c_str(), 1), true);
// What is tested here is the measured mode (TANDEM_KERNEL_TUNING=measure) and its file; the test
// runs beside others, whose load must not keep its measurements out of the file.
const bool measuring = (set_kernel_tuning(KernelTuning::kMeasure), keep_measurements_under_load(true), true);

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// op(A)[i, p] with A stored [m, k] (or [k, m] when ta) with rows lda apart.
double at(const std::vector<float>& a, std::int64_t lda, bool ta, std::int64_t i, std::int64_t p) {
  return ta ? a[p * lda + i] : a[i * lda + p];
}

std::vector<std::string> file_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("every product library computes every layout: transposes, row strides, accumulation", "[gemm]") {
  struct Shape {
    std::int64_t m, n, k;
  };
  for (const Shape s : {Shape{1, 1, 1}, Shape{3, 5, 7}, Shape{33, 65, 17}, Shape{100, 40, 64}}) {
    for (GemmBackend backend : kGemmBackends) {
      if (!gemm_backend_supports<float>(backend)) continue;
      for (int layout = 0; layout < 8; ++layout) {
        const bool ta = layout & 1, tb = layout & 2, accumulate = layout & 4;
        // Row strides past the rows' lengths: the libraries must read and write only their part.
        const std::int64_t lda = (ta ? s.m : s.k) + 3, ldb = (tb ? s.k : s.n) + 2, ldc = s.n + 5;
        const auto a = random_floats(std::size_t((ta ? s.k : s.m) * lda), 1);
        const auto b = random_floats(std::size_t((tb ? s.n : s.k) * ldb), 2);
        const auto c0 = random_floats(std::size_t(s.m * ldc), 3);
        auto c = c0;
        gemm_on(backend, a.data(), lda, b.data(), ldb, c.data(), ldc, s.m, s.n, s.k, ta, tb, accumulate);
        INFO(gemm_backend_name(backend) << " m=" << s.m << " n=" << s.n << " k=" << s.k << " ta=" << ta << " tb="
                                        << tb << " accumulate=" << accumulate);
        double worst = 0;
        for (std::int64_t i = 0; i < s.m; ++i) {
          for (std::int64_t j = 0; j < ldc; ++j) {
            const std::size_t idx = std::size_t(i * ldc + j);
            if (j >= s.n) {  // past the row: untouched
              REQUIRE(c[idx] == c0[idx]);
              continue;
            }
            double want = accumulate ? c0[idx] : 0.0;
            for (std::int64_t p = 0; p < s.k; ++p) want += at(a, lda, ta, i, p) * at(b, ldb, !tb, j, p);
            worst = std::max(worst, std::abs(want - double(c[idx])));
          }
        }
        REQUIRE(worst < 1e-5 * double(s.k + 1));
      }
    }
  }
}

TEST_CASE("every library runs the same product on several threads at once", "[gemm]") {
  // tandem's kernels run one serial product per thread inside their parallel regions (the
  // convolution's images); Debian's oneDNN shares one scratchpad between threads unless given one.
  const std::int64_t m = 32, n = 196, k = 144;
  const auto a = random_floats(std::size_t(m * k), 4), b = random_floats(std::size_t(k * n), 5);
  std::vector<double> want(std::size_t(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t p = 0; p < k; ++p) want[std::size_t(i * n + j)] += double(a[i * k + p]) * b[p * n + j];
  for (GemmBackend backend : kGemmBackends) {
    if (!gemm_backend_supports<float>(backend)) continue;
    INFO(gemm_backend_name(backend));
    constexpr int kThreads = 4;
    std::vector<std::vector<float>> c(kThreads, std::vector<float>(std::size_t(m * n), 1.0f));
    parallel_chunks(kThreads, 1 << 20, 1, [&](std::int64_t lo, std::int64_t hi, int) {
      for (int repeat = 0; repeat < 20; ++repeat) {
        for (std::int64_t t = lo; t < hi; ++t) {
          std::fill(c[t].begin(), c[t].end(), 1.0f);
          gemm_on(backend, a.data(), k, b.data(), n, c[t].data(), n, m, n, k, false, false, true);
        }
      }
    });
    for (int t = 0; t < kThreads; ++t) {
      double worst = 0;
      for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(want[i] + 1.0 - c[t][i]));
      REQUIRE(worst < 1e-3);
    }
  }
}

TEST_CASE("double and integer products run on the libraries that support them", "[gemm]") {
  CHECK(gemm_backend_supports<double>(GemmBackend::kEigen));
  CHECK(gemm_backend_supports<std::int32_t>(GemmBackend::kEigen));
  CHECK_FALSE(gemm_backend_supports<std::int32_t>(GemmBackend::kOpenBlas));
  CHECK_FALSE(gemm_backend_supports<double>(GemmBackend::kOneDnn));
  const std::vector<std::int64_t> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};  // [2, 2] each
  std::vector<std::int64_t> c(4);
  gemm_on(gemm_backend_for<std::int64_t>(2, 2, 2, false, false), a.data(), 2, b.data(), 2, c.data(), 2, 2, 2, 2,
          false, false, false);
  CHECK(c == std::vector<std::int64_t>{19, 22, 43, 50});
}

TEST_CASE("the choice is measured once per shape class, kept in the machine's file, and overridable", "[gemm]") {
  // Bazel gives each test its own HOME (TEST_TMPDIR); TANDEM_CACHE_DIR points elsewhere on purpose
  // (set before the first test case: choice_dir_set).
  REQUIRE(choice_dir_set);
  REQUIRE(measuring);
  const std::string dir = choice_dir();
  ::unsetenv("TANDEM_GEMM");
  const std::string path = measured_choice_file();
  // measured_choice_file() is fixed at the first lookup of the process; this test case makes it.
  REQUIRE(path.rfind(dir + "/choices-", 0) == 0);

  int supported = 0;
  for (GemmBackend b : kGemmBackends) supported += gemm_backend_supports<float>(b) ? 1 : 0;
  const GemmBackend first = gemm_backend_for<float>(96, 80, 72, false, true);
  REQUIRE(gemm_backend_supports<float>(first));
  if (supported >= 2) {
    // The class "gemm.f32.t<threads>.NT.m6.n6.k6" was timed and written down with every candidate's speed.
    const std::string key = "gemm.f32.t" + std::to_string(max_chunks()) + ".NT.m6.n6.k6 ";
    int found = 0;
    for (const std::string& line : file_lines(path)) {
      if (line.rfind(key, 0) != 0) continue;
      ++found;
      CHECK_THAT(line, Contains(std::string(" ") + gemm_backend_name(first) + " "));
      CHECK_THAT(line, Contains("eigen="));
      CHECK_THAT(line, Contains("(96x80x72)"));
    }
    CHECK(found == 1);
    // Another shape of the same class: no new timing, the same library.
    const auto lines_before = file_lines(path).size();
    CHECK(gemm_backend_for<float>(127, 64, 100, false, true) == first);
    CHECK(file_lines(path).size() == lines_before);
  }
  // A huge class is timed on a smaller product (timing it whole would take seconds): up to 4096^3
  // as it is, beyond that its longest side halved until it fits (2048^3 was too small: the
  // libraries had not reached their full rates there).
  const auto same = [](GemmShape a, GemmShape b) { return a.m == b.m && a.n == b.n && a.k == b.k; };
  CHECK(same(gemm_timed_shape(4096, 4096, 4096), {4096, 4096, 4096}));
  CHECK(same(gemm_timed_shape(4096, 4096, 1024), {4096, 4096, 1024}));
  CHECK(same(gemm_timed_shape(16384, 4096, 2048), {8192, 4096, 2048}));
  CHECK(same(gemm_timed_shape(8192, 8192, 8192), {4096, 4096, 4096}));
  CHECK(same(gemm_timed_shape(3, 100000001, 1000), {3, 12500001, 1000}));  // odd sides round up
  // Products too small to time go to OpenBLAS where it is linked, else Eigen.
  const GemmBackend tiny = gemm_backend_for<float>(4, 4, 4, false, false);
  CHECK(tiny == (gemm_backend_supports<float>(GemmBackend::kOpenBlas) ? GemmBackend::kOpenBlas : GemmBackend::kEigen));

  // TANDEM_GEMM forces a library for every product it can run; a wrong name is a clear error.
  ::setenv("TANDEM_GEMM", "eigen", 1);
  CHECK(gemm_backend_for<float>(96, 80, 72, false, true) == GemmBackend::kEigen);
  CHECK(gemm_backend_for<std::int32_t>(96, 80, 72, false, true) == GemmBackend::kEigen);
  ::setenv("TANDEM_GEMM", "mkl", 1);
  CHECK_THROWS_WITH(gemm_backend_for<float>(96, 80, 72, false, true),
                    Contains("TANDEM_GEMM=mkl") && Contains("expected auto, openblas, onednn or eigen"));
  ::unsetenv("TANDEM_GEMM");
  CHECK(gemm_backend_for<float>(96, 80, 72, false, true) == first);
}

TEST_CASE("a flat product on two threads: split by tandem or threaded by the library, as measured", "[gemm]") {
  // 100 x 1000 x 784 with W transposed (a Linear layer), and its weight gradient shape with
  // accumulation: both are split candidates, measured against one threaded product per class.
  const int threads_before = max_threads();
  set_max_threads(2);
  const Tensor x = test_util::uniform({100, 784}, 11, -1, 1, DType::f32);
  const Tensor W = test_util::uniform({1000, 784}, 12, -1, 1, DType::f32);
  const Tensor y = matmul(x, W, false, true);
  const Tensor gy = test_util::uniform({100, 1000}, 13, -1, 1, DType::f32);
  Tensor gW = test_util::uniform({1000, 784}, 14, -1, 1, DType::f32);
  const std::vector<float> gW0 = gW.to_vector<float>();
  matmul_accumulate_(gW, gy, x, true, false);
  set_max_threads(threads_before);
  const std::vector<float> px = x.to_vector<float>(), pw = W.to_vector<float>(), py = y.to_vector<float>(),
                           pgy = gy.to_vector<float>(), pgw = gW.to_vector<float>();
  for (int s = 0; s < 200; ++s) {  // sampled entries against double sums
    const int i = (s * 37) % 100, j = (s * 211) % 1000, p = (s * 97) % 784;
    double want = 0;
    for (int q = 0; q < 784; ++q) want += double(px[i * 784 + q]) * pw[j * 784 + q];
    REQUIRE(std::abs(want - py[i * 1000 + j]) < 1e-3);
    double want_g = gW0[j * 784 + p];
    for (int q = 0; q < 100; ++q) want_g += double(pgy[q * 1000 + j]) * px[q * 784 + p];
    REQUIRE(std::abs(want_g - pgw[j * 784 + p]) < 1e-3);
  }
  if (!std::getenv("TANDEM_GEMM") && !measured_choice_file().empty()) {
    int split_lines = 0;
    for (const std::string& line : file_lines(measured_choice_file())) {
      if (line.rfind("gemm_split.f32.t2.", 0) == 0) {
        ++split_lines;
        CHECK_THAT(line, Contains("split=") && Contains("whole="));
      }
    }
    CHECK(split_lines == 2);  // NT m6 n9 k9 and TN m9 n9 k6
  }
}

TEST_CASE("a product's class code tells classes apart exactly as the text key does", "[gemm]") {
  // The per-thread memos in front of the kept choices are keyed by the code: two shapes may share
  // a code only when they share the key, or a product would run on another class's library.
  const std::vector<std::int64_t> sides = {1, 2, 3, 31, 32, 33, 64, 100, 1000, 1024, 1025, 4096, 70000};
  const int before = max_threads();
  for (int threads : {1, 2}) {
    set_max_threads(threads);
    std::map<std::uint64_t, std::string> key_of_code;
    std::map<std::string, std::uint64_t> code_of_key;
    for (std::int64_t m : sides)
      for (std::int64_t n : sides)
        for (std::int64_t k : sides)
          for (int t = 0; t < 4; ++t) {
            const bool ta = t & 1, tb = t & 2;
            const std::uint64_t code = gemm_class_code(m, n, k, ta, tb);
            const std::string key = gemm_class_key<float>("gemm", m, n, k, ta, tb);
            INFO(m << "x" << n << "x" << k << " " << key);
            REQUIRE(key_of_code.emplace(code, key).first->second == key);
            REQUIRE(code_of_key.emplace(key, code).first->second == code);
          }
  }
  set_max_threads(before);
}
