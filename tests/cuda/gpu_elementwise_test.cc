// Element-wise operations on cuda:0 against the CPU: binary ops with broadcasting for every
// dtype they accept, scalar forms, unary math, comparisons, where, relu_grad, add_, and the
// CPU's rules for NaN, integer division and empty tensors.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "tests/cuda/gpu_test_util.h"

using namespace tandem;
using namespace gpu_test;
using Catch::Matchers::Contains;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);

struct NamedBinary {
  const char* name;
  BinaryFn fn;
  bool integer;  // also defined (and exact) on i32/i64
  bool boolean;  // also defined on bool
};

const std::vector<NamedBinary>& binary_ops() {
  static const std::vector<NamedBinary> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, true, false},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, true, false},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, true, true},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, true, false},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, true, false},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, true, true},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, true, true},
      {"relu_grad", [](const Tensor& a, const Tensor& b) { return relu_grad(a, b); }, true, false},
      {"equal", [](const Tensor& a, const Tensor& b) { return equal(a, b); }, true, true},
      {"not_equal", [](const Tensor& a, const Tensor& b) { return not_equal(a, b); }, true, true},
      {"less", [](const Tensor& a, const Tensor& b) { return less(a, b); }, true, true},
      {"less_equal", [](const Tensor& a, const Tensor& b) { return less_equal(a, b); }, true, true},
      {"greater", [](const Tensor& a, const Tensor& b) { return greater(a, b); }, true, true},
      {"greater_equal", [](const Tensor& a, const Tensor& b) { return greater_equal(a, b); }, true, true},
  };
  return ops;
}

// Operands for a dtype: floats in [0.5, 2) (pow stays tame, no division by 0), integers in
// [1, 5] (ties for the comparisons, no division by zero, small powers), random booleans.
Tensor operand(const Shape& shape, std::uint64_t seed, DType dtype) {
  if (is_floating(dtype)) return uniform(shape, seed, 0.5, 2, dtype);
  if (dtype == DType::boolean) return random_ints(shape, seed, 0, 1, DType::boolean);
  return random_ints(shape, seed, 1, 5, dtype);
}

// Floating pow rounds differently (the CPU goes through double; integer powers are exact on both);
// + - * / and the selections are exact
// up to the GPU's contraction of multiply-adds, which these single operations do not have.
Tolerance binary_tolerance(const char* name, DType dtype) {
  if (std::string(name) == "pow") return for_dtype(dtype, 4e-7, 1e-15);
  return for_dtype(dtype, 1e-7, 1e-16);
}

void check_all_binary(const Shape& sa, const Shape& sb, DType dtype) {
  const Tensor a = operand(sa, 11, dtype), b = operand(sb, 12, dtype);
  for (const NamedBinary& op : binary_ops()) {
    if (dtype == DType::boolean && !op.boolean) continue;
    if ((dtype == DType::i32 || dtype == DType::i64) && !op.integer) continue;
    INFO(op.name << " of " << a.description() << " and " << b.description());
    check_binary(op.fn, a, b, binary_tolerance(op.name, dtype));
  }
}

}  // namespace

TEST_CASE("binary ops broadcast like numpy, every dtype", "[elementwise][broadcast]") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}},       {{2, 3}, {3}},          {{3}, {2, 3}},          {{2, 1}, {1, 3}},
      {{4, 1, 3}, {2, 1}},    {{}, {2, 3}},           {{2, 3}, {}},           {{}, {}},
      {{3, 1, 5}, {1, 4, 1}}, {{2, 3, 1, 4}, {3, 5, 1}}, {{1, 1, 7}, {6, 1}}, {{2, 1, 3, 1, 2}, {4, 1, 5, 1}},
      {{0, 3}, {3}},          {{2, 0}, {1, 1}},
  };
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64, DType::boolean})
    for (const auto& s : shapes) check_all_binary(s.first, s.second, dtype);
}

TEST_CASE("binary ops on large tensors and large broadcasts", "[elementwise][large]") {
  check_all_binary({400, 300}, {400, 300}, DType::f32);
  check_all_binary({1000, 200}, {200}, DType::f32);   // bias over many rows
  check_all_binary({1000, 1}, {1, 1500}, DType::f64);  // outer product, 1.5M elements
  check_all_binary({1 << 20}, {}, DType::f32);        // tensor with a scalar
  check_all_binary({64, 1, 128, 3}, {32, 1, 3}, DType::i64);
  check_all_binary({3, 1 << 19}, {3, 1}, DType::i32);
}

TEST_CASE("binary ops read views from their offset", "[elementwise][view]") {
  const Tensor a = uniform({10, 7}, 1, -2, 2), b = uniform({7}, 2, -2, 2);
  check_op([](std::vector<Tensor>& v) { return std::vector<Tensor>{v[0].slice_rows(3, 9) * v[1]}; }, {a, b}, kExact);
  check_op([](std::vector<Tensor>& v) { return std::vector<Tensor>{v[0].slice_rows(3, 4).reshape({7}) - v[0].slice_rows(9, 10)}; },
           {a}, kExact);
}

TEST_CASE("scalar forms of the arithmetic", "[elementwise][scalar]") {
  struct Case {
    const char* name;
    Tensor (*fn)(const Tensor&);
    Tolerance f32, f64;
  };
  const Tolerance exact32 = near(1e-7), exact64 = near(1e-16);
  const std::vector<Case> cases = {
      {"x + 1.5", [](const Tensor& x) { return x + 1.5; }, exact32, exact64},
      {"1.5 + x", [](const Tensor& x) { return 1.5 + x; }, exact32, exact64},
      {"x - 1", [](const Tensor& x) { return x - 1.0; }, exact32, exact64},
      {"2 - x", [](const Tensor& x) { return 2.0 - x; }, exact32, exact64},
      {"x * -2", [](const Tensor& x) { return x * -2.0; }, exact32, exact64},
      {"x / 4", [](const Tensor& x) { return x / 4.0; }, exact32, exact64},
      {"1 / x", [](const Tensor& x) { return 1.0 / x; }, exact32, exact64},
      {"-x", [](const Tensor& x) { return -x; }, kExact, kExact},
      {"x ** 2", [](const Tensor& x) { return pow(x, 2.0); }, exact32, exact64},
      {"x ** 3", [](const Tensor& x) { return pow(x, 3.0); }, near(4e-7), near(1e-15)},
      {"|x| ** 0.5", [](const Tensor& x) { return pow(abs(x), 0.5); }, near(4e-7), near(1e-15)},
      {"|x| ** -1.5", [](const Tensor& x) { return pow(abs(x), -1.5); }, near(4e-7), near(1e-15)},
      {"maximum(x, 0.25)", [](const Tensor& x) { return maximum(x, 0.25); }, kExact, kExact},
      {"minimum(x, 0.25)", [](const Tensor& x) { return minimum(x, 0.25); }, kExact, kExact},
      // a fused multiply-add on the GPU may round once where the CPU rounds twice
      {"scale_shift(x, 3, -1)", [](const Tensor& x) { return scale_shift(x, 3, -1); }, near(2e-7), near(1e-15)},
      {"x + 0.1 (f64 keeps the scalar's precision)", [](const Tensor& x) { return x + 0.1; }, exact32, exact64},
  };
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor x = away_from_zero({1000}, 3, 0.2, 4, dtype);
    for (const Case& c : cases) {
      INFO(c.name << " " << dtype_name(dtype));
      check_unary(c.fn, x, for_dtype(dtype, c.f32, c.f64));
    }
  }
}

TEST_CASE("unary math functions on 7 and 150001 elements", "[elementwise][unary]") {
  struct Case {
    const char* name;
    Tensor (*fn)(const Tensor&);
    double low, high;
    Tolerance f32;  // f64 within 1e-14 (libdevice's functions are within 2 ulp)
  };
  const std::vector<Case> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }, -3, 3, kExact},
      {"abs", [](const Tensor& x) { return abs(x); }, -3, 3, kExact},
      {"square", [](const Tensor& x) { return square(x); }, -3, 3, kExact},
      {"sign", [](const Tensor& x) { return sign(x); }, -3, 3, kExact},
      {"relu", [](const Tensor& x) { return relu(x); }, -3, 3, kExact},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); }, -3, 3, near(1e-7)},
      {"clip", [](const Tensor& x) { return clip(x, -0.5, 1.5); }, -3, 3, kExact},
      {"exp", [](const Tensor& x) { return exp(x); }, -10, 10, near(1e-6)},
      {"log", [](const Tensor& x) { return log(x); }, 0.01, 100, near(1e-6)},
      {"tanh", [](const Tensor& x) { return tanh(x); }, -5, 5, near(1e-6)},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, -20, 20, near(1e-6)},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, 0, 100, near(1e-7)},
      {"pow_scalar", [](const Tensor& x) { return pow(x, 1.7); }, 0, 4, near(1e-6)},
      {"rdiv", [](const Tensor& x) { return rdiv(3, x); }, 0.5, 4, near(1e-7)},
  };
  for (std::int64_t n : {std::int64_t{7}, std::int64_t{150001}}) {
    for (DType dtype : {DType::f32, DType::f64}) {
      for (const Case& c : cases) {
        INFO(c.name << " on " << n << " elements of " << dtype_name(dtype));
        check_unary(c.fn, uniform({n}, 5, c.low, c.high, dtype), for_dtype(dtype, c.f32, near(1e-14)));
      }
    }
  }
}

TEST_CASE("unary ops on integers are exact", "[elementwise][integer]") {
  for (DType dtype : {DType::i32, DType::i64}) {
    INFO(dtype_name(dtype));
    const Tensor x = random_ints({3, 1000}, 4, -9, 9, dtype);
    check_unary([](const Tensor& t) { return neg(t); }, x, kExact);
    check_unary([](const Tensor& t) { return abs(t); }, x, kExact);
    check_unary([](const Tensor& t) { return square(t); }, x, kExact);
    check_unary([](const Tensor& t) { return sign(t); }, x, kExact);
    check_unary([](const Tensor& t) { return relu(t); }, x, kExact);
    check_unary([](const Tensor& t) { return clip(t, -1, 8); }, x, kExact);
    check_unary([](const Tensor& t) { return t * 3.0 + 1.0; }, x, kExact);
    check_unary([](const Tensor& t) { return 10.0 - t; }, x, kExact);
    check_unary([](const Tensor& t) { return t / 2.0; }, x, kExact);  // truncates
    check_unary([](const Tensor& t) { return pow(t, 2.0); }, x, kExact);
    check_unary([](const Tensor& t) { return pow(t, 3.0); }, x, kExact);
    check_unary([](const Tensor& t) { return maximum(t, 2.0); }, x, kExact);
    check_unary([](const Tensor& t) { return rdiv(20, t); }, random_ints({500}, 5, 1, 9, dtype), kExact);
    check_unary([](const Tensor& t) { return rdiv(20, t); }, random_ints({500}, 6, -9, -1, dtype), kExact);
  }
  // Division truncates toward zero, with every sign combination, and i64 beyond 2^31.
  const Tensor a = from_vector<std::int32_t>({7, -7, 7, -7, 0, 9}, {6});
  const Tensor b = from_vector<std::int32_t>({2, 2, -2, -2, 3, 10}, {6});
  check_binary([](const Tensor& x, const Tensor& y) { return div(x, y); }, a, b, kExact);
  const std::int64_t big = std::int64_t{1} << 40;
  check_binary([](const Tensor& x, const Tensor& y) { return div(x, y) + x * y; },
               from_vector<std::int64_t>({big + 1, -big - 1}, {2, 1}), from_vector<std::int64_t>({1, 2, -3}, {3}),
               kExact);
  const std::int64_t n = 200000;
  check_binary([](const Tensor& x, const Tensor& y) { return div(x, y); }, arange(-n / 2, n / 2, 1, DType::i64),
               full({n}, 7, DType::i64), kExact);
  check_binary([](const Tensor& x, const Tensor& y) { return pow(x, y); },
               from_vector<std::int32_t>({2, 3, -2, 5, 2}, {5}), from_vector<std::int32_t>({10, 2, 3, 0, -1}, {5}),
               kExact);
}

TEST_CASE("integer division by zero and min / -1 are errors on the GPU too", "[elementwise][integer][errors]") {
  const auto divide = [](std::vector<Tensor>& v) { return std::vector<Tensor>{div(v[0], v[1])}; };
  const auto reciprocal = [](std::vector<Tensor>& v) { return std::vector<Tensor>{rdiv(1, v[0])}; };
  for (DType dtype : {DType::i32, DType::i64}) {
    INFO(dtype_name(dtype));
    // One zero deep inside a large tensor: another thread block than the first.
    Tensor den = ones({300000}, dtype);
    index_put_(den, {Index::at(299999)}, zeros({}, dtype));
    const Tensor num = ones({300000}, dtype);
    CHECK_THAT(require_same_error(divide, {num, den}), Contains("div") && Contains("zero"));
    CHECK_THAT(require_same_error(reciprocal, {den}), Contains("zero"));
    require_same_error(divide, {num.reshape({600, 500}), zeros({500}, dtype)});
    require_same_error([](std::vector<Tensor>& v) { return std::vector<Tensor>{div(v[0], 0.0)}; }, {num});
    // The GPU keeps working after the error.
    REQUIRE_GPU_MATCHES(div(num.to(gpu()), num.to(gpu())), num, kExact);
  }
  const std::int32_t min32 = std::numeric_limits<std::int32_t>::min();
  const std::int64_t min64 = std::numeric_limits<std::int64_t>::min();
  CHECK_THAT(require_same_error(divide, {from_vector<std::int32_t>({5, min32}), from_vector<std::int32_t>({1, -1})}),
             Contains("overflow"));
  CHECK_THAT(require_same_error(divide, {from_vector<std::int64_t>({min64}), from_vector<std::int64_t>({-1})}),
             Contains("overflow"));
  // Floats follow IEEE instead.
  check_binary([](const Tensor& x, const Tensor& y) { return div(x, y); }, from_vector<float>({1, -1, 0}),
               zeros({3}), kExact);
}

TEST_CASE("integer powers match the CPU exactly, beyond 2^53 and when they wrap", "[elementwise][integer]") {
  // pow() in double (2 ulp on the GPU) once gave 2 where the CPU gave 3: now both square exactly.
  const auto power = [](std::vector<Tensor>& v) { return std::vector<Tensor>{pow(v[0], v[1])}; };
  check_op(power, {from_vector<std::int64_t>({3, 7, -3, 2, 10, 1, -1, 2}), from_vector<std::int64_t>({39, 22, 37, 62, 0, -3, -3, -1})},
           kExact);
  check_op(power, {random_ints({3, 1000}, 5, -9, 9, DType::i32), random_ints({1000}, 6, 0, 40, DType::i32)}, kExact);
  check_op([](std::vector<Tensor>& v) { return std::vector<Tensor>{pow(v[0], 21.0)}; },
           {random_ints({5000}, 7, -9, 9, DType::i64)}, kExact);
  // 0 to a negative power, deep inside a large tensor: the same error as on the CPU.
  Tensor base = ones({300000}, DType::i32);
  index_put_(base, {Index::at(299999)}, zeros({}, DType::i32));
  CHECK_THAT(require_same_error(power, {base, full({}, -1, DType::i32)}), Contains("negative power"));
  CHECK_THAT(require_same_error([](std::vector<Tensor>& v) { return std::vector<Tensor>{pow(v[0], -1.0)}; }, {base}),
             Contains("negative power"));
}

TEST_CASE("NaN, infinities and signed zeros follow the CPU's rules", "[elementwise][nan]") {
  const Tensor x = from_vector<double>({kNaN, 1, kNaN, -kInf, kInf, -0.0, 0.0, -2, 3}, {9});
  const Tensor y = from_vector<double>({1, kNaN, kNaN, 1, kInf, 0.0, -0.0, kNaN, -kInf}, {9});
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    const Tensor a = x.to(dtype), b = y.to(dtype);
    // maximum(a, b) is a > b ? a : b and minimum a < b ? a : b: a NaN on the left loses, on
    // the right wins (not fmax's "ignore the NaN").
    for (const NamedBinary& op : binary_ops()) {
      INFO(op.name);
      if (std::string(op.name) == "pow") continue;  // pow(NaN, ...) is libm's business
      check_binary(op.fn, a, b, kExact);
    }
    check_binary([](const Tensor& p, const Tensor& q) { return add(p, q); }, a, b, kExact);
    check_binary([](const Tensor& p, const Tensor& q) { return mul(p, q); }, a, b, kExact);
    // sign(NaN) is 0 (neither > 0 nor < 0), sign(-0) is 0.
    check_unary([](const Tensor& t) { return sign(t); }, a, kExact);
    check_unary([](const Tensor& t) { return abs(t); }, a, kExact);
    check_unary([](const Tensor& t) { return neg(t); }, a, kExact);
    check_unary([](const Tensor& t) { return equal(t, 1.0); }, a, kExact);
    check_unary([](const Tensor& t) { return not_equal(t, t); }, a, kExact);
    // Saturation: sigmoid goes to 0 and exactly 1, tanh to +-1, exp to (nearly) 0. Results
    // below 1e-30 may differ (an f32 exp that flushes to zero, or one that keeps a subnormal).
    const Tensor extremes = from_vector<double>({-1000, -100, -30, 30, 100, 1000}, {6}).to(dtype);
    check_unary([](const Tensor& t) { return sigmoid(t); }, extremes, Tolerance{1e-6, 1e-30});
    check_unary([](const Tensor& t) { return tanh(t); }, extremes, Tolerance{1e-7, 0});
    check_unary([](const Tensor& t) { return exp(t); }, from_vector<double>({-100, -30, 30, 80}, {4}).to(dtype),
                Tolerance{1e-6, 1e-30});
    check_unary([](const Tensor& t) { return log(t); }, from_vector<double>({0, -1, kInf}, {3}).to(dtype), kExact);
    check_unary([](const Tensor& t) { return sqrt(t); }, from_vector<double>({-1, 0, kInf}, {3}).to(dtype), kExact);
  }
}

TEST_CASE("comparisons with tensors and scalars return bool tensors", "[elementwise][compare]") {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    INFO(dtype_name(dtype));
    const Tensor a = random_ints({40, 30}, 7, -3, 3, dtype);
    check_unary([](const Tensor& t) { return equal(t, 1.0); }, a, kExact);
    check_unary([](const Tensor& t) { return not_equal(t, 1.0); }, a, kExact);
    check_unary([](const Tensor& t) { return less(t, 0.0); }, a, kExact);
    check_unary([](const Tensor& t) { return less_equal(t, 0.0); }, a, kExact);
    check_unary([](const Tensor& t) { return greater(t, -1.0); }, a, kExact);
    check_unary([](const Tensor& t) { return greater_equal(t, 2.0); }, a, kExact);
    check_unary([](const Tensor& t) { return less(t, 0.5); }, a, kExact);  // the scalar takes the dtype
  }
  // Logical and / or spelled as mul / maximum on bool, with broadcasting.
  const Tensor m = random_ints({5, 1, 6}, 8, 0, 1, DType::boolean), n = random_ints({4, 1}, 9, 0, 1, DType::boolean);
  check_binary([](const Tensor& p, const Tensor& q) { return mul(p, q); }, m, n, kExact);
  check_binary([](const Tensor& p, const Tensor& q) { return maximum(p, q); }, m, n, kExact);
  check_binary([](const Tensor& p, const Tensor& q) { return equal(p, q); }, m, n, kExact);
}

TEST_CASE("where selects with broadcasting, every dtype", "[elementwise][where]") {
  const Tensor cond = random_ints({4, 1, 6}, 10, 0, 1, DType::boolean);
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64, DType::boolean}) {
    INFO(dtype_name(dtype));
    const Tensor a = operand({5, 1}, 11, dtype), b = operand({}, 12, dtype);
    check_op([](std::vector<Tensor>& v) { return std::vector<Tensor>{where(v[0], v[1], v[2])}; }, {cond, a, b},
             kExact);
    check_op([](std::vector<Tensor>& v) { return std::vector<Tensor>{where(v[0], v[2], v[1])}; },
             {random_ints({5, 6}, 13, 0, 1, DType::boolean), operand({5, 6}, 14, dtype), operand({6}, 15, dtype)},
             kExact);
  }
  // Large, with a condition computed on the device.
  const Tensor x = uniform({700, 900}, 16), y = uniform({900}, 17);
  check_binary([](const Tensor& p, const Tensor& q) { return where(greater(p, 0.0), p, q); }, x, y, kExact);
}

TEST_CASE("relu_grad passes gy where y > 0", "[elementwise][relu]") {
  check_binary([](const Tensor& g, const Tensor& y) { return relu_grad(g, y); },
               from_vector<double>({5, 6, 7, 8, 9}), from_vector<double>({-1, 0, 2, 1e-300, -0.0}), kExact);
  check_binary([](const Tensor& g, const Tensor& y) { return relu_grad(g, y); }, uniform({300, 400}, 11),
               uniform({400}, 12), kExact);
}

TEST_CASE("add_ accumulates in place, with broadcast and overlapping sources", "[elementwise][inplace]") {
  const auto in_place = [](std::vector<Tensor>& v) {
    add_(v[0], v[1]);
    return std::vector<Tensor>{};
  };
  check_op(in_place, {iota({2, 3}), from_vector<float>({10, 20, 30}, {3})}, kExact);
  check_op(in_place, {iota({2, 3}), scalar_tensor(0.5)}, kExact);
  check_op(in_place, {iota({2, 3}), from_vector<float>({-10, -20}, {2, 1})}, kExact);
  check_op(in_place, {uniform({500, 400}, 1), uniform({400}, 2)}, kExact);
  check_op(in_place, {random_ints({1000, 3}, 3, -5, 5, DType::i64), random_ints({3}, 4, -5, 5, DType::i64)}, kExact);
  // The source aliases the destination or overlaps it (seq[1:] += seq[:-1]).
  check_op([](std::vector<Tensor>& v) {
    add_(v[0], v[0]);
    return std::vector<Tensor>{};
  }, {iota({3, 3})}, kExact);
  check_op([](std::vector<Tensor>& v) {
    Tensor tail = v[0].slice_rows(1, 200000);
    add_(tail, v[0].slice_rows(0, 199999));
    return std::vector<Tensor>{};
  }, {ones({200000})}, kExact);
  check_op([](std::vector<Tensor>& v) {
    add_(v[0], v[0].slice_rows(0, 1));
    return std::vector<Tensor>{};
  }, {iota({3, 3})}, kExact);
  // Into a row view: the rows around it stay as they are.
  check_op([](std::vector<Tensor>& v) {
    Tensor rows = v[0].slice_rows(2, 5);
    add_(rows, v[1]);
    return std::vector<Tensor>{};
  }, {iota({8, 4}), uniform({4}, 5)}, kExact);
}

TEST_CASE("operand errors are the CPU's", "[elementwise][errors]") {
  const Tensor f = ones({2, 3}, DType::f32, gpu()), d = ones({2, 3}, DType::f64, gpu());
  CHECK_THROWS_WITH(add(f, d), Contains("add") && Contains("f32") && Contains("f64"));
  CHECK_THROWS_WITH(add(f, ones({4}, DType::f32, gpu())), Contains("[2, 3]") && Contains("[4]"));
  CHECK_THROWS_WITH(exp(ones({3}, DType::i32, gpu())), Contains("exp") && Contains("i32"));
  const Tensor b = ones({3}, DType::boolean, gpu());
  CHECK_THROWS_WITH(add(b, b), Contains("add") && Contains("bool"));
  CHECK_THROWS_AS(neg(b), Error);
  CHECK_THROWS_WITH(clip(f, 1, 0), Contains("clip"));
}
