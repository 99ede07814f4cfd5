// Reductions (core/ops/reduce.h) against a naive reference over multi-indices.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops.h"
#include "tests/core/test_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using test_util::uniform;
using test_util::values;

namespace {

enum class Op { sum, mean, max, min };

struct Reference {
  Shape shape;  // with keepdims
  std::vector<double> values;
};

// Reduces x (as doubles) over `axes` (non-negative, any order; empty = all) by a naive loop.
Reference reference(const Tensor& x, const std::vector<int>& axes, Op op) {
  const Shape& in = x.shape();
  std::vector<bool> reduced(in.size(), axes.empty());
  for (int a : axes) reduced[a] = true;
  Shape kept;
  for (std::size_t d = 0; d < in.size(); ++d) kept.push_back(reduced[d] ? 1 : in[d]);
  const std::int64_t n_out = shape_numel(kept);
  const double init = op == Op::max   ? -std::numeric_limits<double>::infinity()
                      : op == Op::min ? std::numeric_limits<double>::infinity()
                                      : 0.0;
  std::vector<double> out(n_out, init);
  std::vector<std::int64_t> count(n_out, 0);
  const std::vector<double> v = values(x);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    auto idx = test_util::unravel(i, in);
    for (std::size_t d = 0; d < in.size(); ++d)
      if (reduced[d]) idx[d] = 0;
    const std::int64_t o = test_util::broadcast_flat(idx, kept);
    if (op == Op::max) out[o] = std::max(out[o], v[i]);
    else if (op == Op::min) out[o] = std::min(out[o], v[i]);
    else out[o] += v[i];
    ++count[o];
  }
  if (op == Op::mean)
    for (std::int64_t o = 0; o < n_out; ++o) out[o] /= static_cast<double>(count[o]);
  return {kept, out};
}

Tensor run(Op op, const Tensor& x, const Axes& axes, bool keepdims) {
  switch (op) {
    case Op::sum: return sum(x, axes, keepdims);
    case Op::mean: return mean(x, axes, keepdims);
    case Op::max: return max(x, axes, keepdims);
    case Op::min: return min(x, axes, keepdims);
  }
  return Tensor();
}

const char* op_name(Op op) {
  switch (op) {
    case Op::sum: return "sum";
    case Op::mean: return "mean";
    case Op::max: return "max";
    case Op::min: return "min";
  }
  return "?";
}

// Checks op(x, axes) with and without keepdims. `canonical` lists the axes non-negatively.
void check_reduce(Op op, const Tensor& x, const Axes& axes, const std::vector<int>& canonical, double tol) {
  const Reference ref = reference(x, canonical, op);
  Shape squeezed;
  for (std::size_t d = 0; d < x.dim(); ++d)
    if (!(canonical.empty() || std::count(canonical.begin(), canonical.end(), static_cast<int>(d))))
      squeezed.push_back(x.shape()[d]);
  INFO(op_name(op) << " of " << x.description() << " over " << shape_str(axes));
  const Tensor kept = run(op, x, axes, true);
  CHECK(kept.shape() == ref.shape);
  CHECK(kept.dtype() == x.dtype());
  REQUIRE_VALUES(kept, ref.values, tol, tol);
  const Tensor dropped = run(op, x, axes, false);
  CHECK(dropped.shape() == squeezed);
  REQUIRE_VALUES(dropped, ref.values, tol, tol);
}

}  // namespace

TEST_CASE("sum, mean, max and min over each axis", "[reduce]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor x = uniform({2, 3, 4}, 7, -5, 5, dtype);
    for (Op op : {Op::sum, Op::mean, Op::max, Op::min}) {
      for (int axis = 0; axis < 3; ++axis) check_reduce(op, x, {axis}, {axis}, 1e-6);
    }
  }
  // Hand-computed values on a small matrix.
  const Tensor m = from_vector<float>({1, -2, 3, 4, 5, -6}, {2, 3});
  REQUIRE_VALUES(sum(m, {0}), {5, 3, -3});
  REQUIRE_VALUES(sum(m, {1}), {2, 3});
  REQUIRE_VALUES(mean(m, {1}), {2.0 / 3, 1}, 1e-6);
  REQUIRE_VALUES(max(m, {0}), {4, 5, 3});
  REQUIRE_VALUES(min(m, {1}), {-2, -6});
  CHECK(sum(m).item() == 5);
  CHECK(max(m).item() == 5);
  CHECK(min(m).item() == -6);
}

TEST_CASE("reductions over several axes, contiguous or not", "[reduce]") {
  const Tensor x = uniform({2, 3, 4}, 8, -5, 5, DType::f64);
  for (Op op : {Op::sum, Op::mean, Op::max, Op::min}) {
    check_reduce(op, x, {0, 1}, {0, 1}, 1e-12);
    check_reduce(op, x, {1, 2}, {1, 2}, 1e-12);
    check_reduce(op, x, {0, 2}, {0, 2}, 1e-12);
    check_reduce(op, x, {2, 0}, {0, 2}, 1e-12);
    check_reduce(op, x, {0, 1, 2}, {0, 1, 2}, 1e-12);
    check_reduce(op, x, {}, {}, 1e-12);
  }
  const Tensor y = uniform({3, 2, 4, 5}, 9, -5, 5, DType::f32);
  for (Op op : {Op::sum, Op::max}) {
    check_reduce(op, y, {0, 2}, {0, 2}, 1e-5);
    check_reduce(op, y, {1, 3}, {1, 3}, 1e-5);
    check_reduce(op, y, {0, 3}, {0, 3}, 1e-5);
    check_reduce(op, y, {0, 1, 3}, {0, 1, 3}, 1e-5);
    check_reduce(op, y, {0, 2, 3}, {0, 2, 3}, 1e-5);  // a convolution's bias gradient
  }
  // Integers reduce exactly.
  const Tensor i = test_util::iota({2, 3, 4}, DType::i32);
  CHECK(sum(i, {0, 2}).dtype() == DType::i32);
  REQUIRE_VALUES(sum(i, {0, 2}), {6 + 54, 22 + 70, 38 + 86});
  REQUIRE_VALUES(max(i, {1}), {8, 9, 10, 11, 20, 21, 22, 23});
  REQUIRE_VALUES(min(i, {0, 2}), {0, 4, 8});
  CHECK(sum(test_util::iota({1000}, DType::i64)).item() == 499500);
}

TEST_CASE("negative axes, all axes and keepdims", "[reduce]") {
  const Tensor x = uniform({2, 3, 4}, 10, -1, 1, DType::f64);
  check_reduce(Op::sum, x, {-1}, {2}, 1e-12);
  check_reduce(Op::max, x, {-3, -1}, {0, 2}, 1e-12);
  check_reduce(Op::mean, x, {-2}, {1}, 1e-12);
  check_reduce(Op::min, x, {0, -1}, {0, 2}, 1e-12);
  CHECK(sum(x).shape().empty());
  CHECK(sum(x, {}, true).shape() == Shape{1, 1, 1});
  CHECK(mean(x, {0, 1, 2}, true).shape() == Shape{1, 1, 1});
  CHECK(sum(x).item() == Approx(sum(sum(x, {2}), {0, 1}).item()).epsilon(1e-12));
  // Scalars and extent-1 axes.
  CHECK(sum(scalar_tensor(2.5)).item() == 2.5);
  CHECK(max(scalar_tensor(-2.5)).shape().empty());
  REQUIRE_VALUES(sum(from_vector<float>({1, 2, 3}, {3, 1}), {1}), {1, 2, 3});
  CHECK_THROWS_WITH(sum(x, {3}), Contains("sum") && Contains("axis 3"));
  CHECK_THROWS_AS(max(x, {-4}), Error);
}

TEST_CASE("argmax and argmin return the first extreme index", "[reduce][arg]") {
  const Tensor t = from_vector<float>({1, 3, 3, 2, 2, 1}, {2, 3});
  const Tensor amax = argmax(t, 1);
  CHECK(amax.dtype() == DType::i64);
  CHECK(amax.shape() == Shape{2});
  CHECK(amax.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0});
  CHECK(argmin(t, 1).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 2});
  CHECK(argmax(t, -1).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0});
  const Tensor u = from_vector<std::int32_t>({1, 3, 3, 2, 3, 1}, {2, 3});
  CHECK(argmax(u, 0).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0, 0});
  CHECK(argmin(u, 0).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 0, 1});
  CHECK(argmax(u, 0, true).shape() == Shape{1, 3});
  CHECK(argmin(t, 1, true).shape() == Shape{2, 1});
  CHECK(argmax(from_vector<double>({5, 5, 5, 5}), 0).item() == 0);
  CHECK(argmin(from_vector<double>({5, 5, 5, 5}), 0).item() == 0);
  CHECK(argmax(from_vector<double>({5, 5, 5, 5}), 0).shape().empty());

  // A naive loop over a 3-D tensor, for each axis.
  const Tensor x = uniform({3, 4, 5}, 21, -1, 1, DType::f32);
  const std::vector<double> v = values(x);
  for (int axis = 0; axis < 3; ++axis) {
    INFO("axis " << axis);
    const std::vector<std::int64_t> got_max = argmax(x, axis).to_vector<std::int64_t>();
    const std::vector<std::int64_t> got_min = argmin(x, axis).to_vector<std::int64_t>();
    const Shape shape{3, 4, 5};
    Shape out_shape = shape;
    out_shape.erase(out_shape.begin() + axis);
    for (std::int64_t o = 0; o < shape_numel(out_shape); ++o) {
      auto idx = test_util::unravel(o, out_shape);
      idx.insert(idx.begin() + axis, 0);
      std::int64_t best_max = 0, best_min = 0;
      for (std::int64_t r = 0; r < shape[axis]; ++r) {
        idx[axis] = r;
        const double value = v[test_util::broadcast_flat(idx, shape)];
        idx[axis] = best_max;
        if (value > v[test_util::broadcast_flat(idx, shape)]) best_max = r;
        idx[axis] = best_min;
        if (value < v[test_util::broadcast_flat(idx, shape)]) best_min = r;
      }
      REQUIRE(got_max[o] == best_max);
      REQUIRE(got_min[o] == best_min);
    }
  }
  CHECK_THROWS_AS(argmax(zeros({0, 3}), 0), Error);
  CHECK_THROWS_AS(argmax(t, 2), Error);
}

TEST_CASE("empty inputs: sums are zero, extremes throw", "[reduce][empty]") {
  const Tensor z = zeros({0, 3});
  REQUIRE_VALUES(sum(z, {0}), {0, 0, 0});
  CHECK(sum(z, {0}).shape() == Shape{3});
  CHECK(sum(z).item() == 0);
  CHECK(sum(z, {0}, true).shape() == Shape{1, 3});
  CHECK(sum(zeros({0}, DType::i64)).item() == 0);
  CHECK(sum(z, {1}).shape() == Shape{0});
  CHECK(max(z, {1}).shape() == Shape{0});  // nothing reduced is empty
  CHECK_THROWS_WITH(max(z, {0}), Contains("max") && Contains("f32[0, 3]"));
  CHECK_THROWS_AS(max(z), Error);
  CHECK_THROWS_AS(min(z, {0}), Error);
  CHECK_THROWS_AS(min(zeros({4, 0}), {1}), Error);
  // mean: an empty result is fine (numpy gives an empty array); averaging nothing is an error.
  CHECK(mean(z, {1}).shape() == Shape{0});
  CHECK(mean(zeros({2, 0}), {0}).shape() == Shape{0});
  CHECK(mean(zeros({2, 0, 3}), {0, 2}, true).shape() == Shape{1, 0, 1});
  CHECK_THROWS_WITH(mean(z, {0}), Contains("mean") && Contains("f32[0, 3]"));
  CHECK_THROWS_AS(mean(z), Error);
}

TEST_CASE("repeated axes and bad dtypes throw", "[reduce][errors]") {
  const Tensor x = ones({2, 3, 4});
  CHECK_THROWS_WITH(sum(x, {1, 1}), Contains("sum") && Contains("repeated"));
  CHECK_THROWS_AS(sum(x, {1, -2}), Error);
  CHECK_THROWS_AS(max(x, {0, 2, 0}), Error);
  CHECK_THROWS_AS(mean(x, {2, -1}), Error);
  CHECK_THROWS_WITH(mean(ones({3}, DType::i32)), Contains("mean") && Contains("i32"));
  CHECK_THROWS_AS(sum(ones({3}, DType::boolean)), Error);
}

TEST_CASE("large reductions match a double-precision loop", "[reduce][parallel]") {
  const Tensor x = uniform({1000, 300}, 99, -1, 1, DType::f32);
  // f32 accumulation: sums of 1000 (axis 0) or 300 (axis 1) terms of magnitude <= 1.
  check_reduce(Op::sum, x, {0}, {0}, 2e-4);
  check_reduce(Op::sum, x, {1}, {1}, 1e-4);
  for (Op op : {Op::mean, Op::max, Op::min}) {
    check_reduce(op, x, {0}, {0}, 1e-6);
    check_reduce(op, x, {1}, {1}, 1e-6);
  }
  for (Op op : {Op::sum, Op::mean}) {
    const Reference ref = reference(x, {}, op);
    const double got = run(op, x, {}, false).item();
    const double scale = op == Op::sum ? 300000.0 : 1.0;
    CHECK(std::abs(got - ref.values[0]) < 1e-6 * scale);
  }
  CHECK(max(x).item() == reference(x, {}, Op::max).values[0]);
  CHECK(min(x).item() == reference(x, {}, Op::min).values[0]);
  const Tensor d = uniform({1000, 300}, 98, -1, 1, DType::f64);
  check_reduce(Op::sum, d, {0}, {0}, 1e-12);
  check_reduce(Op::sum, d, {1}, {1}, 1e-12);
  CHECK(sum(d).item() == Approx(reference(d, {}, Op::sum).values[0]).margin(1e-9));
  // Non-contiguous axes on a large tensor (moved to the end before reducing).
  const Tensor y = uniform({60, 50, 40}, 97, -1, 1, DType::f64);
  check_reduce(Op::sum, y, {0, 2}, {0, 2}, 1e-10);
  check_reduce(Op::max, y, {0, 2}, {0, 2}, 0);
}

TEST_CASE("sum_to reduces broadcast axes back", "[reduce][sum_to]") {
  const Tensor x = uniform({2, 3, 4}, 30, -1, 1, DType::f64);
  const Tensor a = sum_to(x, {3, 1});
  CHECK(a.shape() == Shape{3, 1});
  REQUIRE_VALUES(a, reference(x, {0, 2}, Op::sum).values, 1e-12, 1e-12);
  const Tensor b = sum_to(x, {4});
  CHECK(b.shape() == Shape{4});
  REQUIRE_VALUES(b, reference(x, {0, 1}, Op::sum).values, 1e-12, 1e-12);
  const Tensor c = sum_to(x, {});
  CHECK(c.shape().empty());
  REQUIRE_VALUES(c, reference(x, {}, Op::sum).values, 1e-12, 1e-12);
  const Tensor d = sum_to(x, {1, 3, 4});
  CHECK(d.shape() == Shape{1, 3, 4});
  REQUIRE_VALUES(d, reference(x, {0}, Op::sum).values, 1e-12, 1e-12);
  const Tensor e = sum_to(x, {2, 1, 1});
  REQUIRE_VALUES(e, reference(x, {1, 2}, Op::sum).values, 1e-12, 1e-12);
  REQUIRE_VALUES(sum_to(x, {2, 3, 4}), values(x));
  // Extent-1 axes that were never broadcast need no summing.
  const Tensor ones_axis = uniform({2, 1, 4}, 31);
  REQUIRE_VALUES(sum_to(ones_axis, {1, 4}), reference(ones_axis, {0}, Op::sum).values, 1e-6, 1e-6);
  // Round trip: sum_to(broadcast_to(v, s), shape(v)) == v * (numel(s) / numel(v)).
  const Tensor v = from_vector<float>({1, 2, 3}, {3, 1});
  REQUIRE_VALUES(sum_to(broadcast_to(v, {5, 3, 2}), {3, 1}), {10, 20, 30});
  CHECK_THROWS_WITH(sum_to(x, {5}), Contains("sum_to"));
  CHECK_THROWS_AS(sum_to(x, {3, 3}), Error);
  CHECK_THROWS_AS(sum_to(x, {2, 1}), Error);
  CHECK_THROWS_AS(sum_to(x, {1, 2, 3, 4}), Error);
}

TEST_CASE("max and min treat NaN alike on every path: it wins only as the first element", "[reduce][nan]") {
  // The scan of argmax: a NaN first is kept (nothing compares greater), a NaN later never wins.
  // Rows of 67 put the NaN inside a packet and in the tail; the strided path ([67, 3] over
  // axis 0) must agree with the contiguous one ([3, 67] over axis 1).
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::f32, DType::f64}) {
    for (int where : {0, 1, 5, 17, 33, 64, 66}) {
      std::vector<double> row(67);
      for (int i = 0; i < 67; ++i) row[i] = std::sin(i * 1.3) * 10;
      row[where] = nan;
      std::vector<double> rows;
      for (int r = 0; r < 3; ++r) rows.insert(rows.end(), row.begin(), row.end());
      const Tensor contiguous = from_vector(rows, {3, 67}).to(dtype);
      const Tensor strided = transpose(contiguous).clone();  // [67, 3]
      double expected_max = -1e300, expected_min = 1e300;
      for (int i = 0; i < 67; ++i)
        if (i != where) expected_max = std::max(expected_max, row[i]), expected_min = std::min(expected_min, row[i]);
      const double rounded_max = dtype == DType::f32 ? double(float(expected_max)) : expected_max;
      const double rounded_min = dtype == DType::f32 ? double(float(expected_min)) : expected_min;
      for (const auto& [mx, mn] : {std::make_pair(max(contiguous, {1}), min(contiguous, {1})),
                                   std::make_pair(max(strided, {0}), min(strided, {0}))}) {
        INFO(dtype_name(dtype) << " NaN at " << where);
        for (double v : mx.to_vector<double>()) {
          if (where == 0) REQUIRE(std::isnan(v));
          else REQUIRE(v == rounded_max);
        }
        for (double v : mn.to_vector<double>()) {
          if (where == 0) REQUIRE(std::isnan(v));
          else REQUIRE(v == rounded_min);
        }
      }
      REQUIRE(argmax(contiguous, 1).to_vector<std::int64_t>()[0] == (where == 0 ? 0 : argmax(strided, 0).to_vector<std::int64_t>()[0]));
    }
  }
}
