// Element-wise operations (core/ops/elementwise.h) against naive loops, with broadcasting.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>

#include "core/ops.h"
#include "tests/core/test_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using test_util::uniform;
using test_util::values;

namespace {

using BinaryFn = std::function<Tensor(const Tensor&, const Tensor&)>;
using RefFn = std::function<double(double, double)>;

// Naive broadcast reference: out[i] = f(a[bcast(i)], b[bcast(i)]) over the expected out shape.
std::vector<double> broadcast_ref(const Tensor& a, const Tensor& b, const Shape& out_shape, const RefFn& f) {
  const std::vector<double> va = values(a), vb = values(b);
  std::vector<double> out(shape_numel(out_shape));
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(out.size()); ++i) {
    const auto idx = test_util::unravel(i, out_shape);
    out[i] = f(va[test_util::broadcast_flat(idx, a.shape())], vb[test_util::broadcast_flat(idx, b.shape())]);
  }
  return out;
}

struct NamedBinary {
  const char* name;
  BinaryFn op;
  RefFn ref;
};

const std::vector<NamedBinary>& binary_ops() {
  static const std::vector<NamedBinary> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double x, double y) { return x + y; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double x, double y) { return x - y; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double x, double y) { return x * y; }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double x, double y) { return x / y; }},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](double x, double y) { return std::pow(x, y); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double x, double y) { return std::max(x, y); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double x, double y) { return std::min(x, y); }},
      {"operator+", [](const Tensor& a, const Tensor& b) { return a + b; }, [](double x, double y) { return x + y; }},
      {"operator-", [](const Tensor& a, const Tensor& b) { return a - b; }, [](double x, double y) { return x - y; }},
      {"operator*", [](const Tensor& a, const Tensor& b) { return a * b; }, [](double x, double y) { return x * y; }},
      {"operator/", [](const Tensor& a, const Tensor& b) { return a / b; }, [](double x, double y) { return x / y; }},
  };
  return ops;
}

// Runs every binary op on a (values in [0.5, 2)) and b (values in [0.5, 2)) and compares.
void check_all_binary(const Shape& sa, const Shape& sb, const Shape& expected, DType dtype) {
  const Tensor a = uniform(sa, 11, 0.5, 2, dtype), b = uniform(sb, 12, 0.5, 2, dtype);
  const double tol = dtype == DType::f32 ? 1e-6 : 1e-14;
  for (const NamedBinary& op : binary_ops()) {
    INFO(op.name << " " << a.description() << " with " << b.description());
    const Tensor out = op.op(a, b);
    REQUIRE(out.shape() == expected);
    REQUIRE(out.dtype() == dtype);
    REQUIRE_VALUES(out, broadcast_ref(a, b, expected, op.ref), tol, tol);
  }
}

}  // namespace

TEST_CASE("binary ops broadcast like numpy", "[elementwise][broadcast]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    check_all_binary({2, 3}, {2, 3}, {2, 3}, dtype);
    check_all_binary({2, 3}, {3}, {2, 3}, dtype);
    check_all_binary({3}, {2, 3}, {2, 3}, dtype);
    check_all_binary({2, 1}, {1, 3}, {2, 3}, dtype);
    check_all_binary({4, 1, 3}, {2, 1}, {4, 2, 3}, dtype);
    check_all_binary({}, {2, 3}, {2, 3}, dtype);
    check_all_binary({2, 3}, {}, {2, 3}, dtype);
    check_all_binary({}, {}, {}, dtype);
    check_all_binary({3, 1, 5}, {1, 4, 1}, {3, 4, 5}, dtype);
    check_all_binary({2, 3, 1, 4}, {3, 5, 1}, {2, 3, 5, 4}, dtype);
    check_all_binary({1, 1, 7}, {6, 1}, {1, 6, 7}, dtype);
  }
}

TEST_CASE("binary ops on large tensors (parallel path)", "[elementwise][parallel]") {
  check_all_binary({400, 300}, {400, 300}, {400, 300}, DType::f32);  // 120k elements, one long row
  check_all_binary({1000, 200}, {200}, {1000, 200}, DType::f32);     // many rows, broadcast bias
  check_all_binary({1000, 1}, {1, 150}, {1000, 150}, DType::f64);    // outer product
  check_all_binary({150001}, {}, {150001}, DType::f32);              // tensor with scalar
}

TEST_CASE("scalar overloads and operators", "[elementwise][scalar]") {
  const Tensor t = from_vector<float>({-2, -0.5f, 0.25f, 1, 4}, {5});
  REQUIRE_VALUES(add(t, 1.5), {-0.5, 1, 1.75, 2.5, 5.5});
  REQUIRE_VALUES(t + 1.5, {-0.5, 1, 1.75, 2.5, 5.5});
  REQUIRE_VALUES(1.5 + t, {-0.5, 1, 1.75, 2.5, 5.5});
  REQUIRE_VALUES(sub(t, 1), {-3, -1.5, -0.75, 0, 3});
  REQUIRE_VALUES(t - 1.0, {-3, -1.5, -0.75, 0, 3});
  REQUIRE_VALUES(rsub(2, t), {4, 2.5, 1.75, 1, -2});
  REQUIRE_VALUES(2.0 - t, {4, 2.5, 1.75, 1, -2});
  REQUIRE_VALUES(mul(t, -2), {4, 1, -0.5, -2, -8});
  REQUIRE_VALUES(t * -2.0, {4, 1, -0.5, -2, -8});
  REQUIRE_VALUES(-2.0 * t, {4, 1, -0.5, -2, -8});
  REQUIRE_VALUES(div(t, 4), {-0.5, -0.125, 0.0625, 0.25, 1});
  REQUIRE_VALUES(t / 4.0, {-0.5, -0.125, 0.0625, 0.25, 1});
  REQUIRE_VALUES(rdiv(1, t), {-0.5, -2, 4, 1, 0.25});
  REQUIRE_VALUES(1.0 / t, {-0.5, -2, 4, 1, 0.25});
  REQUIRE_VALUES(-t, {2, 0.5, -0.25, -1, -4});
  REQUIRE_VALUES(pow(t, 2.0), {4, 0.25, 0.0625, 1, 16});
  REQUIRE_VALUES(pow(t, 3.0), {-8, -0.125, 0.015625, 1, 64}, 1e-6);
  REQUIRE_VALUES(pow(abs(t), 0.5), {std::sqrt(2.0), std::sqrt(0.5), 0.5, 1, 2}, 1e-6);
  REQUIRE_VALUES(pow(abs(t), -1.5), {std::pow(2.0, -1.5), std::pow(0.5, -1.5), 8, 1, 0.125}, 1e-6);
  REQUIRE_VALUES(maximum(t, 0.25), {0.25, 0.25, 0.25, 1, 4});
  REQUIRE_VALUES(minimum(t, 0.25), {-2, -0.5, 0.25, 0.25, 0.25});
  REQUIRE_VALUES(scale_shift(t, 3, -1), {-7, -2.5, -0.25, 2, 11});
  // f64 keeps full precision through the fused scalar paths.
  const Tensor d = from_vector<double>({0.1, 1.0 / 3});
  REQUIRE_VALUES(d + 0.2, {0.1 + 0.2, 1.0 / 3 + 0.2}, 1e-15);
  REQUIRE_VALUES(d * 3.0, {0.1 * 3, 1.0}, 1e-15);
  REQUIRE_VALUES(1.0 / d, {10, 3}, 1e-15);
}

TEST_CASE("unary math functions match <cmath>", "[elementwise][unary]") {
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
    std::function<double(double)> ref;
    double low, high;
  };
  const std::vector<Case> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double v) { return -v; }, -3, 3},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double v) { return std::abs(v); }, -3, 3},
      {"square", [](const Tensor& x) { return square(x); }, [](double v) { return v * v; }, -3, 3},
      {"sign", [](const Tensor& x) { return sign(x); }, [](double v) { return double((v > 0) - (v < 0)); }, -3, 3},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }, -10, 10},
      {"log", [](const Tensor& x) { return log(x); }, [](double v) { return std::log(v); }, 0.01, 100},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, -5, 5},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double v) { return 1 / (1 + std::exp(-v)); },
       -20, 20},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); }, 0, 100},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double v) { return v > 0 ? v : 0; }, -3, 3},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); }, [](double v) { return v > 0 ? v : 0.1 * v; },
       -3, 3},
      {"clip", [](const Tensor& x) { return clip(x, -0.5, 1.5); },
       [](double v) { return std::min(std::max(v, -0.5), 1.5); }, -3, 3},
      {"pow_scalar", [](const Tensor& x) { return pow(x, 1.7); }, [](double v) { return std::pow(v, 1.7); }, 0, 4},
      {"rdiv", [](const Tensor& x) { return rdiv(3, x); }, [](double v) { return 3 / v; }, 0.5, 4},
  };
  // 7 elements (one scalar loop) and 150k elements (the OpenMP path).
  for (std::int64_t n : {std::int64_t{7}, std::int64_t{150000}}) {
    for (DType dtype : {DType::f32, DType::f64}) {
      for (const Case& c : cases) {
        INFO(c.name << " on " << n << " elements of " << dtype_name(dtype));
        const Tensor x = uniform({n}, 5, c.low, c.high, dtype);
        const Tensor y = c.op(x);
        REQUIRE(y.shape() == x.shape());
        REQUIRE(y.dtype() == dtype);
        std::vector<double> want = values(x);
        for (double& v : want) v = c.ref(v);
        const double tol = dtype == DType::f32 ? 2e-6 : 1e-13;
        REQUIRE_VALUES(y, want, tol, tol);
      }
    }
  }
  // Edge values.
  REQUIRE_VALUES(sign(from_vector<float>({-0.0f, 0.0f, -1e-30f, 1e-30f})), {0, 0, -1, 1});
  REQUIRE_VALUES(sigmoid(from_vector<float>({-100, 0, 100})), {0, 0.5, 1}, 0, 1e-30);
  REQUIRE_VALUES(relu(from_vector<double>({-1, 0, 2})), {0, 0, 2});
  CHECK_THROWS_WITH(clip(ones({2}), 1, 0), Contains("clip"));
}

TEST_CASE("integer arithmetic is exact and division truncates", "[elementwise][integer]") {
  const Tensor a = from_vector<std::int32_t>({7, -7, 7, -7, 0, 9}, {6});
  const Tensor b = from_vector<std::int32_t>({2, 2, -2, -2, 3, 10}, {6});
  CHECK(div(a, b).dtype() == DType::i32);
  CHECK(div(a, b).to_vector<std::int32_t>() == std::vector<std::int32_t>{3, -3, -3, 3, 0, 0});
  REQUIRE_VALUES(a + b, {9, -5, 5, -9, 3, 19});
  REQUIRE_VALUES(a - b, {5, -9, 9, -5, -3, -1});
  REQUIRE_VALUES(a * b, {14, -14, -14, 14, 0, 90});
  REQUIRE_VALUES(maximum(a, b), {7, 2, 7, -2, 3, 10});
  REQUIRE_VALUES(minimum(a, b), {2, -7, -2, -7, 0, 9});
  REQUIRE_VALUES(pow(from_vector<std::int32_t>({2, 3, -2}), from_vector<std::int32_t>({10, 2, 3})), {1024, 9, -8});
  REQUIRE_VALUES(a / 2.0, {3, -3, 3, -3, 0, 4});
  REQUIRE_VALUES(a + 1.0, {8, -6, 8, -6, 1, 10});
  REQUIRE_VALUES(a - 1.0, {6, -8, 6, -8, -1, 8});
  REQUIRE_VALUES(a * 3.0, {21, -21, 21, -21, 0, 27});
  REQUIRE_VALUES(10.0 - a, {3, 17, 3, 17, 10, 1});
  REQUIRE_VALUES(rdiv(20, b), {10, 10, -10, -10, 6, 2});
  REQUIRE_VALUES(pow(b, 2.0), {4, 4, 4, 4, 9, 100});
  REQUIRE_VALUES(abs(a), {7, 7, 7, 7, 0, 9});
  REQUIRE_VALUES(neg(a), {-7, 7, -7, 7, 0, -9});
  REQUIRE_VALUES(sign(a), {1, -1, 1, -1, 0, 1});
  REQUIRE_VALUES(square(a), {49, 49, 49, 49, 0, 81});
  REQUIRE_VALUES(relu(a), {7, 0, 7, 0, 0, 9});
  REQUIRE_VALUES(clip(a, -1, 8), {7, -1, 7, -1, 0, 8});

  // i64 keeps values beyond 2^31 exactly, with broadcasting.
  const std::int64_t big = std::int64_t{1} << 40;
  const Tensor l = from_vector<std::int64_t>({big + 1, -big - 1}, {2, 1});
  const Tensor r = from_vector<std::int64_t>({1, 2, -3}, {3});
  const Tensor q = div(l, r);
  CHECK(q.shape() == Shape{2, 3});
  CHECK(q.to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{big + 1, (big + 1) / 2, (big + 1) / -3, -big - 1, (-big - 1) / 2, (-big - 1) / -3});
  CHECK((l * r).to_vector<std::int64_t>()[5] == (big + 1) * 3);

  // Large integer tensors through the parallel path.
  const std::int64_t n = 200000;
  const Tensor x = arange(-n / 2, n / 2, 1, DType::i64), y = full({n}, 7, DType::i64);
  const std::vector<std::int64_t> got = div(x, y).to_vector<std::int64_t>();
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < n; ++i) wrong += got[i] != (i - n / 2) / 7;
  CHECK(wrong == 0);
}

TEST_CASE("integer powers are exact, wrap like NumPy's, and 0 to a negative power is an error",
          "[elementwise][integer]") {
  // Beyond 2^53, where pow() in double loses the last digits: 3^39 and 7^22 exactly.
  const Tensor base = from_vector<std::int64_t>({3, 7, -3, 2, 10});
  const Tensor exponent = from_vector<std::int64_t>({39, 22, 37, 62, 0});
  CHECK(pow(base, exponent).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{4052555153018976267LL, 3909821048582988049LL, -450283905890997363LL,
                                  std::int64_t{1} << 62, 1});
  // A result too large wraps modulo 2^32 (as NumPy's int32 power): 3^21 = 10460353203.
  CHECK(pow(from_vector<std::int32_t>({3}), from_vector<std::int32_t>({21})).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{static_cast<std::int32_t>(10460353203LL - 2LL * 4294967296LL)});
  // Negative exponents truncate 1 / x^|y| toward zero, as integer division does.
  CHECK(pow(from_vector<std::int32_t>({1, -1, -1, 2, -5}), from_vector<std::int32_t>({-3, -3, -2, -1, -2}))
            .to_vector<std::int32_t>() == std::vector<std::int32_t>{1, -1, 1, 0, 0});
  // The scalar form, whole and fractional exponents.
  CHECK(pow(from_vector<std::int64_t>({3, -2}), 39.0).to_vector<std::int64_t>()[0] == 4052555153018976267LL);
  CHECK(pow(from_vector<std::int32_t>({-2, 9}), 3.0).to_vector<std::int32_t>() == std::vector<std::int32_t>{-8, 729});
  CHECK(pow(from_vector<std::int32_t>({4, 9}), 0.5).to_vector<std::int32_t>() == std::vector<std::int32_t>{2, 3});
  // 0 ** -1 divides by zero.
  CHECK_THROWS_WITH(pow(from_vector<std::int32_t>({2, 0}), from_vector<std::int32_t>({-1, -1})),
                    Contains("pow") && Contains("0 to a negative power"));
  CHECK_THROWS_WITH(pow(from_vector<std::int64_t>({0}), -2.0), Contains("negative power"));
}

TEST_CASE("integer division by zero throws instead of crashing", "[elementwise][integer][errors]") {
  const Tensor a = from_vector<std::int32_t>({1, 2, 3});
  const Tensor z = from_vector<std::int32_t>({1, 0, 2});
  CHECK_THROWS_AS(div(a, z), Error);
  CHECK_THROWS_WITH(a / z, Contains("div") && Contains("zero"));
  CHECK_THROWS_AS(div(a, 0.0), Error);
  CHECK_THROWS_AS(a / 0.4, Error);  // the scalar takes the tensor's dtype: 0
  CHECK_THROWS_AS(rdiv(1, z), Error);
  CHECK_THROWS_AS(1.0 / z, Error);
  CHECK_THROWS_AS(div(from_vector<std::int64_t>({5}), from_vector<std::int64_t>({0})), Error);
  // Large tensors: the zero sits in a chunk run by another thread.
  const std::int64_t n = 300000;
  for (DType dtype : {DType::i32, DType::i64}) {
    INFO(dtype_name(dtype));
    const Tensor big = ones({n}, dtype);
    Tensor den = ones({n}, dtype);
    index_put_(den, {Index::at(n - 1)}, zeros({}, dtype));
    CHECK_THROWS_AS(div(big, den), Error);
    CHECK_THROWS_AS(rdiv(1, den), Error);
    CHECK_THROWS_AS(div(big.reshape({600, 500}), den.reshape({600, 500})), Error);
    CHECK_THROWS_AS(div(big, zeros({}, dtype)), Error);
    CHECK_THROWS_AS(div(big.reshape({600, 500}), zeros({500}, dtype)), Error);
    CHECK_THROWS_AS(div(big, 0.0), Error);
  }
  // Floats follow IEEE.
  REQUIRE_VALUES(div(from_vector<float>({1, -1}), zeros({2})), {INFINITY, -INFINITY});
}

TEST_CASE("comparisons return bool tensors", "[elementwise][compare]") {
  const Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = from_vector<float>({2, 2, 2}, {3});
  const auto check = [](const Tensor& t, std::vector<bool> want) {
    REQUIRE(t.dtype() == DType::boolean);
    REQUIRE(t.shape() == Shape{2, 3});
    REQUIRE(t.to_vector<bool>() == want);
  };
  check(equal(a, b), {false, true, false, false, false, false});
  check(not_equal(a, b), {true, false, true, true, true, true});
  check(less(a, b), {true, false, false, false, false, false});
  check(less_equal(a, b), {true, true, false, false, false, false});
  check(greater(a, b), {false, false, true, true, true, true});
  check(greater_equal(a, b), {false, true, true, true, true, true});
  check(equal(a, 4), {false, false, false, true, false, false});
  check(not_equal(a, 4), {true, true, true, false, true, true});
  check(less(a, 3), {true, true, false, false, false, false});
  check(less_equal(a, 3), {true, true, true, false, false, false});
  check(greater(a, 5), {false, false, false, false, false, true});
  check(greater_equal(a, 5), {false, false, false, false, true, true});
  const Tensor i = from_vector<std::int64_t>({-1, 0, 1});
  CHECK(less(i, 0.0).to_vector<bool>() == std::vector<bool>{true, false, false});
  const Tensor m = from_vector<bool>({true, true, false, false}, {4});
  const Tensor n = from_vector<bool>({true, false, true, false}, {4});
  CHECK(equal(m, n).to_vector<bool>() == std::vector<bool>{true, false, false, true});
  // Logical and/or spelled as mul/maximum on bool.
  CHECK(mul(m, n).to_vector<bool>() == std::vector<bool>{true, false, false, false});
  CHECK(maximum(m, n).to_vector<bool>() == std::vector<bool>{true, true, true, false});
  CHECK(minimum(m, n).to_vector<bool>() == std::vector<bool>{true, false, false, false});
}

TEST_CASE("where selects with broadcasting", "[elementwise][where]") {
  const Tensor cond = from_vector<bool>({true, false}, {2, 1});
  const Tensor a = from_vector<float>({1, 2, 3}, {1, 3});
  const Tensor b = scalar_tensor(-1);
  const Tensor w = where(cond, a, b);
  CHECK(w.shape() == Shape{2, 3});
  REQUIRE_VALUES(w, {1, 2, 3, -1, -1, -1});
  const Tensor x = uniform({4, 5, 6}, 3), y = uniform({5, 1}, 4);
  const Tensor c = greater(x, 0.0);
  const Tensor got = where(c, x, y);
  const std::vector<double> vx = values(x), vy = values(y);
  std::vector<double> want(vx.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const auto idx = test_util::unravel(static_cast<std::int64_t>(i), {4, 5, 6});
    want[i] = vx[i] > 0 ? vx[i] : vy[idx[1]];
  }
  REQUIRE_VALUES(got, want);
  REQUIRE_VALUES(where(from_vector<bool>({false, true}, {2}), from_vector<std::int32_t>({1, 2}),
                       from_vector<std::int32_t>({5, 6})),
                 {5, 2});
  CHECK_THROWS_WITH(where(ones({2}), a, b), Contains("where") && Contains("bool"));
  CHECK_THROWS_AS(where(cond, a, scalar_tensor(1, DType::f64)), Error);
  CHECK_THROWS_AS(where(from_vector<bool>({true, false, true}, {3}), ones({2}), ones({2})), Error);
}

TEST_CASE("relu_grad passes gy where y > 0, zero elsewhere (0 at exactly 0)", "[elementwise][relu]") {
  REQUIRE_VALUES(relu_grad(from_vector<double>({5, 6, 7, 8}), from_vector<double>({-1, 0, 2, 1e-30})), {0, 0, 7, 8});
  // Large enough for the parallel path, and y broadcast over gy's rows.
  const Tensor gy = uniform({300, 400}, 11), y = uniform({400}, 12);
  const std::vector<double> vg = values(gy), vy = values(y);
  std::vector<double> want(vg.size());
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = vy[i % 400] > 0 ? vg[i] : 0;
  REQUIRE_VALUES(relu_grad(gy, y), want);
  CHECK_THROWS_WITH(relu_grad(ones({2}), ones({3})), Contains("relu_grad"));
  CHECK_THROWS_WITH(relu_grad(from_vector<bool>({true}), from_vector<bool>({true})), Contains("relu_grad") && Contains("bool"));
}

TEST_CASE("add_ accumulates in place with a broadcast source", "[elementwise][inplace]") {
  Tensor base = test_util::iota({2, 3});
  Tensor view = base.reshape({6}).reshape({2, 3});
  add_(view, from_vector<float>({10, 20, 30}, {3}));
  REQUIRE_VALUES(base, {10, 21, 32, 13, 24, 35});  // written through the shared storage
  add_(view, scalar_tensor(0.5));
  REQUIRE_VALUES(view, {10.5, 21.5, 32.5, 13.5, 24.5, 35.5});
  add_(view, from_vector<float>({-10, -20}, {2, 1}));
  REQUIRE_VALUES(view, {0.5, 11.5, 22.5, -6.5, 4.5, 15.5});
  add_(view, view);  // aliasing source
  REQUIRE_VALUES(view, {1, 23, 45, -13, 9, 31});
  // A source overlapping dst reads the values from before the update, as in numpy.
  Tensor seq = arange(0, 6, 1);
  Tensor tail = seq.slice_rows(1, 6);
  add_(tail, seq.slice_rows(0, 5));  // seq[1:] += seq[:5]
  REQUIRE_VALUES(seq, {0, 1, 3, 5, 7, 9});
  Tensor grid = test_util::iota({3, 3});
  add_(grid, grid.slice_rows(0, 1));  // every row += the original row 0
  REQUIRE_VALUES(grid, {0, 2, 4, 3, 5, 7, 6, 8, 10});
  Tensor long_seq = ones({200000});
  Tensor long_tail = long_seq.slice_rows(1, 200000);
  add_(long_tail, long_seq.slice_rows(0, 199999));
  CHECK(sum(long_seq).item() == 1 + 2 * 199999);
  // Large, through the parallel path.
  Tensor big = uniform({500, 400}, 1);
  const Tensor src = uniform({400}, 2);
  const std::vector<double> before = values(big), vs = values(src);
  add_(big, src);
  std::vector<double> want(before.size());
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<float>(before[i] + vs[i % 400]);
  REQUIRE_VALUES(big, want);
  CHECK_THROWS_WITH(add_(view, ones({3, 3})), Contains("add_"));
  Tensor small = ones({3});
  CHECK_THROWS_AS(add_(small, ones({2, 3})), Error);  // would change dst's shape
  CHECK_THROWS_AS(add_(small, ones({3}, DType::f64)), Error);
}

TEST_CASE("div_into_ writes src / d into a view, equal to div bit for bit", "[elementwise][inplace]") {
  for (const DType dtype : {DType::f32, DType::f64}) {
    for (const double d : {2.0, 3.0, 4.0, 0.25, 7.0}) {
      const Tensor src = uniform({300, 500}, 3).to(dtype);
      Tensor flat = full({150000 + 10}, -1.0, dtype);
      Tensor into = flat.slice_rows(5, 150005).reshape({300, 500});
      div_into_(into, src, d);
      const std::vector<double> want = values(div(src, d));
      REQUIRE_VALUES(into, want);  // exact: a power of two's inverse multiplies exactly
      REQUIRE_VALUES(flat.slice_rows(0, 5), {-1, -1, -1, -1, -1});  // nothing outside the view
      REQUIRE_VALUES(flat.slice_rows(150005, 150010), {-1, -1, -1, -1, -1});
      Tensor same = src.clone();
      div_into_(same, same, d);  // in place
      REQUIRE_VALUES(same, want);
    }
  }
  Tensor three = zeros({3}), ints = zeros({3}, DType::i32);
  CHECK_THROWS_WITH(div_into_(three, ones({4}), 2), Contains("div_into_") && Contains("shapes differ"));
  CHECK_THROWS_WITH(div_into_(ints, zeros({3}, DType::i32), 2), Contains("div_into_"));
  Tensor seq = arange(0, 6, 1);
  Tensor tail = seq.slice_rows(1, 6);
  CHECK_THROWS_WITH(div_into_(tail, seq.slice_rows(0, 5), 2), Contains("div_into_") && Contains("overlaps"));
}

TEST_CASE("operand errors name the operation, dtypes and shapes", "[elementwise][errors]") {
  const Tensor f = ones({2, 3}), d = ones({2, 3}, DType::f64);
  CHECK_THROWS_AS(add(f, d), Error);
  CHECK_THROWS_WITH(add(f, d), Contains("add") && Contains("f32") && Contains("f64"));
  CHECK_THROWS_WITH(f * d, Contains("mul") && Contains("f32") && Contains("f64"));
  CHECK_THROWS_WITH(less(f, d), Contains("less") && Contains("f64"));
  CHECK_THROWS_WITH(add(f, ones({4})), Contains("add") && Contains("[2, 3]") && Contains("[4]"));
  CHECK_THROWS_WITH(sub(ones({3, 1, 2}), ones({4, 3})), Contains("[3, 1, 2]") && Contains("[4, 3]"));
  CHECK_THROWS_AS(maximum(ones({2}), ones({3})), Error);
  const Tensor i = ones({3}, DType::i32);
  CHECK_THROWS_WITH(exp(i), Contains("exp") && Contains("i32"));
  CHECK_THROWS_AS(log(i), Error);
  CHECK_THROWS_AS(tanh(i), Error);
  CHECK_THROWS_AS(sigmoid(i), Error);
  CHECK_THROWS_AS(sqrt(i), Error);
  const Tensor b = ones({3}, DType::boolean);
  CHECK_THROWS_WITH(add(b, b), Contains("add") && Contains("bool"));
  CHECK_THROWS_AS(sub(b, b), Error);
  CHECK_THROWS_AS(div(b, b), Error);
  CHECK_THROWS_AS(pow(b, b), Error);
  CHECK_THROWS_AS(b + 1.0, Error);
  CHECK_THROWS_AS(neg(b), Error);
  CHECK_THROWS_AS(abs(b), Error);
  CHECK_THROWS_AS(exp(b), Error);
  CHECK_THROWS_AS(add(Tensor(), f), Error);
}

TEST_CASE("integer min / -1 is an overflow error, not a trap", "[elementwise][errors]") {
  const std::int32_t min32 = std::numeric_limits<std::int32_t>::min();
  const std::int64_t min64 = std::numeric_limits<std::int64_t>::min();
  REQUIRE_THROWS_WITH(div(from_vector<std::int32_t>({min32}), from_vector<std::int32_t>({-1})),
                      Catch::Contains("integer overflow"));
  REQUIRE_THROWS_WITH(div(from_vector<std::int64_t>({min64}), from_vector<std::int64_t>({-1})),
                      Catch::Contains("integer overflow"));
  REQUIRE_THROWS_WITH(rdiv(static_cast<double>(min32), from_vector<std::int32_t>({-1})),
                      Catch::Contains("integer overflow"));
  // Other negative quotients still work.
  REQUIRE(div(from_vector<std::int32_t>({min32}), from_vector<std::int32_t>({1})).to_vector<std::int32_t>()[0] == min32);
  REQUIRE(div(from_vector<std::int32_t>({-7}), from_vector<std::int32_t>({-1})).to_vector<std::int32_t>()[0] == 7);
}

TEST_CASE("sqrt is IEEE's at every position: inf, -0, subnormals, negatives", "[elementwise][unary]") {
  // Eigen's fast packet sqrt got +inf, -0 and subnormals wrong in the vector body only; 67
  // elements put each special value both inside a vector and in the scalar tail.
  for (DType dtype : {DType::f32, DType::f64}) {
    const double sub = dtype == DType::f32 ? 1e-40 : 1e-310;
    std::vector<double> in;
    for (int i = 0; i < 67; ++i) {
      const double specials[] = {std::numeric_limits<double>::infinity(), -0.0, sub, 4.0, -1.0, 2.0};
      in.push_back(specials[i % 6]);
    }
    const Tensor x = from_vector(in, {67}).to(dtype);
    const std::vector<double> got = sqrt(x).to_vector<double>();
    const std::vector<double> half = pow(x, 0.5).to_vector<double>();
    const std::vector<double> xs = x.to_vector<double>();
    for (std::size_t i = 0; i < in.size(); ++i) {
      const double expected = dtype == DType::f32 ? double(std::sqrt(static_cast<float>(xs[i]))) : std::sqrt(xs[i]);
      INFO(dtype_name(dtype) << " element " << i << " = " << xs[i]);
      if (std::isnan(expected)) {
        REQUIRE(std::isnan(got[i]));
        REQUIRE(std::isnan(half[i]));
      } else {
        REQUIRE(got[i] == expected);
        REQUIRE(half[i] == expected);
        REQUIRE(std::signbit(got[i]) == std::signbit(expected));
      }
    }
  }
}

TEST_CASE("exp underflows as IEEE's: denormals, then 0, and 0 at -inf, at every position", "[elementwise][exp]") {
  // Eigen's packet exp returned the smallest normal for every argument below its clamp, in the
  // vector body only (so exp(-inf) depended on the element's position); a softmax over a -inf
  // mask then leaked weight.
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    std::vector<double> in;
    for (int i = 0; i < 37; ++i) in.push_back(i % 4 == 0 ? -inf : i % 4 == 1 ? -100.0 - i : i % 4 == 2 ? -800.0 : -1.5);
    Tensor x = from_vector<double>(in, {static_cast<std::int64_t>(in.size())}).to(dtype);
    const std::vector<double> got = exp(x).to_vector<double>();
    for (std::size_t i = 0; i < in.size(); ++i) {
      INFO("x = " << in[i]);
      const double want = dtype == DType::f32 ? static_cast<double>(std::exp(static_cast<float>(in[i]))) : std::exp(in[i]);
      CHECK(got[i] == want);
    }
  }
}
