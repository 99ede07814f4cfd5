// Matrix products on cuda:0 against the CPU: every transpose combination, batched and
// broadcast batches, 1-D promotion, odd and large sizes, integers (exact), the accumulating
// product in place (views and aliases included), empty dimensions and the TF32 switch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>

#include "tests/cuda/gpu_test_util.h"

using namespace tandem;
using namespace gpu_test;
using Catch::Matchers::Contains;

namespace {

// Products of k terms of magnitude <= 1: the CPU's and the GPU's summation orders differ by a
// few ulp of the partial sums per term, so the tolerance grows with sqrt(k).
Tolerance product_tolerance(DType dtype, std::int64_t k) {
  const double scale = std::sqrt(static_cast<double>(std::max<std::int64_t>(k, 1)));
  return for_dtype(dtype, Tolerance{1e-5, 2e-6 * scale}, Tolerance{1e-13, 1e-14 * scale});
}

// a stored [m, k] ([k, m] when ta), b stored [k, n] ([n, k] when tb).
void check_product(std::int64_t batch_a, std::int64_t batch_b, std::int64_t m, std::int64_t k, std::int64_t n,
                   bool ta, bool tb, DType dtype, std::uint64_t seed) {
  Shape sa = ta ? Shape{k, m} : Shape{m, k};
  Shape sb = tb ? Shape{n, k} : Shape{k, n};
  if (batch_a > 0) sa.insert(sa.begin(), batch_a);
  if (batch_b > 0) sb.insert(sb.begin(), batch_b);
  const Tensor a = is_floating(dtype) ? uniform(sa, seed, -1, 1, dtype) : random_ints(sa, seed, -20, 20, dtype);
  const Tensor b = is_floating(dtype) ? uniform(sb, seed + 1, -1, 1, dtype) : random_ints(sb, seed + 1, -20, 20, dtype);
  INFO(a.description() << (ta ? "^T" : "") << " @ " << b.description() << (tb ? "^T" : ""));
  check_binary([=](const Tensor& x, const Tensor& y) { return matmul(x, y, ta, tb); }, a, b,
               product_tolerance(dtype, k));
}

}  // namespace

TEST_CASE("2-D products, every transpose combination, f32 and f64", "[linalg]") {
  const std::vector<std::array<std::int64_t, 3>> shapes = {
      {1, 1, 1}, {2, 3, 4}, {5, 1, 3}, {1, 7, 1}, {7, 8, 9}, {3, 17, 2}, {64, 33, 65}, {1, 300, 1}, {129, 257, 65},
  };
  std::uint64_t seed = 1;
  for (const auto& s : shapes)
    for (DType dtype : {DType::f32, DType::f64})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) check_product(0, 0, s[0], s[1], s[2], ta, tb, dtype, seed += 2);
}

TEST_CASE("batched products: equal batches, broadcast batches, transposes", "[linalg][batch]") {
  std::uint64_t seed = 100;
  for (DType dtype : {DType::f32, DType::f64}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        check_product(6, 6, 3, 4, 5, ta, tb, dtype, seed += 2);  // [B,m,k] @ [B,k,n]
        check_product(6, 0, 3, 4, 5, ta, tb, dtype, seed += 2);  // [B,m,k] @ [k,n]: b reused
        check_product(0, 6, 3, 4, 5, ta, tb, dtype, seed += 2);  // [m,k] @ [B,k,n]: a reused
        check_product(1, 3, 3, 4, 5, ta, tb, dtype, seed += 2);  // a batch of 1 broadcast
        check_product(300, 300, 8, 8, 8, ta, tb, dtype, seed += 2);  // many small products
        check_product(4, 4, 65, 130, 33, ta, tb, dtype, seed += 2);
      }
    }
  }
  // Batch axes broadcast on both sides: [2,1,m,k] @ [1,3,k,n] -> [2,3,m,n].
  check_binary([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, uniform({2, 1, 3, 4}, 200),
               uniform({1, 3, 4, 5}, 201), product_tolerance(DType::f32, 4));
  check_binary([](const Tensor& a, const Tensor& b) { return matmul(a, b, true, true); }, uniform({2, 1, 4, 3}, 202),
               uniform({3, 5, 4}, 203), product_tolerance(DType::f32, 4));
  // Operands that are views with an offset.
  check_binary([](const Tensor& a, const Tensor& b) { return matmul(a.slice_rows(1, 4), b.slice_rows(2, 3)); },
               uniform({5, 6, 7}, 204), uniform({4, 7, 2}, 205), product_tolerance(DType::f32, 7));
}

TEST_CASE("1-D operands are promoted and the added axis removed", "[linalg]") {
  const Tolerance tol = product_tolerance(DType::f32, 50);
  check_binary([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, uniform({50}, 1), uniform({50, 7}, 2), tol);
  check_binary([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, uniform({7, 50}, 3), uniform({50}, 4), tol);
  check_binary([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, uniform({50}, 5), uniform({50}, 6), tol);
  check_binary([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, uniform({4, 3, 50}, 7), uniform({50}, 8),
               tol);
}

TEST_CASE("large products in f32 and f64", "[linalg][large]") {
  check_product(0, 0, 300, 400, 200, false, false, DType::f64, 10);
  check_product(0, 0, 300, 400, 200, false, false, DType::f32, 12);
  check_product(0, 0, 300, 400, 200, true, true, DType::f32, 14);
  check_product(0, 0, 1000, 784, 100, false, true, DType::f32, 16);  // an MLP layer: x W^T
  check_product(0, 0, 784, 100, 1000, true, false, DType::f32, 18);  // its weight gradient
  check_product(0, 0, 2048, 2048, 2048, false, false, DType::f32, 20);
  // Exactly representable data: every summation order is exact, so the results are identical.
  check_binary([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, quarters({512, 1024}, 22),
               quarters({1024, 256}, 23), kExact);
}

TEST_CASE("integer products are exact", "[linalg][integer]") {
  std::uint64_t seed = 300;
  for (DType dtype : {DType::i32, DType::i64}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        check_product(0, 0, 2, 3, 2, ta, tb, dtype, seed += 2);
        check_product(0, 0, 37, 61, 45, ta, tb, dtype, seed += 2);
        check_product(5, 0, 20, 30, 10, ta, tb, dtype, seed += 2);
      }
  }
  const std::int64_t big = std::int64_t{1} << 31;  // products beyond 32 bits
  const Tensor l = from_vector<std::int64_t>({big, 1, -1, big}, {2, 2});
  check_binary([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, l, l, kExact);
}

TEST_CASE("matmul_accumulate_ adds the product in place", "[linalg][accumulate]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    const Tolerance tol = product_tolerance(dtype, 60);
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const Tensor a = uniform(ta ? Shape{60, 40} : Shape{40, 60}, 1, -1, 1, dtype);
        const Tensor b = uniform(tb ? Shape{50, 60} : Shape{60, 50}, 2, -1, 1, dtype);
        check_op([=](std::vector<Tensor>& v) {
          matmul_accumulate_(v[0], v[1], v[2], ta, tb);
          matmul_accumulate_(v[0], v[1], v[2], ta, tb);
          return std::vector<Tensor>{};
        }, {uniform({40, 50}, 3, -1, 1, dtype), a, b}, tol);
      }
    }
    // Into rows of a larger tensor: the other rows stay as they were.
    check_op([](std::vector<Tensor>& v) {
      Tensor rows = v[0].slice_rows(2, 6);
      matmul_accumulate_(rows, v[1], v[2]);
      return std::vector<Tensor>{};
    }, {uniform({9, 5}, 4, -1, 1, dtype), uniform({4, 6}, 5, -1, 1, dtype), uniform({6, 5}, 6, -1, 1, dtype)}, tol);
    // Operands aliasing the output read it as it was before the call.
    check_op([](std::vector<Tensor>& v) {
      matmul_accumulate_(v[0], v[0], v[0]);
      matmul_accumulate_(v[0], v[0], v[0], true, false);
      return std::vector<Tensor>{};
    }, {uniform({7, 7}, 7, -1, 1, dtype)}, tol);
    // k = 0 adds nothing.
    check_op([](std::vector<Tensor>& v) {
      matmul_accumulate_(v[0], v[1], v[2]);
      return std::vector<Tensor>{};
    }, {uniform({2, 3}, 8, -1, 1, dtype), zeros({2, 0}, dtype), zeros({0, 3}, dtype)}, kExact);
  }
}

TEST_CASE("empty dimensions", "[linalg][empty]") {
  check_binary([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, zeros({3, 0}), zeros({0, 4}), kExact);
  check_binary([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, zeros({2, 3, 0}, DType::f64),
               zeros({0, 2}, DType::f64), kExact);
  check_binary([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, zeros({0}), zeros({0}), kExact);
  check_binary([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, zeros({0, 4}), ones({4, 2}), kExact);
  check_binary([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, zeros({0, 3, 4}), ones({4, 2}), kExact);
  check_binary([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, zeros({3, 0}, DType::i64),
               zeros({0, 2}, DType::i64), kExact);
}

TEST_CASE("TF32 products are allowed only on request and stay close", "[linalg][tf32]") {
  const Tensor a = uniform({256, 512}, 50), b = uniform({512, 128}, 51);
  const Tensor want = matmul(a, b);
  REQUIRE_FALSE(cuda::allow_tf32());
  REQUIRE_GPU_MATCHES(matmul(a.to(gpu()), b.to(gpu())), want, product_tolerance(DType::f32, 512));
  cuda::set_allow_tf32(true);
  // TF32 keeps 10 mantissa bits of each operand: errors around 1e-3 of the terms.
  const Tensor tf32 = matmul(a.to(gpu()), b.to(gpu()));
  cuda::set_allow_tf32(false);
  REQUIRE_GPU_MATCHES(tf32, want, Tolerance{1e-2, 5e-2});
  // and switching back gives exact FP32 products again
  REQUIRE_GPU_MATCHES(matmul(a.to(gpu()), b.to(gpu())), want, product_tolerance(DType::f32, 512));
}

TEST_CASE("matmul errors are the CPU's", "[linalg][errors]") {
  const Tensor a = ones({2, 3}, DType::f32, gpu()), b = ones({4, 5}, DType::f32, gpu());
  CHECK_THROWS_WITH(matmul(a, b), Contains("matmul") && Contains("[2, 3]") && Contains("[4, 5]"));
  CHECK_THROWS_WITH(matmul(a, ones({3, 2}, DType::f64, gpu())), Contains("f32") && Contains("f64"));
  CHECK_THROWS_AS(matmul(ones({2, 2}, DType::boolean, gpu()), ones({2, 2}, DType::boolean, gpu())), Error);
  Tensor wrong = zeros({5, 5}, DType::f32, gpu());
  CHECK_THROWS_WITH(matmul_accumulate_(wrong, a, ones({3, 4}, DType::f32, gpu())), Contains("matmul_accumulate_"));
}
