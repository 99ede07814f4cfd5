// Storage versions (core/storage.h) and the products on packed right-hand sides they make safe
// (core/cpu/packed_weights.h): a packed copy equals the plain product, and a weight written in any
// way (through a pointer, an in-place operation, an optimizer kernel, copy_, a view) is never
// served from a stale copy.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu/gemm_kernels.h"
#include "core/cpu/measured_choice.h"
#include "core/cpu/packed_weights.h"
#include "core/error.h"
#include "core/kernel_choices.h"
#include "core/ops.h"
#include "tests/core/test_util.h"

using namespace tandem;
using Catch::Matchers::Contains;

namespace {

// Whether this build packs such a product's right-hand side on this machine (packing is oneDNN's,
// and only where its kernels ask for a blocked layout: on an AVX2 machine not for a b that is not
// transposed).
bool can_pack(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, bool accumulate) {
  return cpu::gemm_backend_supports<float>(cpu::GemmBackend::kOneDnn) && cpu::packs_rhs(m, n, k, ta, tb, accumulate);
}

Tensor random_tensor(const Shape& shape, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  Tensor t(shape, DType::f32);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = d(g);
  return t;
}

// op(a) op(b) in double, from the tensors' current values.
std::vector<double> reference(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const std::int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1);
  const std::int64_t n = tb ? b.size(0) : b.size(1);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  std::vector<double> c(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t p = 0; p < k; ++p) s += double(ta ? pa[p * m + i] : pa[i * k + p]) * double(tb ? pb[j * k + p] : pb[p * n + j]);
      c[static_cast<std::size_t>(i * n + j)] = s;
    }
  return c;
}

void require_product(const Tensor& y, const std::vector<double>& expected) {
  const std::vector<float> got = y.to_vector<float>();
  REQUIRE(got.size() == expected.size());
  // One assertion, at the first element out of tolerance: an assertion (and its INFO) per
  // element was most of this test's time, which under the sanitizers neared its timeout.
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] == Approx(expected[i]).margin(2e-4).epsilon(1e-4)) continue;
    INFO("element " << i);
    REQUIRE(got[i] == Approx(expected[i]).margin(2e-4).epsilon(1e-4));
  }
}

struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* value) : name(n) { ::setenv(n, value, 1); }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE("a storage's version moves on at every write and never at a read", "[packed]") {
  Tensor t = zeros({4, 8});
  const std::uint64_t v0 = t.storage()->version();
  const Tensor& ct = t;
  (void)ct.data<float>();
  (void)ct.raw_data();
  (void)ct.to_vector<float>();
  REQUIRE(t.storage()->version() == v0);

  auto moved = [&](auto&& write) {
    const std::uint64_t before = t.storage()->version();
    write();
    return t.storage()->version() != before;
  };
  REQUIRE(moved([&] { t.data<float>()[3] = 1; }));
  REQUIRE(moved([&] { t.raw_data(); }));
  REQUIRE(moved([&] { t.copy_(ones({4, 8})); }));
  REQUIRE(moved([&] { add_(t, ones({4, 8})); }));
  REQUIRE(moved([&] { sgd_update_(t, ones({4, 8}), 0.5); }));
  REQUIRE(moved([&] {
    Tensor rows = t.slice_rows(1, 2);  // a view writes the storage it shares
    rows.data<float>()[0] = 7;
  }));
  REQUIRE(moved([&] {
    t.storage()->release();
    t.storage()->restore();
  }));
  // Versions are never reused, not even by a storage allocated where a freed one was.
  std::uint64_t last = t.storage()->version();
  for (int i = 0; i < 3; ++i) {
    const Tensor fresh = zeros({4, 8});
    REQUIRE(fresh.storage()->version() > last);
    last = fresh.storage()->version();
  }
}

TEST_CASE("products on a packed right-hand side equal the plain ones, and a written weight is never served stale",
          "[packed]") {
  ScopedEnv always("TANDEM_PACKED_WEIGHTS", "always");
  cpu::clear_packed_weights();
  const std::int64_t m = 48, n = 160, k = 96;
  for (int layout = 0; layout < 8; ++layout) {
    const bool ta = layout & 1, tb = layout & 2, accumulate = layout & 4;
    DYNAMIC_SECTION("ta " << ta << " tb " << tb << " accumulate " << accumulate) {
      Tensor W = random_tensor(tb ? Shape{n, k} : Shape{k, n}, 1);
      const Tensor x = random_tensor(ta ? Shape{k, m} : Shape{m, k}, 2);
      const Tensor base = random_tensor({m, n}, 3);
      const bool packs = can_pack(m, n, k, ta, tb, accumulate);
      // y = op(x) op(W), or base + op(x) op(W); `packed` says whether a copy served it.
      auto product = [&](const Tensor& a, bool* packed) {
        const std::int64_t served = cpu::packed_weight_stats().packed_products;
        Tensor y;
        if (accumulate) {
          y = base.clone();
          matmul_accumulate_(y, a, W, ta, tb);
        } else {
          y = matmul(a, W, ta, tb);
        }
        *packed = cpu::packed_weight_stats().packed_products > served;
        return y;
      };
      auto expected = [&](const Tensor& a) {
        std::vector<double> c = reference(a, W, ta, tb);
        if (accumulate) {
          const std::vector<float> b = base.to_vector<float>();
          for (std::size_t i = 0; i < c.size(); ++i) c[i] += b[i];
        }
        return c;
      };
      // Four products of one version: the first plain, the others on the copy.
      for (int use = 1; use <= 4; ++use) {
        bool packed = false;
        const Tensor y = product(x, &packed);
        require_product(y, expected(x));
        REQUIRE(packed == (packs && use > 1));
      }
      // Each way of writing W: the next product sees the new values (plain, being the first of
      // the new version), and the one after runs on a fresh copy of them.
      const std::vector<std::pair<const char*, std::function<void()>>> writes = {
          {"a pointer", [&] { W.data<float>()[5] += 1.5f; }},
          {"an in-place operation", [&] { add_(W, full({}, -0.5)); }},
          {"an optimizer kernel", [&] { sgd_update_(W, random_tensor(W.shape(), 4), 0.25); }},
          {"copy_", [&] { W.copy_(random_tensor(W.shape(), 5)); }},
          {"a view", [&] {
             Tensor row = W.slice_rows(2, 3);
             row.data<float>()[1] = 9.f;
           }},
      };
      for (const auto& write : writes) {
        INFO("written through " << write.first);
        write.second();
        for (int use = 1; use <= 2; ++use) {
          bool packed = false;
          const Tensor y = product(x, &packed);
          require_product(y, expected(x));
          REQUIRE(packed == (packs && use > 1));
        }
      }
      // Other left-hand sides on the same weights: served by the same copy.
      for (unsigned seed = 10; seed < 13; ++seed) {
        const Tensor other = random_tensor(x.shape(), seed);
        bool packed = false;
        const Tensor y = product(other, &packed);
        require_product(y, expected(other));
        REQUIRE(packed == packs);
      }
    }
  }
}

TEST_CASE("packing is off on request, bounded in memory, and copies of freed weights are dropped", "[packed]") {
  const std::int64_t m = 64, n = 256, k = 128;
  const Tensor x = random_tensor({m, k}, 1);
  const bool packable = can_pack(m, n, k, false, true, false);
  auto run = [&](const Tensor& W, int times) {
    for (int i = 0; i < times; ++i) require_product(matmul(x, W, false, true), reference(x, W, false, true));
  };

  SECTION("off") {
    ScopedEnv off("TANDEM_PACKED_WEIGHTS", "off");
    cpu::clear_packed_weights();
    run(random_tensor({n, k}, 2), 4);
    REQUIRE(cpu::packed_weight_stats().packs == 0);
  }
  SECTION("a wrong setting is an error naming it") {
    ScopedEnv wrong("TANDEM_PACKED_WEIGHTS", "sometimes");
    const Tensor W = random_tensor({n, k}, 2);
    REQUIRE_THROWS_WITH(matmul(x, W, false, true), Contains("TANDEM_PACKED_WEIGHTS=sometimes"));
  }
  SECTION("the cap") {
    ScopedEnv always("TANDEM_PACKED_WEIGHTS", "always");
    {
      ScopedEnv none("TANDEM_PACKED_WEIGHTS_MB", "0");
      cpu::clear_packed_weights();
      run(random_tensor({n, k}, 2), 3);
      REQUIRE(cpu::packed_weight_stats().packs == 0);
    }
    ScopedEnv one("TANDEM_PACKED_WEIGHTS_MB", "1");  // room for about 7 copies of 128 KB
    cpu::clear_packed_weights();
    std::vector<Tensor> weights;
    for (unsigned i = 0; i < 12; ++i) {
      weights.push_back(random_tensor({n, k}, 20 + i));
      run(weights.back(), 3);
      REQUIRE(cpu::packed_weight_stats().bytes <= (std::int64_t(1) << 20));
    }
    if (packable) {
      REQUIRE(cpu::packed_weight_stats().packs == 12);
      REQUIRE(cpu::packed_weight_stats().bytes > 0);
    }
    // The least recently used copies went first: the oldest weight is packed again when used.
    const std::int64_t packs = cpu::packed_weight_stats().packs;
    run(weights.front(), 1);
    if (packable) REQUIRE(cpu::packed_weight_stats().packs == packs + 1);
  }
  SECTION("freed weights") {
    ScopedEnv always("TANDEM_PACKED_WEIGHTS", "always");
    cpu::clear_packed_weights();
    {
      const Tensor W = random_tensor({n, k}, 2);
      run(W, 3);
      if (packable) REQUIRE(cpu::packed_weight_stats().bytes > 0);
    }
    run(random_tensor({n, k}, 3), 1);  // following a new right-hand side forgets the dead ones
    REQUIRE(cpu::packed_weight_stats().bytes == 0);
    REQUIRE(cpu::packed_weight_stats().followed == 1);
  }
}

TEST_CASE("without timing a copy is made at the fixed break-even, the same in every run", "[packed]") {
  ::unsetenv("TANDEM_PACKED_WEIGHTS");
  set_kernel_tuning(KernelTuning::kFixed);
  cpu::clear_packed_weights();
  const Tensor W = random_tensor({512, 384}, 1), x = random_tensor({64, 384}, 2);
  W.storage()->mark_weight();
  for (int i = 0; i < 40; ++i) require_product(matmul(x, W, false, true), reference(x, W, false, true));
  if (!can_pack(64, 512, 384, false, true, false)) return;
  // The 4th product of the version is the first on the copy (core/cpu/packed_weights.cc).
  const cpu::PackedWeightStats s = cpu::packed_weight_stats();
  CHECK(s.packs == 1);
  CHECK(s.packed_products == 40 - 4 + 1);
  // forget_kernel_history drops copies and counts: the next version starts as in a new process.
  forget_kernel_history();
  CHECK(cpu::packed_weight_stats().bytes == 0);
  CHECK(cpu::packed_weight_stats().followed == 0);
}

TEST_CASE("measured, a copy is made only when the measured break-even says it pays", "[packed]") {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                          "/packed-weights-choices";
  ScopedEnv cache_dir("TANDEM_CACHE_DIR", dir.c_str());
  ::unsetenv("TANDEM_PACKED_WEIGHTS");
  set_kernel_tuning(KernelTuning::kMeasure);  // core/kernel_choices.h
  cpu::keep_measurements_under_load(true);     // beside other tests
  cpu::clear_packed_weights();
  // A class of its own (n = 1024): the case above answered 64 x 512 x 384's without timing.
  const Tensor W = random_tensor({1024, 384}, 1), x = random_tensor({64, 384}, 2);
  // A tensor not marked as a weight is not even followed, however often it serves unchanged.
  for (int i = 0; i < 40; ++i) require_product(matmul(x, W, false, true), reference(x, W, false, true));
  REQUIRE(cpu::packed_weight_stats().followed == 0);
  REQUIRE(cpu::packed_weight_stats().packs == 0);
  W.storage()->mark_weight();  // what autograd does for a parameter
  for (int i = 0; i < 40; ++i) require_product(matmul(x, W, false, true), reference(x, W, false, true));
  if (!can_pack(64, 1024, 384, false, true, false)) return;
  // The class's line: the products a copy must serve (or "never"), and the figures.
  std::ifstream in(cpu::measured_choice_file());
  std::string line, word;
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("gemm_packed.f32.", 0) == 0 && l.find("(64x1024x384)") != std::string::npos) line = l;
  }
  INFO(line);
  REQUIRE(!line.empty());
  REQUIRE_THAT(line, Contains("plain=") && Contains("packed=") && Contains("packing="));
  word = line.substr(line.find(' ') + 1);
  word = word.substr(0, word.find(' '));
  const cpu::PackedWeightStats s = cpu::packed_weight_stats();
  if (word == "never") {
    REQUIRE(s.packs == 0);
  } else {
    // Served so far is the count this version expects: packed once use `word` was reached.
    const long uses = std::stol(word);
    REQUIRE(uses >= 1);
    if (uses <= 40) {
      REQUIRE(s.packs == 1);
      REQUIRE(s.packed_products == 40 - std::max(uses, 2L) + 1);
    } else {
      REQUIRE(s.packs == 0);
    }
  }
}
