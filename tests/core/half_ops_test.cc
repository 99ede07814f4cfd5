// Operations on bf16 and f16 tensors (core/ops/half_compute.h): each one computes in f32 and
// rounds each floating result to the operands' dtype once. Checked two ways for every operation:
//   - bit for bit against the f32 operation on the same (widened) operands, rounded: the one
//     rounding the design promises (products that the backend runs in 16 bits itself, oneDNN's
//     bf16 matmul, sum in f32 in the library's own order, so for those only the next check);
//   - against the operation in f64 on the same operands, within the format's tolerance: half a
//     unit in the last place of the result (2^-p relative, p the format's significant bits) plus
//     the f32 computation's own error bound (terms x 2^-24 x the magnitude of the terms).
// Inputs are random and adversarial (large magnitudes, cancellation, subnormals, f16 overflow).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/ops.h"

using namespace tandem;

namespace {

struct Format {
  const char* name;
  DType dtype;
  int precision;  // significant bits
};
const Format kFormats[] = {{"bf16", DType::bf16, 8}, {"f16", DType::f16, 11}};

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

// Uniform in [low, high), rounded to the format (so that every precision sees the same operands).
Tensor operand(const Shape& shape, std::uint64_t seed, double low, double high, const Format& f) {
  Generator gen(seed);
  return rand_uniform(shape, gen, low, high, DType::f64).to(f.dtype);
}

std::vector<Tensor> as(const std::vector<Tensor>& xs, DType dtype) {
  std::vector<Tensor> out;
  for (const Tensor& x : xs) out.push_back(is_half(x.dtype()) ? x.to(dtype) : x);
  return out;
}

// y (from 16-bit operands) against the f32 and f64 computations. terms: how many f32 roundings
// can add up in one element (a sum's length); scale: the magnitude of the terms (0: the
// reference's own magnitude).
void check_op(const std::string& name, const Format& f, const Op& op, const std::vector<Tensor>& xs, double terms = 1,
              double scale = 0, DType result = DType::f32, bool f32_order = true) {
  INFO(name << " in " << f.name);
  const Tensor y = op(xs);
  const Tensor y32 = op(as(xs, DType::f32));
  const Tensor y64 = op(as(xs, DType::f64));
  const DType expected = result == DType::f32 ? f.dtype : result;
  REQUIRE(y.dtype() == expected);
  REQUIRE(y.shape() == y64.shape());
  const std::vector<double> got = y.to_vector<double>();
  const std::vector<double> one_rounding = y32.to(expected).to_vector<double>();
  const std::vector<double> exact = y64.to_vector<double>();
  const double u = std::ldexp(1.0, -f.precision);
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", f32 rounded once " << one_rounding[i] << ", f64 " << exact[i]);
    if (std::isnan(one_rounding[i])) {
      REQUIRE(std::isnan(got[i]));
      continue;
    }
    if (f32_order) REQUIRE(got[i] == one_rounding[i]);
    if (std::isinf(got[i])) continue;  // f16 overflow: checked against the f32 rounding above
    if (!is_half(expected)) continue;  // indices, masks: exact above
    const double magnitude = scale > 0 ? scale : std::fabs(exact[i]);
    REQUIRE(std::fabs(got[i] - exact[i]) <= u * std::fabs(exact[i]) + terms * std::ldexp(magnitude, -23) + 1e-300);
  }
}

// Whether this backend runs products of the format itself (tests/core/bf16_products_test.cc).
bool native_products(const Format& f) { return backend_for(Device::cpu(), "test").runs_16bit_products(f.dtype); }

}  // namespace

TEST_CASE("half ops: element-wise operations round the f32 result once") {
  for (const Format& f : kFormats) {
    const Tensor a = operand({7, 9}, 1, -4, 4, f), b = operand({7, 9}, 2, 0.5, 3, f), row = operand({9}, 3, -2, 2, f);
    check_op("add", f, [](auto& x) { return add(x[0], x[1]); }, {a, b});
    check_op("sub (broadcast)", f, [](auto& x) { return sub(x[0], x[1]); }, {a, row});
    check_op("mul", f, [](auto& x) { return mul(x[0], x[1]); }, {a, b});
    check_op("div", f, [](auto& x) { return div(x[0], x[1]); }, {a, b});
    check_op("mul by a scalar kept in f32", f, [](auto& x) { return mul(x[0], 0.1); }, {a});
    check_op("add a scalar", f, [](auto& x) { return add(x[0], 1.0 / 3); }, {a});
    check_op("exp", f, [](auto& x) { return exp(x[0]); }, {a});
    check_op("log", f, [](auto& x) { return log(x[0]); }, {b});
    check_op("tanh", f, [](auto& x) { return tanh(x[0]); }, {a});
    check_op("sigmoid", f, [](auto& x) { return sigmoid(x[0]); }, {a});
    // gelu(x) = x Phi(x): for negative x its f32 error is relative to |x|, not to the small result.
    check_op("gelu", f, [](auto& x) { return gelu(x[0]); }, {a}, 2, 4);
    check_op("relu", f, [](auto& x) { return relu(x[0]); }, {a});
    check_op("pow", f, [](auto& x) { return pow(x[0], 1.5); }, {b});
    check_op("maximum", f, [](auto& x) { return maximum(x[0], x[1]); }, {a, b});
    check_op("less (bool)", f, [](auto& x) { return less(x[0], x[1]); }, {a, b}, 1, 0, DType::boolean);
    check_op("where", f, [](auto& x) { return where(greater(x[0], 0.0), x[0], x[1]); }, {a, b});
    // add_ and div_into_ write a 16-bit tensor in place, rounding once.
    check_op("add_", f, [](auto& x) { Tensor t = x[0].clone(); add_(t, x[1]); return t; }, {a, b});
    check_op("div_into_", f, [](auto& x) { Tensor t(x[0].shape(), x[0].dtype()); div_into_(t, x[0], 3.0); return t; },
             {a});
  }
}

TEST_CASE("half ops: adversarial values: overflow, cancellation, subnormals") {
  // f16 overflows past 65504 where bf16 and f32 do not; the f32 sum rounds once to infinity.
  const Tensor big = from_vector<double>({60000, -60000, 30000}).to(DType::f16);
  CHECK(std::isinf(add(big, big).to_vector<double>()[0]));
  CHECK(add(big, big).to_vector<double>()[2] == 60000);
  // bf16 has f32's range: 1e30 * 1e7 is finite there.
  CHECK(mul(from_vector<double>({1e30}).to(DType::bf16), 1e7).to_vector<double>()[0] == Approx(1e37).epsilon(0.01));
  for (const Format& f : kFormats) {
    // Cancellation: 4096 + 1 - 4096 is 1 in f32 (though 4097 is not a 16-bit number).
    const Tensor c = from_vector<double>({4096, 1, -4096}).to(f.dtype);
    CHECK(sum(c).to_vector<double>()[0] == 1);
    check_op("sum with cancellation", f, [](auto& x) { return sum(x[0]); }, {c}, 3, 4096);
    // Subnormal operands and results.
    const double tiny = f.dtype == DType::f16 ? std::ldexp(1.0, -20) : std::ldexp(1.0, -130);
    const Tensor s = from_vector<double>({tiny, 3 * tiny, -tiny, std::ldexp(tiny, 3)}).to(f.dtype);
    check_op("mul of subnormals by 0.75", f, [](auto& x) { return mul(x[0], 0.75); }, {s});
    check_op("add of subnormals", f, [](auto& x) { return add(x[0], x[0]); }, {s});
    // Large magnitudes near the top of the format.
    const double top = f.dtype == DType::f16 ? 30000 : 1e37;
    check_op("sub near the top", f, [](auto& x) { return sub(x[0], x[1]); },
             {operand({16}, 5, top / 2, top, f), operand({16}, 6, -top, top, f)});
  }
}

TEST_CASE("half ops: reductions accumulate in f32") {
  for (const Format& f : kFormats) {
    const Tensor x = operand({6, 50, 4}, 11, -1, 1, f);
    check_op("sum all", f, [](auto& v) { return sum(v[0]); }, {x}, 1200, 1);
    check_op("sum axis 1", f, [](auto& v) { return sum(v[0], {1}); }, {x}, 50, 1);
    check_op("sum axes {0, 2}", f, [](auto& v) { return sum(v[0], {0, 2}, true); }, {x}, 24, 1);
    check_op("mean axis 1", f, [](auto& v) { return mean(v[0], {1}); }, {x}, 50, 1);
    check_op("max axis 2", f, [](auto& v) { return max(v[0], {2}); }, {x});
    check_op("argmax", f, [](auto& v) { return argmax(v[0], 1); }, {x}, 1, 0, DType::i64);
    // 4096 ones: a 16-bit accumulator would stop at 256 (bf16) or 2048 (f16).
    CHECK(sum(ones({4096}, f.dtype)).to_vector<double>()[0] == 4096);
  }
}

TEST_CASE("half ops: products, softmax, cross entropy") {
  for (const Format& f : kFormats) {
    const Tensor a = operand({5, 64}, 21, -1, 1, f), b = operand({64, 7}, 22, -1, 1, f);
    const bool order = !native_products(f);  // the widened product sums in the f32 product's order
    check_op(
        "matmul", f, [](auto& x) { return matmul(x[0], x[1]); }, {a, b}, 64, 1, DType::f32, order);
    check_op(
        "matmul transposed", f, [](auto& x) { return matmul(x[0], x[1], false, true); },
        {a, operand({7, 64}, 23, -1, 1, f)}, 64, 1, DType::f32, order);
    check_op(
        "batched matmul", f, [](auto& x) { return matmul(x[0], x[1]); },
        {operand({3, 4, 16}, 24, -1, 1, f), operand({3, 16, 5}, 25, -1, 1, f)}, 16, 1, DType::f32, order);
    check_op(
        "matmul_accumulate_", f,
        [](auto& x) {
          Tensor out = x[2].clone();
          matmul_accumulate_(out, x[0], x[1]);
          return out;
        },
        {a, b, operand({5, 7}, 26, -1, 1, f)}, 65, 1, DType::f32, order);
    const Tensor scores = operand({4, 3, 10}, 27, -6, 6, f);
    check_op("softmax", f, [](auto& x) { return softmax_last_axis(x[0], 0.5, false); }, {scores}, 10, 1);
    check_op("causal softmax", f, [](auto& x) { return softmax_last_axis(x[0], 1.0, true); },
             {operand({2, 10, 10}, 28, -6, 6, f)}, 10, 1);
    const Tensor y = softmax_last_axis(scores, 1.0, false), gy = operand({4, 3, 10}, 29, -1, 1, f);
    check_op("softmax backward", f, [](auto& x) { return softmax_last_axis_backward(x[0], x[1], 1.0); }, {y, gy}, 10, 1);
    // The losses stay f32 for 16-bit scores: the f32 computation exactly.
    const Tensor logits = operand({6, 11}, 30, -5, 5, f);
    const Tensor labels = from_vector<std::int64_t>({0, 10, 3, -1, 7, 7});
    const CrossEntropyRows rows = softmax_cross_entropy_rows(logits, labels, -1);
    const CrossEntropyRows rows32 = softmax_cross_entropy_rows(logits.to(DType::f32), labels, -1);
    CHECK(rows.losses.dtype() == DType::f32);
    CHECK(rows.losses.to_vector<double>() == rows32.losses.to_vector<double>());
    CHECK(rows.counted == 5);
    check_op("softmax cross entropy backward", f,
             [&](auto& x) {
               const CrossEntropyRows r = softmax_cross_entropy_rows(x[0], labels, -1);
               return softmax_cross_entropy_rows_backward(x[0], r.stats, labels, full({}, 0.2, r.stats.dtype()), -1);
             },
             {logits}, 11, 1);
  }
}

TEST_CASE("half ops: convolution, pooling, normalisation, rows of a table") {
  for (const Format& f : kFormats) {
    const Tensor x = operand({2, 3, 7, 6}, 41, -1, 1, f), W = operand({4, 3, 3, 3}, 42, -1, 1, f);
    const Tensor bias = operand({4}, 43, -1, 1, f);
    const Conv2DParams p = Conv2DParams::make(1, 1);
    check_op("conv2d", f, [&](auto& v) { return conv2d(v[0], v[1], v[2], p); }, {x, W, bias}, 28, 1);
    const Tensor gy = operand({2, 4, 7, 6}, 44, -1, 1, f);
    check_op("conv2d_grad_input", f, [&](auto& v) { return conv2d_grad_input(v[0], v[1], x.shape(), p); }, {gy, W},
             36, 1);
    check_op("conv2d_grad_weight", f, [&](auto& v) { return conv2d_grad_weight(v[0], v[1], W.shape(), p); }, {x, gy},
             84, 1);
    Pool2DParams pool;
    pool.kernel_h = pool.kernel_w = pool.stride_y = pool.stride_x = 2;
    check_op("max_pool2d", f, [&](auto& v) { return max_pool2d(v[0], pool, false).first; }, {x});
    check_op("avg_pool2d", f, [&](auto& v) { return avg_pool2d(v[0], pool); }, {x}, 4, 1);
    const Tensor rows = operand({5, 16}, 45, -3, 3, f), gamma = operand({16}, 46, 0.5, 1.5, f);
    const Tensor beta = operand({16}, 47, -1, 1, f);
    check_op("layer_norm_forward", f, [](auto& v) { return layer_norm_forward(v[0], v[1], v[2], 1e-5).y; },
             {rows, gamma, beta}, 48, 4);
    // The statistics stay f32 for backward.
    CHECK(layer_norm_forward(rows, gamma, beta, 1e-5).rstd.dtype() == DType::f32);
    check_op("layer_norm_backward gx", f,
             [](auto& v) {
               const LayerNormResult r = layer_norm_forward(v[1], v[2], v[3], 1e-5);
               return layer_norm_backward(v[0], v[1], v[2], r.mean, r.rstd).gx;
             },
             {operand({5, 16}, 48, -1, 1, f), rows, gamma, beta}, 96, 8);
    const auto [mean, var] = batch_norm_statistics(x);
    CHECK(mean.dtype() == DType::f32);
    check_op("batch_norm_affine", f,
             [](auto& v) {
               const auto [m, s] = batch_norm_statistics(v[0]);
               return batch_norm_affine(v[0], v[1], v[2], m, s, 1e-5).y;
             },
             {x, operand({3}, 49, 0.5, 1.5, f), operand({3}, 50, -1, 1, f)}, 168, 4);
    const Tensor table = operand({6, 5}, 51, -2, 2, f);
    const Tensor ids = from_vector<std::int64_t>({3, 0, 3, 5});
    check_op("take_rows", f, [&](auto& v) { return take_rows(v[0], ids); }, {table});
    check_op("index_add_rows_", f,
             [&](auto& v) {
               Tensor t = v[0].clone();
               index_add_rows_(t, ids, v[1]);
               return t;
             },
             {table, operand({4, 5}, 52, -1, 1, f)}, 3, 4);
  }
}

TEST_CASE("half ops: what is not computed in 16 bits yet says so") {
  Tensor p = ones({3}, DType::bf16);
  CHECK_THROWS_WITH(sgd_update_(p, ones({3}, DType::bf16), 0.1), Catch::Contains("sgd_update_: has no bf16 kernel yet"));
}
