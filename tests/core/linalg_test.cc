// Matrix products (core/ops/linalg.h) against a naive triple loop.
#include <catch2/catch.hpp>

#include <array>

#include "core/ops.h"
#include "tests/core/test_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using test_util::uniform;
using test_util::values;

namespace {

// C[m, n] = A[m, k] @ B[k, n] in double, for row-major host vectors starting at the offsets.
std::vector<double> naive_mm(const std::vector<double>& a, const std::vector<double>& b, std::int64_t m,
                             std::int64_t k, std::int64_t n, std::int64_t a_off = 0, std::int64_t b_off = 0) {
  std::vector<double> c(m * n, 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (std::int64_t p = 0; p < k; ++p) acc += a[a_off + i * k + p] * b[b_off + p * n + j];
      c[i * n + j] = acc;
    }
  return c;
}

// Row-major transpose of an [r, c] host matrix.
std::vector<double> transposed(const std::vector<double>& x, std::int64_t r, std::int64_t c) {
  std::vector<double> t(x.size());
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < c; ++j) t[j * r + i] = x[i * c + j];
  return t;
}

// Batched reference: a is [batch_a, m, k], b is [batch_b, k, n], batch_a and batch_b in {1, batch}.
std::vector<double> naive_bmm(const Tensor& a, const Tensor& b, std::int64_t batch, std::int64_t m,
                              std::int64_t k, std::int64_t n) {
  const std::vector<double> va = values(a), vb = values(b);
  const bool ra = a.numel() == m * k, rb = b.numel() == k * n;
  std::vector<double> out;
  for (std::int64_t i = 0; i < batch; ++i) {
    const auto c = naive_mm(va, vb, m, k, n, ra ? 0 : i * m * k, rb ? 0 : i * k * n);
    out.insert(out.end(), c.begin(), c.end());
  }
  return out;
}

}  // namespace

TEST_CASE("2-D matmul matches a naive triple loop", "[linalg]") {
  const std::vector<std::array<std::int64_t, 3>> shapes = {
      {1, 1, 1}, {2, 3, 4}, {5, 1, 3}, {1, 7, 1}, {7, 8, 9}, {3, 17, 2}, {64, 33, 65}};
  for (const auto& s : shapes) {
    const std::int64_t m = s[0], k = s[1], n = s[2];
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO(m << "x" << k << " @ " << k << "x" << n << " " << dtype_name(dtype));
      const Tensor a = uniform({m, k}, 1, -1, 1, dtype), b = uniform({k, n}, 2, -1, 1, dtype);
      const Tensor c = matmul(a, b);
      REQUIRE(c.shape() == Shape{m, n});
      REQUIRE(c.dtype() == dtype);
      const double tol = dtype == DType::f32 ? 1e-5 : 1e-12;
      REQUIRE_VALUES(c, naive_mm(values(a), values(b), m, k, n), tol, tol);
    }
  }
  const Tensor a = from_vector<float>({1, 2, 3, 4}, {2, 2}), b = from_vector<float>({5, 6, 7, 8}, {2, 2});
  REQUIRE_VALUES(matmul(a, b), {19, 22, 43, 50});
  REQUIRE_VALUES(matmul(b, a), {23, 34, 31, 46});
}

TEST_CASE("1-D operands are promoted and the added axis removed", "[linalg]") {
  const Tensor v = from_vector<float>({1, 2, 3});
  const Tensor m = from_vector<float>({1, 0, -1, 2, 3, 1}, {3, 2});  // [3, 2]
  const Tensor vm = matmul(v, m);
  CHECK(vm.shape() == Shape{2});
  REQUIRE_VALUES(vm, {1 * 1 + 2 * -1 + 3 * 3, 1 * 0 + 2 * 2 + 3 * 1});
  const Tensor mt = from_vector<float>({1, -1, 3, 0, 2, 1}, {2, 3});  // [2, 3]
  const Tensor mv = matmul(mt, v);
  CHECK(mv.shape() == Shape{2});
  REQUIRE_VALUES(mv, {1 - 2 + 9, 0 + 4 + 3});
  const Tensor dot = matmul(v, from_vector<float>({4, -5, 6}));
  CHECK(dot.shape().empty());
  CHECK(dot.item() == 4 - 10 + 18);
  // Transpose flags on a vector are no-ops; on the matrix they still apply.
  REQUIRE_VALUES(matmul(v, mt, true, true), {1 * 1 + 2 * -1 + 3 * 3, 0 + 4 + 3});
  // Vectors against batched matrices.
  const Tensor batch = uniform({4, 3, 5}, 3);
  const Tensor vb = matmul(v, batch);
  CHECK(vb.shape() == Shape{4, 5});
  REQUIRE_VALUES(vb, naive_bmm(v, batch, 4, 1, 3, 5), 1e-6, 1e-6);
  const Tensor bv = matmul(uniform({4, 5, 3}, 4), v);
  CHECK(bv.shape() == Shape{4, 5});
  REQUIRE_VALUES(bv, naive_bmm(uniform({4, 5, 3}, 4), v, 4, 5, 3, 1), 1e-6, 1e-6);
}

TEST_CASE("batched and broadcast-batch matmul", "[linalg][batch]") {
  const std::int64_t m = 3, k = 4, n = 5;
  SECTION("[B,m,k] @ [B,k,n]") {
    const Tensor a = uniform({6, m, k}, 5), b = uniform({6, k, n}, 6);
    const Tensor c = matmul(a, b);
    CHECK(c.shape() == Shape{6, m, n});
    REQUIRE_VALUES(c, naive_bmm(a, b, 6, m, k, n), 1e-6, 1e-6);
  }
  SECTION("[B,m,k] @ [k,n] reuses the matrix") {
    const Tensor a = uniform({6, m, k}, 7), b = uniform({k, n}, 8);
    const Tensor c = matmul(a, b);
    CHECK(c.shape() == Shape{6, m, n});
    REQUIRE_VALUES(c, naive_bmm(a, b, 6, m, k, n), 1e-6, 1e-6);
    REQUIRE_VALUES(matmul(uniform({m, k}, 9), uniform({6, k, n}, 10)),
                   naive_bmm(uniform({m, k}, 9), uniform({6, k, n}, 10), 6, m, k, n), 1e-6, 1e-6);
  }
  SECTION("[1,m,k] @ [3,k,n]") {
    const Tensor a = uniform({1, m, k}, 11), b = uniform({3, k, n}, 12);
    const Tensor c = matmul(a, b);
    CHECK(c.shape() == Shape{3, m, n});
    REQUIRE_VALUES(c, naive_bmm(a, b, 3, m, k, n), 1e-6, 1e-6);
  }
  SECTION("[2,1,m,k] @ [3,k,n] broadcasts to [2,3,m,n]") {
    const Tensor a = uniform({2, 1, m, k}, 13), b = uniform({3, k, n}, 14);
    const Tensor c = matmul(a, b);
    CHECK(c.shape() == Shape{2, 3, m, n});
    const std::vector<double> va = values(a), vb = values(b);
    std::vector<double> want;
    for (std::int64_t i = 0; i < 2; ++i)
      for (std::int64_t j = 0; j < 3; ++j) {
        const auto p = naive_mm(va, vb, m, k, n, i * m * k, j * k * n);
        want.insert(want.end(), p.begin(), p.end());
      }
    REQUIRE_VALUES(c, want, 1e-6, 1e-6);
  }
  SECTION("[2,1,m,k] @ [1,3,k,n] broadcasts on both sides") {
    const Tensor a = uniform({2, 1, m, k}, 15), b = uniform({1, 3, k, n}, 16);
    const Tensor c = matmul(a, b);
    CHECK(c.shape() == Shape{2, 3, m, n});
    const std::vector<double> va = values(a), vb = values(b);
    std::vector<double> want;
    for (std::int64_t i = 0; i < 2; ++i)
      for (std::int64_t j = 0; j < 3; ++j) {
        const auto p = naive_mm(va, vb, m, k, n, i * m * k, j * k * n);
        want.insert(want.end(), p.begin(), p.end());
      }
    REQUIRE_VALUES(c, want, 1e-6, 1e-6);
  }
  SECTION("many small products run in parallel") {
    const Tensor a = uniform({300, 8, 8}, 17, -1, 1, DType::f64), b = uniform({300, 8, 8}, 18, -1, 1, DType::f64);
    REQUIRE_VALUES(matmul(a, b), naive_bmm(a, b, 300, 8, 8, 8), 1e-12, 1e-12);
  }
}

TEST_CASE("transpose flags equal explicit transposes", "[linalg][transpose]") {
  const std::int64_t m = 5, k = 7, n = 3;
  for (DType dtype : {DType::f32, DType::f64}) {
    // Stored as the flags say: a is [k, m] when transposed, b is [n, k] when transposed.
    const Tensor a = uniform({m, k}, 20, -1, 1, dtype), b = uniform({k, n}, 21, -1, 1, dtype);
    const Tensor at = transpose(a), bt = transpose(b);
    const std::vector<double> want = naive_mm(values(a), values(b), m, k, n);
    const double tol = dtype == DType::f32 ? 1e-5 : 1e-12;
    REQUIRE_VALUES(matmul(a, b, false, false), want, tol, tol);
    REQUIRE_VALUES(matmul(at, b, true, false), want, tol, tol);
    REQUIRE_VALUES(matmul(a, bt, false, true), want, tol, tol);
    REQUIRE_VALUES(matmul(at, bt, true, true), want, tol, tol);
    // Against an independent transpose of the host data.
    REQUIRE_VALUES(matmul(a, from_vector<double>(transposed(values(b), k, n), {n, k}).to(dtype), false, true), want,
                   tol, tol);
    CHECK(matmul(at, bt, true, true).shape() == Shape{m, n});
  }
  // Batched with flags: [B, k, m]^T @ [B, n, k]^T.
  const Tensor a = uniform({4, m, k}, 22), b = uniform({4, k, n}, 23);
  const Tensor expected = matmul(a, b);
  REQUIRE_VALUES(matmul(swapaxes(a, 1, 2), swapaxes(b, 1, 2), true, true), values(expected), 1e-6, 1e-6);
  REQUIRE_VALUES(matmul(swapaxes(a, 1, 2), b, true, false), values(expected), 1e-6, 1e-6);
  REQUIRE_VALUES(matmul(a, swapaxes(b, -1, -2), false, true), values(expected), 1e-6, 1e-6);
  // A square matrix shows the difference between the flags.
  const Tensor sq = from_vector<float>({1, 2, 3, 4}, {2, 2});
  REQUIRE_VALUES(matmul(sq, sq, true, false), {10, 14, 14, 20});
  REQUIRE_VALUES(matmul(sq, sq, false, true), {5, 11, 11, 25});
  REQUIRE_VALUES(matmul(sq, sq, true, true), {7, 15, 10, 22});
}

TEST_CASE("large matmul in f32 and f64", "[linalg][large]") {
  const std::int64_t m = 300, k = 400, n = 200;
  const Tensor a = uniform({m, k}, 30, -1, 1, DType::f64), b = uniform({k, n}, 31, -1, 1, DType::f64);
  const std::vector<double> want = naive_mm(values(a), values(b), m, k, n);
  REQUIRE_VALUES(matmul(a, b), want, 1e-10, 1e-10);
  const Tensor af = a.to(DType::f32), bf = b.to(DType::f32);
  const std::vector<double> want_f = naive_mm(values(af), values(bf), m, k, n);
  // Sums of 400 products of magnitude <= 1 in f32.
  REQUIRE_VALUES(matmul(af, bf), want_f, 1e-4, 1e-4);
  REQUIRE_VALUES(matmul(transpose(af), transpose(bf), true, true), want_f, 1e-4, 1e-4);
}

TEST_CASE("integer matmul is exact", "[linalg][integer]") {
  const Tensor a = from_vector<std::int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = from_vector<std::int32_t>({7, 8, 9, 10, 11, 12}, {3, 2});
  const Tensor c = matmul(a, b);
  CHECK(c.dtype() == DType::i32);
  CHECK(c.to_vector<std::int32_t>() == std::vector<std::int32_t>{58, 64, 139, 154});
  CHECK(matmul(a, a, false, true).to_vector<std::int32_t>() == std::vector<std::int32_t>{14, 32, 32, 77});
  const std::int64_t big = std::int64_t{1} << 31;  // big * big still fits
  const Tensor l = from_vector<std::int64_t>({big, 1, -1, big}, {2, 2});
  CHECK(matmul(l, l).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{big * big - 1, 2 * big, -2 * big, big * big - 1});
  const Tensor x = test_util::iota({3, 20, 30}, DType::i64), y = test_util::iota({30, 10}, DType::i64);
  REQUIRE_VALUES(matmul(x, y), naive_bmm(x, y, 3, 20, 30, 10));
}

TEST_CASE("matmul_accumulate_ adds the product in place", "[linalg][accumulate]") {
  const Tensor a = uniform({4, 6}, 40, -1, 1, DType::f64), b = uniform({6, 5}, 41, -1, 1, DType::f64);
  const std::vector<double> prod = naive_mm(values(a), values(b), 4, 6, 5);
  Tensor out = full({4, 5}, 2.0, DType::f64);
  Tensor alias = out.reshape({20});
  matmul_accumulate_(out, a, b);
  std::vector<double> want(prod.size());
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = 2.0 + prod[i];
  REQUIRE_VALUES(out, want, 1e-12, 1e-12);
  REQUIRE_VALUES(alias, want, 1e-12, 1e-12);  // really in place
  matmul_accumulate_(out, transpose(a), b, true, false);
  matmul_accumulate_(out, a, transpose(b), false, true);
  matmul_accumulate_(out, transpose(a), transpose(b), true, true);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = 2.0 + 4 * prod[i];
  REQUIRE_VALUES(out, want, 1e-12, 1e-12);
  // k = 0 adds nothing.
  Tensor keep = full({2, 3}, 1.5);
  matmul_accumulate_(keep, zeros({2, 0}), zeros({0, 3}));
  REQUIRE_VALUES(keep, {1.5, 1.5, 1.5, 1.5, 1.5, 1.5});
  CHECK_THROWS_WITH(matmul_accumulate_(out, a, a), Contains("matmul_accumulate_") && Contains("[4, 6]"));
  Tensor wrong = zeros({5, 5}, DType::f64);
  CHECK_THROWS_AS(matmul_accumulate_(wrong, a, b), Error);
  Tensor three_d = zeros({1, 4, 5}, DType::f64);
  CHECK_THROWS_AS(matmul_accumulate_(three_d, a, b), Error);
  Tensor f32_out = zeros({4, 5});
  CHECK_THROWS_AS(matmul_accumulate_(f32_out, a, b), Error);
}

TEST_CASE("matmul errors and empty inner dimensions", "[linalg][errors]") {
  const Tensor a = ones({2, 3}), b = ones({4, 5});
  CHECK_THROWS_AS(matmul(a, b), Error);
  CHECK_THROWS_WITH(matmul(a, b), Contains("matmul") && Contains("[2, 3]") && Contains("[4, 5]"));
  CHECK_THROWS_WITH(matmul(a, ones({2, 5}), false, false), Contains("3 vs 2"));
  CHECK_NOTHROW(matmul(a, ones({2, 5}), true, false));
  CHECK_THROWS_AS(matmul(ones({3}), ones({4})), Error);
  CHECK_THROWS_AS(matmul(ones({2, 2, 3}), ones({3, 3, 4})), Error);  // batch 2 vs 3
  CHECK_THROWS_AS(matmul(scalar_tensor(1), ones({1, 1})), Error);
  CHECK_THROWS_WITH(matmul(a, ones({3, 2}, DType::f64)), Contains("f32") && Contains("f64"));
  CHECK_THROWS_AS(matmul(ones({2, 2}, DType::boolean), ones({2, 2}, DType::boolean)), Error);

  const Tensor z = matmul(zeros({3, 0}), zeros({0, 4}));
  CHECK(z.shape() == Shape{3, 4});
  REQUIRE_VALUES(z, std::vector<double>(12, 0.0));
  const Tensor zb = matmul(zeros({2, 3, 0}, DType::f64), zeros({0, 2}, DType::f64));
  CHECK(zb.shape() == Shape{2, 3, 2});
  REQUIRE_VALUES(zb, std::vector<double>(12, 0.0));
  CHECK(matmul(zeros({0}), zeros({0})).item() == 0);
  CHECK(matmul(zeros({0, 4}), ones({4, 2})).shape() == Shape{0, 2});
}

TEST_CASE("matmul_accumulate_ with operands that alias the output", "[linalg]") {
  Tensor o = ones({2, 2}, DType::f64);
  matmul_accumulate_(o, o, o);  // o + o @ o with the original o: every entry 1 + 2
  REQUIRE(o.to_vector<double>() == std::vector<double>{3, 3, 3, 3});
}
