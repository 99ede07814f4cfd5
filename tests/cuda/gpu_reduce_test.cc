// Reductions on cuda:0 against the CPU: sum, mean, max, min over every axis and combination,
// keepdims, every dtype; large reductions (millions of elements) in every layout of
// [outer, reduced, inner]; argmax/argmin and their ties; empty inputs; sum_to.
#include <catch2/catch.hpp>

#include <cmath>

#include "tests/cuda/gpu_test_util.h"

using namespace tandem;
using namespace gpu_test;
using Catch::Matchers::Contains;

namespace {

enum class Op { sum, mean, max, min };

const char* op_name(Op op) {
  switch (op) {
    case Op::sum: return "sum";
    case Op::mean: return "mean";
    case Op::max: return "max";
    case Op::min: return "min";
  }
  return "?";
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

// op(x, axes) with and without keepdims on both devices.
void check_reduce(Op op, const Tensor& x, const Axes& axes, Tolerance tol) {
  INFO(op_name(op) << " of " << x.description() << " over " << shape_str(axes));
  for (bool keepdims : {false, true}) {
    INFO("keepdims " << keepdims);
    check_unary([&](const Tensor& t) { return run(op, t, axes, keepdims); }, x, tol);
  }
}

// Every non-empty subset of the axes of an n-D tensor, and the empty list (all axes).
std::vector<Axes> all_axis_sets(std::size_t ndim) {
  std::vector<Axes> sets{{}};
  for (std::uint32_t mask = 1; mask < (1u << ndim); ++mask) {
    Axes axes;
    for (std::size_t d = 0; d < ndim; ++d)
      if (mask & (1u << d)) axes.push_back(static_cast<std::int64_t>(d));
    sets.push_back(axes);
  }
  return sets;
}

}  // namespace

TEST_CASE("sum, mean, max and min over every set of axes, every dtype", "[reduce]") {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    INFO(dtype_name(dtype));
    const Tensor x3 = is_floating(dtype) ? uniform({5, 6, 7}, 1, -5, 5, dtype) : random_ints({5, 6, 7}, 1, -50, 50, dtype);
    const Tensor x4 = is_floating(dtype) ? uniform({3, 4, 5, 6}, 2, -5, 5, dtype) : random_ints({3, 4, 5, 6}, 2, -50, 50, dtype);
    for (Op op : {Op::sum, Op::mean, Op::max, Op::min}) {
      if (op == Op::mean && !is_floating(dtype)) continue;
      // Sums of up to 360 terms of magnitude <= 5: a few ulp of the partial sums apart.
      const Tolerance tol = op == Op::max || op == Op::min ? kExact
                                                          : for_dtype(dtype, Tolerance{1e-5, 2e-4}, near(1e-12));
      for (const Axes& axes : all_axis_sets(3)) check_reduce(op, x3, axes, tol);
      for (const Axes& axes : all_axis_sets(4)) check_reduce(op, x4, axes, tol);
      check_reduce(op, x3, {-1}, tol);
      check_reduce(op, x4, {-3, -1}, tol);
    }
  }
}

TEST_CASE("scalars, extent-1 axes and views with an offset", "[reduce]") {
  check_reduce(Op::sum, scalar_tensor(2.5), {}, kExact);
  check_reduce(Op::max, scalar_tensor(-2.5, DType::f64), {}, kExact);
  check_reduce(Op::sum, uniform({3, 1, 4}, 3), {1}, kExact);
  check_reduce(Op::min, uniform({1, 1, 9}, 4), {0, 1}, kExact);
  const Tensor base = uniform({10, 33}, 5);
  check_unary([](const Tensor& t) { return sum(t.slice_rows(3, 8), {1}); }, base, near(1e-6));
  check_unary([](const Tensor& t) { return max(t.slice_rows(3, 8), {0}); }, base, kExact);
}

TEST_CASE("large reductions are exact where the data make every order exact", "[reduce][large]") {
  // Multiples of 1/4: every partial sum is exact in f32, so any accumulation order gives the
  // exact sum and GPU and CPU agree bit for bit; a dropped or doubled element cannot hide.
  struct Case {
    Shape shape;
    Axes axes;
  };
  const std::vector<Case> cases = {
      {{3 << 20}, {}},            // 3.1M elements into one
      {{1 << 21}, {0}},           // 2.1M, as an explicit axis
      {{2048, 1024}, {1}},        // long contiguous rows
      {{2048, 1024}, {0}},        // down the columns (inner = 1024)
      {{1 << 20, 3}, {0}},        // 1M rows of 3: a tiny inner extent
      {{3, 1 << 20}, {1}},        // few outputs, each 1M long
      {{16, 1 << 16, 4}, {1}},    // outer, reduced and inner all > 1
      {{64, 128, 256}, {0, 2}},   // non-adjacent axes of a 2M tensor
      {{128, 128, 128}, {}},      // everything, 2M
  };
  for (const Case& c : cases) {
    for (DType dtype : {DType::f32, DType::f64}) {
      const Tensor x = quarters(c.shape, 11, dtype);
      for (Op op : {Op::sum, Op::max, Op::min}) check_reduce(op, x, c.axes, kExact);
      // mean = sum * (1 / count): one rounding, the same on both.
      check_reduce(Op::mean, x, c.axes, for_dtype(dtype, 1e-7, 1e-16));
    }
  }
  // Integers are exact in any order, i64 beyond 2^32 included.
  check_reduce(Op::sum, iota({3 << 20}, DType::i64), {}, kExact);
  check_reduce(Op::sum, random_ints({1 << 20, 2}, 12, -1000, 1000, DType::i32), {0}, kExact);
  check_reduce(Op::max, random_ints({2, 1 << 20}, 13, -1000000, 1000000, DType::i64), {1}, kExact);
  check_reduce(Op::min, random_ints({4096, 512}, 14, -1000000, 1000000, DType::i32), {0}, kExact);
}

TEST_CASE("large sums of random floats stay close to the exact sum", "[reduce][large]") {
  // Uniform data: CPU and GPU accumulate in different orders, so the GPU is held to the f64 sum
  // of the same f32 values instead (the exact-data test above catches lost elements; this one
  // catches an accumulation that loses precision, e.g. one long sequential f32 sum).
  for (const Shape& shape : {Shape{1 << 20}, Shape{1024, 1024}}) {
    const Tensor x = uniform(shape, 21, 0, 1, DType::f32);
    const Tensor exact = x.to(DType::f64);
    for (const Axes& axes : {Axes{}, Axes{0}, Axes{static_cast<std::int64_t>(shape.size()) - 1}}) {
      INFO(x.description() << " over " << shape_str(axes));
      REQUIRE_GPU_MATCHES(sum(x.to(gpu()), axes).to(DType::f64), sum(exact, axes), Tolerance{1e-5, 0});
      REQUIRE_GPU_MATCHES(mean(x.to(gpu()), axes).to(DType::f64), mean(exact, axes), Tolerance{1e-5, 0});
    }
    const Tensor d = uniform(shape, 22, -1, 1, DType::f64);
    check_reduce(Op::sum, d, {}, Tolerance{1e-12, 1e-9});
    check_reduce(Op::sum, d, {0}, Tolerance{1e-12, 1e-9});
    check_reduce(Op::mean, d, {}, Tolerance{1e-12, 1e-14});
  }
}

TEST_CASE("argmax and argmin return the first extreme index", "[reduce][arg]") {
  const Tensor t = from_vector<float>({1, 3, 3, 2, 2, 1}, {2, 3});
  for (std::int64_t axis : {0, 1, -1}) {
    for (bool keepdims : {false, true}) {
      check_unary([=](const Tensor& x) { return argmax(x, axis, keepdims); }, t, kExact);
      check_unary([=](const Tensor& x) { return argmin(x, axis, keepdims); }, t, kExact);
    }
  }
  // All equal: index 0.
  check_unary([](const Tensor& x) { return argmax(x, 0); }, full({1000}, 5, DType::f64), kExact);
  check_unary([](const Tensor& x) { return argmin(x, 0); }, full({1000}, 5, DType::i32), kExact);
  // Many ties (values 0..3), every axis, every dtype.
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    const Tensor x = random_ints({7, 9, 11}, 31, 0, 3, dtype);
    for (std::int64_t axis = 0; axis < 3; ++axis) {
      INFO(dtype_name(dtype) << " axis " << axis);
      check_unary([=](const Tensor& v) { return argmax(v, axis); }, x, kExact);
      check_unary([=](const Tensor& v) { return argmin(v, axis); }, x, kExact);
    }
  }
}

TEST_CASE("argmax over long axes with ties: the first of many maxima", "[reduce][arg][large]") {
  // Values 0..9 over 2M elements: the maximum 9 occurs ~200k times; the first one must win,
  // however the GPU splits the axis.
  const Tensor x = random_ints({1 << 21}, 41, 0, 9, DType::f32);
  check_unary([](const Tensor& v) { return argmax(v, 0); }, x, kExact);
  check_unary([](const Tensor& v) { return argmin(v, 0); }, x, kExact);
  // A single extreme far into the axis, and one at the very end.
  Tensor spike = zeros({3 << 20}, DType::f64);
  index_put_(spike, {Index::at(2999999)}, scalar_tensor(1, DType::f64));
  index_put_(spike, {Index::at(3000000)}, scalar_tensor(1, DType::f64));
  index_put_(spike, {Index::at(-1)}, scalar_tensor(-1, DType::f64));
  check_unary([](const Tensor& v) { return argmax(v, 0); }, spike, kExact);
  check_unary([](const Tensor& v) { return argmin(v, 0); }, spike, kExact);
  // Along axis 0 of a wide matrix (inner > 1) and along rows of a tall one.
  const Tensor wide = random_ints({1000, 2000}, 42, 0, 5, DType::i64);
  check_unary([](const Tensor& v) { return argmax(v, 0); }, wide, kExact);
  check_unary([](const Tensor& v) { return argmin(v, 1); }, wide, kExact);
  const Tensor scores = uniform({4096, 10}, 43);  // what accuracy() does
  check_unary([](const Tensor& v) { return argmax(v, 1); }, scores, kExact);
}

TEST_CASE("empty inputs: sums are zero, extremes are errors", "[reduce][empty]") {
  check_reduce(Op::sum, zeros({0, 3}), {0}, kExact);
  check_reduce(Op::sum, zeros({0, 3}), {}, kExact);
  check_reduce(Op::sum, zeros({0, 3}), {1}, kExact);
  check_reduce(Op::sum, zeros({0}, DType::i64), {}, kExact);
  check_reduce(Op::max, zeros({0, 3}), {1}, kExact);  // nothing reduced: an empty result
  check_reduce(Op::mean, zeros({2, 0, 3}), {0, 2}, kExact);
  check_reduce(Op::sum, zeros({5, 0, 1 << 16}), {1}, kExact);  // many outputs, each of nothing
  CHECK_THAT(require_same_error([](std::vector<Tensor>& v) { return std::vector<Tensor>{max(v[0], {0})}; },
                                {zeros({0, 3})}),
             Contains("max") && Contains("f32[0, 3]"));
  require_same_error([](std::vector<Tensor>& v) { return std::vector<Tensor>{argmax(v[0], 0)}; }, {zeros({0, 3})});
  require_same_error([](std::vector<Tensor>& v) { return std::vector<Tensor>{mean(v[0])}; }, {zeros({0, 3})});
}

TEST_CASE("sum_to reduces broadcast axes back", "[reduce][sum_to]") {
  const Tensor x = uniform({2, 3, 4}, 30, -1, 1, DType::f64);
  for (const Shape& shape : {Shape{3, 1}, Shape{4}, Shape{}, Shape{1, 3, 4}, Shape{2, 1, 1}, Shape{2, 3, 4}})
    check_unary([&](const Tensor& t) { return sum_to(t, shape); }, x, near(1e-14));
  // A bias gradient: [N, C, H, W] down to [C, 1, 1].
  check_unary([](const Tensor& t) { return sum_to(t, {16, 1, 1}); }, quarters({32, 16, 28, 28}, 31), kExact);
}
