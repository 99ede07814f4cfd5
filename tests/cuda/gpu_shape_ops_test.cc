// Axis manipulation on cuda:0 against the CPU: everything built on the strided copy kernel
// (permute, broadcast_to, concat, stack, split, index with negative steps, index_put_ with
// overlapping sources, slice), for every dtype and for large, many-axis tensors. All copies:
// exact.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <climits>

#include "tests/cuda/gpu_test_util.h"

using namespace tandem;
using namespace gpu_test;
using Catch::Matchers::Contains;

namespace {

const std::vector<DType> kAllDtypes = {DType::f32, DType::f64, DType::i32, DType::i64, DType::boolean};

Tensor sample(const Shape& shape, std::uint64_t seed, DType dtype) {
  if (is_floating(dtype)) return uniform(shape, seed, -1, 1, dtype);
  if (dtype == DType::boolean) return random_ints(shape, seed, 0, 1, DType::boolean);
  return random_ints(shape, seed, -1000, 1000, dtype);
}

constexpr std::int64_t kNone = INT64_MIN;
Index make_slice(std::int64_t start, std::int64_t stop, std::int64_t step) {
  Index r;
  r.step = step;
  if (start != kNone) r.start = start, r.has_start = true;
  if (stop != kNone) r.stop = stop, r.has_stop = true;
  return r;
}

}  // namespace

TEST_CASE("permute, transpose and swapaxes, every permutation and dtype", "[shape][permute]") {
  for (DType dtype : kAllDtypes) {
    INFO(dtype_name(dtype));
    const Tensor x = sample({2, 3, 4, 5}, 1, dtype);
    std::vector<std::int64_t> p = {0, 1, 2, 3};
    do {
      INFO("permutation " << shape_str(p));
      check_unary([&](const Tensor& t) { return permute(t, p); }, x, kExact);
    } while (std::next_permutation(p.begin(), p.end()));
    check_unary([](const Tensor& t) { return transpose(t); }, x, kExact);
    check_unary([](const Tensor& t) { return swapaxes(t, 1, -1); }, x, kExact);
  }
  // Large and with many axes (the indexer's widest case), and a large 2-D transpose.
  check_unary([](const Tensor& t) { return permute(t, {5, 3, 1, 0, 2, 4, 6, 7}); }, sample({2, 3, 4, 5, 6, 7, 2, 3}, 2, DType::f32),
              kExact);
  check_unary([](const Tensor& t) { return transpose(t); }, sample({1531, 1777}, 3, DType::f64), kExact);
  check_unary([](const Tensor& t) { return permute(t, {0, 2, 1}); }, sample({64, 1000, 33}, 4, DType::i64), kExact);
}

TEST_CASE("broadcast_to, squeeze and expand_dims", "[shape][broadcast]") {
  for (DType dtype : kAllDtypes) {
    check_unary([](const Tensor& t) { return broadcast_to(t, {4, 3, 5}); }, sample({3, 1}, 5, dtype), kExact);
    check_unary([](const Tensor& t) { return broadcast_to(t, {2, 3}); }, sample({}, 6, dtype), kExact);
  }
  check_unary([](const Tensor& t) { return broadcast_to(t, {300, 1, 2000}); }, sample({2000}, 7, DType::f32), kExact);
  check_unary([](const Tensor& t) { return broadcast_to(t, {1000, 7, 300}); }, sample({7, 1}, 8, DType::f64), kExact);
  const Tensor x = sample({2, 1, 3}, 9, DType::f32);
  check_unary([](const Tensor& t) { return squeeze(t, 1); }, x, kExact);
  check_unary([](const Tensor& t) { return expand_dims(t, -1); }, x, kExact);
  const Tensor dev = x.to(gpu());
  REQUIRE(squeeze(dev, 1).shares_storage_with(dev));  // views on the GPU too
  REQUIRE(expand_dims(dev, 0).shares_storage_with(dev));
}

TEST_CASE("concat, stack and split along every axis", "[shape][concat]") {
  for (DType dtype : kAllDtypes) {
    INFO(dtype_name(dtype));
    const Tensor a = sample({2, 3, 4}, 10, dtype), b = sample({2, 5, 4}, 11, dtype), c = sample({2, 1, 4}, 12, dtype);
    check_op([](std::vector<Tensor>& v) { return std::vector<Tensor>{concat(v, 1)}; }, {a, b, c}, kExact);
    check_op([](std::vector<Tensor>& v) { return std::vector<Tensor>{concat({v[0], v[0]}, 0), concat({v[0], v[0]}, -1)}; },
             {a}, kExact);
    check_op([](std::vector<Tensor>& v) { return std::vector<Tensor>{stack(v, 0), stack(v, 2), stack(v, -1)}; },
             {a, sample({2, 3, 4}, 13, dtype)}, kExact);
    check_op([](std::vector<Tensor>& v) { return split(v[0], 4, -1); }, {a}, kExact);
    check_op([](std::vector<Tensor>& v) { return split(v[0], std::vector<std::int64_t>{1, 3, 3, 7}, 1); },
             {sample({2, 8, 3}, 14, dtype)}, kExact);
  }
  // Pieces with offsets, empty pieces, and large joins.
  check_op([](std::vector<Tensor>& v) {
    return std::vector<Tensor>{concat({v[0].slice_rows(2, 5), zeros({0, 7}, DType::f32, v[0].device()), v[0].slice_rows(0, 1)}, 0)};
  }, {sample({6, 7}, 15, DType::f32)}, kExact);
  check_op([](std::vector<Tensor>& v) { return std::vector<Tensor>{concat(v, 1)}; },
           {sample({512, 1000}, 16, DType::f32), sample({512, 24}, 17, DType::f32), sample({512, 3001}, 18, DType::f32)},
           kExact);
  check_op([](std::vector<Tensor>& v) { return split(v[0], 8, 0); }, {sample({4096, 300}, 19, DType::f64)}, kExact);
  // Many inputs: one launch per 64 of them (cuda/concat.cu), empty ones and row views among them.
  for (DType dtype : kAllDtypes) {
    INFO(dtype_name(dtype) << ", 150 pieces");
    std::vector<Tensor> pieces;
    for (int i = 0; i < 150; ++i) pieces.push_back(sample({(i * 7) % 5, 3}, 100 + i, dtype));
    pieces.push_back(sample({9, 3}, 99, dtype).slice_rows(4, 7));
    check_op([](std::vector<Tensor>& v) { return std::vector<Tensor>{concat(v, 0)}; }, pieces, kExact);
    std::vector<Tensor> columns;
    for (int i = 0; i < 130; ++i) columns.push_back(sample({4, i % 3, 2}, 300 + i, dtype));
    check_op([](std::vector<Tensor>& v) { return std::vector<Tensor>{concat(v, 1)}; }, columns, kExact);
    std::vector<Tensor> equal;
    for (int i = 0; i < 100; ++i) equal.push_back(sample({2, 3}, 500 + i, dtype));
    check_op([](std::vector<Tensor>& v) { return std::vector<Tensor>{stack(v, 0), stack(v, 2)}; }, equal, kExact);
  }
}

TEST_CASE("index with slices, negative steps, integers and new axes", "[shape][index]") {
  const Tensor x = iota({10}, DType::i64);
  const std::int64_t N = kNone;
  const std::vector<std::array<std::int64_t, 3>> slices = {
      {N, N, 1}, {2, 7, 3}, {-3, N, 1}, {-100, 100, 1}, {100, N, 1}, {3, 3, 1}, {N, N, -1}, {7, 2, -2},
      {-1, -100, -1}, {N, 0, -1}, {8, N, -3}, {2, 7, -1}, {5, -100, -4},
  };
  for (const auto& s : slices) {
    INFO("x[" << s[0] << ":" << s[1] << ":" << s[2] << "]");
    check_unary([&](const Tensor& t) { return index(t, {make_slice(s[0], s[1], s[2])}); }, x, kExact);
  }
  for (DType dtype : kAllDtypes) {
    INFO(dtype_name(dtype));
    const Tensor y = sample({5, 6, 7}, 20, dtype);
    check_unary([](const Tensor& t) { return index(t, {Index::at(1)}); }, y, kExact);
    check_unary([](const Tensor& t) { return index(t, {Index::all(), Index::at(-2)}); }, y, kExact);
    check_unary([](const Tensor& t) { return index(t, {Index::range(1, 4), make_slice(kNone, kNone, -1), Index::at(2)}); },
                y, kExact);
    check_unary([](const Tensor& t) {
      return index(t, {make_slice(kNone, kNone, -2), Index::from(1), Index::range(-1, -6, -2), Index::new_axis()});
    }, y, kExact);
    check_unary([](const Tensor& t) { return index(t, {Index::at(4), Index::at(5), Index::at(6)}); }, y, kExact);
    check_unary([](const Tensor& t) { return slice(t, 2, 1, 7, 3); }, y, kExact);
    check_unary([](const Tensor& t) { return slice(t, 0, -1, -100, -1); }, y, kExact);
  }
  // Large strided gathers.
  check_unary([](const Tensor& t) { return index(t, {make_slice(kNone, kNone, -3), Index::range(5, 995, 7)}); },
              sample({2000, 1000}, 21, DType::f32), kExact);
  check_unary([](const Tensor& t) { return slice(t, 1, 0, 1 << 20, 2); }, sample({3, 1 << 20}, 22, DType::i32), kExact);
}

TEST_CASE("index_put_ writes through index expressions, overlapping sources included", "[shape][index_put]") {
  const auto put = [](IndexList indices) {
    return [indices](std::vector<Tensor>& v) {
      index_put_(v[0], indices, v[1]);
      return std::vector<Tensor>{};
    };
  };
  for (DType dtype : kAllDtypes) {
    INFO(dtype_name(dtype));
    const Tensor dst = sample({3, 4}, 30, dtype);
    check_op(put({Index::at(1)}), {dst, sample({4}, 31, dtype)}, kExact);
    check_op(put({Index::all(), Index::range(1, 3)}), {dst, sample({}, 32, dtype)}, kExact);
    check_op(put({make_slice(kNone, kNone, -1), Index::until(1)}), {dst, sample({3, 1}, 33, dtype)}, kExact);
    check_op(put({Index::from(0, 2), Index::from(1, 2)}), {dst, sample({2, 2}, 34, dtype)}, kExact);
  }
  // The source overlaps the destination: read before anything is written, as in numpy.
  check_op([](std::vector<Tensor>& v) {
    index_put_(v[0], {make_slice(kNone, kNone, -1)}, v[0]);
    return std::vector<Tensor>{};
  }, {iota({5})}, kExact);
  check_op([](std::vector<Tensor>& v) {
    index_put_(v[0], {Index::from(1)}, v[0].slice_rows(0, 99999));
    return std::vector<Tensor>{};
  }, {iota({100000})}, kExact);
  check_op([](std::vector<Tensor>& v) {
    index_put_(v[0], {}, transpose(v[0]));
    index_put_(v[0], {Index::all(), Index::at(0)}, index(v[0], {Index::at(2)}));
    return std::vector<Tensor>{};
  }, {iota({3, 3})}, kExact);
  // Through a view into a larger tensor (only the view's elements change), and large.
  check_op([](std::vector<Tensor>& v) {
    Tensor rows = v[0].slice_rows(1, 3);
    index_put_(rows, {Index::all(), Index::from(0, 3)}, v[1]);
    return std::vector<Tensor>{};
  }, {iota({4, 9}), sample({3}, 35, DType::f32)}, kExact);
  check_op(put({Index::range(100, 900), make_slice(kNone, kNone, -2)}),
           {sample({1000, 1000}, 36, DType::f32), sample({800, 500}, 37, DType::f32)}, kExact);
}

TEST_CASE("shape errors are the CPU's", "[shape][errors]") {
  const Tensor x = iota({2, 3}).to(gpu());
  CHECK_THROWS_WITH(index(x, {Index::at(2)}), Contains("index") && Contains("out of range"));
  CHECK_THROWS_WITH(concat({x, ones({2, 3}, DType::f64, gpu())}), Contains("concat"));
  CHECK_THROWS_AS(permute(x, {0, 0}), Error);
  Tensor dst = zeros({3, 4}, DType::f32, gpu());
  CHECK_THROWS_WITH(index_put_(dst, {Index::at(0)}, ones({3}, DType::f32, gpu())), Contains("broadcast_to"));
}
