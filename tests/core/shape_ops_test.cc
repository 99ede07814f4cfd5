// Axis manipulation, joining, splitting and indexing (core/ops/shape_ops.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>

#include "core/ops.h"
#include "core/threads.h"
#include "tests/core/test_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using test_util::iota;
using test_util::values;

namespace {

// out[i_0, ..., i_{n-1}] = x[j] with j[axes[d]] = i_d, by index arithmetic.
std::vector<double> permuted(const Tensor& x, const std::vector<std::int64_t>& axes) {
  Shape out_shape;
  for (std::int64_t a : axes) out_shape.push_back(x.shape()[a]);
  const std::vector<double> v = values(x);
  std::vector<double> out(v.size());
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(out.size()); ++i) {
    const auto idx = test_util::unravel(i, out_shape);
    std::vector<std::int64_t> src(idx.size());
    for (std::size_t d = 0; d < axes.size(); ++d) src[axes[d]] = idx[d];
    out[i] = v[test_util::broadcast_flat(src, x.shape())];
  }
  return out;
}

// A slice entry with optional bounds (Python's x[start:stop:step]).
constexpr std::int64_t kNone = INT64_MIN;
Index make_slice(std::int64_t start, std::int64_t stop, std::int64_t step) {
  Index r;
  r.step = step;
  if (start != kNone) r.start = start, r.has_start = true;
  if (stop != kNone) r.stop = stop, r.has_stop = true;
  return r;
}

std::vector<double> seq(std::initializer_list<double> v) { return std::vector<double>(v); }

}  // namespace

TEST_CASE("permute, transpose and swapaxes move elements by index arithmetic", "[shape][permute]") {
  const Tensor x = test_util::uniform({2, 3, 4}, 1);
  std::vector<std::int64_t> p = {0, 1, 2};
  do {
    INFO("permutation " << p[0] << p[1] << p[2]);
    const Tensor y = permute(x, p);
    REQUIRE(y.shape() == Shape{x.shape()[p[0]], x.shape()[p[1]], x.shape()[p[2]]});
    REQUIRE_VALUES(y, permuted(x, p));
    REQUIRE_FALSE(y.shares_storage_with(x));
  } while (std::next_permutation(p.begin(), p.end()));
  const Tensor w = iota({2, 3, 4, 5}, DType::i64);
  REQUIRE_VALUES(permute(w, {3, 1, 0, 2}), permuted(w, {3, 1, 0, 2}));
  REQUIRE_VALUES(permute(w, {-1, 0, -2, 1}), permuted(w, {3, 0, 2, 1}));
  // transpose reverses all axes; swapaxes exchanges two.
  const Tensor m = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(transpose(m).shape() == Shape{3, 2});
  REQUIRE_VALUES(transpose(m), {1, 4, 2, 5, 3, 6});
  REQUIRE_VALUES(transpose(w), permuted(w, {3, 2, 1, 0}));
  REQUIRE_VALUES(transpose(from_vector<float>({1, 2, 3})), {1, 2, 3});
  CHECK(swapaxes(w, 0, 2).shape() == Shape{4, 3, 2, 5});
  REQUIRE_VALUES(swapaxes(w, 0, 2), permuted(w, {2, 1, 0, 3}));
  REQUIRE_VALUES(swapaxes(w, -1, 1), permuted(w, {0, 3, 2, 1}));
  REQUIRE_VALUES(swapaxes(w, 1, 1), values(w));
  // Large enough for the parallel strided copy.
  const Tensor big = test_util::uniform({300, 400}, 2);
  REQUIRE_VALUES(transpose(big), permuted(big, {1, 0}));
  // Attention's heads transpose: many short rows over three outer axes, split among threads at
  // rows in the middle of the outer axes (each chunk counts its rows on from its first).
  // TANDEM_GRAIN_SCALE=1: split from 2 x 32768 elements on, whatever a wake-up costs here.
  const Tensor heads = test_util::uniform({5, 131, 4, 33}, 3);
  ::setenv("TANDEM_GRAIN_SCALE", "1", 1);
  for (int threads : {1, 2}) {
    INFO(threads << " threads");
    const int before = max_threads();
    set_max_threads(threads);
    const Tensor moved = permute(heads, {0, 2, 1, 3});
    set_max_threads(before);
    REQUIRE_VALUES(moved, permuted(heads, {0, 2, 1, 3}));
  }
  ::unsetenv("TANDEM_GRAIN_SCALE");
}

TEST_CASE("bad permutations throw", "[shape][permute][errors]") {
  const Tensor x = ones({2, 3, 4});
  CHECK_THROWS_WITH(permute(x, {0, 0, 1}), Contains("permute") && Contains("repeated"));
  CHECK_THROWS_WITH(permute(x, {0, 1}), Contains("permute") && Contains("f32[2, 3, 4]"));
  CHECK_THROWS_AS(permute(x, {0, 1, 3}), Error);
  CHECK_THROWS_AS(permute(x, {0, 1, 2, 3}), Error);
  CHECK_THROWS_AS(permute(x, {2, -1, 0}), Error);  // -1 is axis 2 again
  CHECK_THROWS_AS(swapaxes(x, 0, 3), Error);
}

TEST_CASE("broadcast_to copies along new and extent-1 axes", "[shape][broadcast]") {
  REQUIRE_VALUES(broadcast_to(from_vector<float>({1, 2, 3}), {2, 3}), {1, 2, 3, 1, 2, 3});
  const Tensor c = from_vector<std::int32_t>({1, 2}, {2, 1});
  const Tensor b = broadcast_to(c, {3, 2, 4});
  CHECK(b.shape() == Shape{3, 2, 4});
  CHECK(b.dtype() == DType::i32);
  std::vector<double> want;
  for (int i = 0; i < 3; ++i)
    for (double v : {1.0, 2.0})
      for (int k = 0; k < 4; ++k) want.push_back(v);
  REQUIRE_VALUES(b, want);
  REQUIRE_VALUES(broadcast_to(scalar_tensor(5), {2, 2}), {5, 5, 5, 5});
  CHECK(broadcast_to(c, {2, 1}).shares_storage_with(c));
  CHECK_THROWS_WITH(broadcast_to(from_vector<float>({1, 2, 3}), {4}), Contains("broadcast_to"));
  CHECK_THROWS_AS(broadcast_to(ones({2, 3}), {3}), Error);
  CHECK_THROWS_AS(broadcast_to(ones({2, 3}), {3, 3}), Error);
}

TEST_CASE("squeeze and expand_dims are views", "[shape][view]") {
  Tensor x = iota({2, 1, 3});
  const Tensor s = squeeze(x, 1);
  CHECK(s.shape() == Shape{2, 3});
  CHECK(s.shares_storage_with(x));
  CHECK(squeeze(x, -2).shape() == Shape{2, 3});
  REQUIRE_VALUES(s, values(x));
  x.data<float>()[5] = -9;
  CHECK(s.to_vector<float>()[5] == -9);
  CHECK(squeeze(ones({1}), 0).shape().empty());
  CHECK_THROWS_WITH(squeeze(x, 0), Contains("squeeze") && Contains("extent 2"));
  CHECK_THROWS_AS(squeeze(x, 3), Error);

  const Tensor m = iota({2, 3});
  CHECK(expand_dims(m, 0).shape() == Shape{1, 2, 3});
  CHECK(expand_dims(m, 1).shape() == Shape{2, 1, 3});
  CHECK(expand_dims(m, 2).shape() == Shape{2, 3, 1});
  CHECK(expand_dims(m, -1).shape() == Shape{2, 3, 1});
  CHECK(expand_dims(m, -3).shape() == Shape{1, 2, 3});
  CHECK(expand_dims(m, 1).shares_storage_with(m));
  CHECK(expand_dims(scalar_tensor(1), 0).shape() == Shape{1});
  CHECK_THROWS_AS(expand_dims(m, 3), Error);
  CHECK_THROWS_AS(expand_dims(m, -4), Error);
}

TEST_CASE("concat joins along any axis, pieces of different extents", "[shape][concat]") {
  const Tensor a = from_vector<float>({1, 2, 3}, {1, 3});
  const Tensor b = from_vector<float>({4, 5, 6, 7, 8, 9}, {2, 3});
  const Tensor e = zeros({0, 3});
  const Tensor rows = concat({a, e, b});
  CHECK(rows.shape() == Shape{3, 3});
  REQUIRE_VALUES(rows, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  const Tensor c = from_vector<float>({10, 20}, {2, 1});
  const Tensor cols = concat({c, b, zeros({2, 0})}, 1);
  CHECK(cols.shape() == Shape{2, 4});
  REQUIRE_VALUES(cols, {10, 4, 5, 6, 20, 7, 8, 9});
  REQUIRE_VALUES(concat({b, c}, -1), {4, 5, 6, 10, 7, 8, 9, 20});
  // 3-D, middle axis.
  const Tensor p = iota({2, 1, 2}), q = iota({2, 2, 2}) + 100.0;
  const Tensor pq = concat({p, q}, 1);
  CHECK(pq.shape() == Shape{2, 3, 2});
  REQUIRE_VALUES(pq, {0, 1, 100, 101, 102, 103, 2, 3, 104, 105, 106, 107});
  REQUIRE_VALUES(concat({from_vector<std::int64_t>({1}), from_vector<std::int64_t>({2, 3})}), {1, 2, 3});
  REQUIRE_VALUES(concat({b}), values(b));
}

TEST_CASE("concat and stack reject mismatched operands", "[shape][concat][errors]") {
  CHECK_THROWS_WITH(concat({ones({2, 3}), ones({2, 4})}, 0), Contains("concat") && Contains("[2, 4]"));
  CHECK_THROWS_AS(concat({ones({2, 3}), ones({3, 3})}, 1), Error);
  CHECK_THROWS_AS(concat({ones({2, 3}), ones({3})}), Error);
  CHECK_THROWS_AS(concat({ones({2, 3}), ones({2, 3}, DType::f64)}), Error);
  CHECK_THROWS_AS(concat({}), Error);
  CHECK_THROWS_AS(concat({scalar_tensor(1), scalar_tensor(2)}), Error);
  CHECK_THROWS_AS(concat({ones({2, 3})}, 2), Error);
  CHECK_THROWS_WITH(stack({ones({2, 3}), ones({3, 2})}), Contains("stack") && Contains("[3, 2]"));
  CHECK_THROWS_AS(stack({}), Error);
  CHECK_THROWS_AS(stack({ones({2})}, 2), Error);
}

TEST_CASE("stack adds a new axis", "[shape][stack]") {
  const Tensor a = iota({2, 3}), b = iota({2, 3}) + 10.0, c = iota({2, 3}) + 20.0;
  const std::vector<double> va = values(a);
  const Tensor s0 = stack({a, b, c});
  CHECK(s0.shape() == Shape{3, 2, 3});
  REQUIRE_VALUES(s0, {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25});
  const Tensor s1 = stack({a, b, c}, 1);
  CHECK(s1.shape() == Shape{2, 3, 3});
  REQUIRE_VALUES(s1, {0, 1, 2, 10, 11, 12, 20, 21, 22, 3, 4, 5, 13, 14, 15, 23, 24, 25});
  const Tensor s2 = stack({a, b, c}, -1);
  CHECK(s2.shape() == Shape{2, 3, 3});
  REQUIRE_VALUES(s2, {0, 10, 20, 1, 11, 21, 2, 12, 22, 3, 13, 23, 4, 14, 24, 5, 15, 25});
  REQUIRE_VALUES(stack({a, b, c}, 2), values(s2));
  const Tensor scalars = stack({scalar_tensor(1), scalar_tensor(2)});
  CHECK(scalars.shape() == Shape{2});
  REQUIRE_VALUES(scalars, {1, 2});
}

TEST_CASE("split by sections and by indices, like numpy.split", "[shape][split]") {
  const Tensor x = iota({6, 2});
  const auto thirds = split(x, 3);
  REQUIRE(thirds.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(thirds[i].shape() == Shape{2, 2});
    REQUIRE_VALUES(thirds[i], {4.0 * i, 4.0 * i + 1, 4.0 * i + 2, 4.0 * i + 3});
  }
  const auto halves = split(iota({2, 6}), 2, -1);
  REQUIRE(halves.size() == 2);
  REQUIRE_VALUES(halves[0], {0, 1, 2, 6, 7, 8});
  REQUIRE_VALUES(halves[1], {3, 4, 5, 9, 10, 11});
  CHECK(split(x, 1)[0].shape() == Shape{6, 2});
  CHECK_THROWS_WITH(split(x, 4), Contains("split"));
  CHECK_THROWS_AS(split(x, 0), Error);
  CHECK_THROWS_AS(split(x, 2, 2), Error);

  const Tensor v = iota({7});
  const auto pieces = split(v, std::vector<std::int64_t>{2, 5});
  REQUIRE(pieces.size() == 3);
  REQUIRE_VALUES(pieces[0], {0, 1});
  REQUIRE_VALUES(pieces[1], {2, 3, 4});
  REQUIRE_VALUES(pieces[2], {5, 6});
  const auto cols = split(iota({2, 4}), std::vector<std::int64_t>{1}, 1);
  REQUIRE(cols.size() == 2);
  REQUIRE_VALUES(cols[0], {0, 4});
  REQUIRE_VALUES(cols[1], {1, 2, 3, 5, 6, 7});
  // Out-of-range indices clamp to the axis: np.split(arange(5), [3, 10]).
  const auto clamped = split(iota({5}), std::vector<std::int64_t>{3, 10});
  REQUIRE(clamped.size() == 3);
  REQUIRE_VALUES(clamped[0], {0, 1, 2});
  REQUIRE_VALUES(clamped[1], {3, 4});
  CHECK(clamped[2].shape() == Shape{0});
  // A decreasing index gives an empty piece and the next piece starts there again:
  // np.split(arange(6), [4, 2]) == [[0, 1, 2, 3], [], [2, 3, 4, 5]].
  const auto decreasing = split(iota({6}), std::vector<std::int64_t>{4, 2});
  REQUIRE(decreasing.size() == 3);
  REQUIRE_VALUES(decreasing[0], {0, 1, 2, 3});
  CHECK(decreasing[1].numel() == 0);
  REQUIRE_VALUES(decreasing[2], {2, 3, 4, 5});
  const auto whole = split(v, std::vector<std::int64_t>{});
  REQUIRE(whole.size() == 1);
  REQUIRE_VALUES(whole[0], values(v));
  CHECK_THROWS_AS(split(v, std::vector<std::int64_t>{-2}), Error);
}

TEST_CASE("index with slices follows Python semantics", "[shape][index]") {
  const Tensor x = iota({10}, DType::i64);
  const std::int64_t N = kNone;
  struct Case {
    std::int64_t start, stop, step;
    std::vector<double> want;
  };
  // Expected values from Python: list(range(10))[start:stop:step].
  const std::vector<Case> cases = {
      {N, N, 1, seq({0, 1, 2, 3, 4, 5, 6, 7, 8, 9})},
      {2, 7, 1, seq({2, 3, 4, 5, 6})},
      {2, 7, 3, seq({2, 5})},
      {-3, N, 1, seq({7, 8, 9})},
      {N, -3, 1, seq({0, 1, 2, 3, 4, 5, 6})},
      {-100, 100, 1, seq({0, 1, 2, 3, 4, 5, 6, 7, 8, 9})},
      {100, N, 1, seq({})},
      {N, -100, 1, seq({})},
      {3, 3, 1, seq({})},
      {N, N, -1, seq({9, 8, 7, 6, 5, 4, 3, 2, 1, 0})},
      {7, 2, -1, seq({7, 6, 5, 4, 3})},
      {7, 2, -2, seq({7, 5, 3})},
      {-1, -100, -1, seq({9, 8, 7, 6, 5, 4, 3, 2, 1, 0})},
      {N, 0, -1, seq({9, 8, 7, 6, 5, 4, 3, 2, 1})},
      {8, N, -3, seq({8, 5, 2})},
      {2, 7, -1, seq({})},
      {-2, -8, -2, seq({8, 6, 4})},
      {5, -100, -4, seq({5, 1})},
      {-100, N, -1, seq({})},
  };
  for (const Case& c : cases) {
    INFO("x[" << c.start << ":" << c.stop << ":" << c.step << "] (" << N << " = none)");
    const Tensor y = index(x, {make_slice(c.start, c.stop, c.step)});
    REQUIRE(y.shape() == Shape{static_cast<std::int64_t>(c.want.size())});
    REQUIRE(y.dtype() == DType::i64);
    REQUIRE_VALUES(y, c.want);
  }
  REQUIRE_VALUES(index(x, {Index::range(1, 8, 3)}), {1, 4, 7});
  REQUIRE_VALUES(index(x, {Index::from(6)}), {6, 7, 8, 9});
  REQUIRE_VALUES(index(x, {Index::from(-2, -1)}), {8, 7, 6, 5, 4, 3, 2, 1, 0});
  REQUIRE_VALUES(index(x, {Index::until(3)}), {0, 1, 2});
  REQUIRE_VALUES(index(x, {Index::until(6, -2)}), {9, 7});
  REQUIRE_VALUES(index(x, {Index::all()}), values(x));
  CHECK_THROWS_WITH(index(x, {Index::range(0, 5, 0)}), Contains("step"));
}

TEST_CASE("index with integers, new axes and mixed entries", "[shape][index]") {
  // x[i, j, k] = 20 i + 5 j + k.
  const Tensor x = iota({3, 4, 5});
  const Tensor row = index(x, {Index::at(1)});
  CHECK(row.shape() == Shape{4, 5});
  REQUIRE_VALUES(row, values(iota({4, 5}) + 20.0));
  REQUIRE_VALUES(index(x, {Index::at(-2)}), values(row));
  const Tensor e = index(x, {Index::at(2), Index::at(-1), Index::at(3)});
  CHECK(e.shape().empty());
  CHECK(e.item() == 40 + 15 + 3);
  REQUIRE_VALUES(index(x, {Index::all(), Index::at(2)}), {10, 11, 12, 13, 14, 30, 31, 32, 33, 34, 50, 51, 52, 53, 54});
  // x[1:3, ::-1, 2]
  Index reverse;
  reverse.step = -1;
  const Tensor mixed = index(x, {Index::range(1, 3), reverse, Index::at(2)});
  CHECK(mixed.shape() == Shape{2, 4});
  std::vector<double> want;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 4; ++b) want.push_back(20 * (1 + a) + 5 * (3 - b) + 2);
  REQUIRE_VALUES(mixed, want);
  // x[::-2, 1:, -1:-4:-2]
  const Tensor steps = index(x, {make_slice(kNone, kNone, -2), Index::from(1), Index::range(-1, -4, -2)});
  CHECK(steps.shape() == Shape{2, 3, 2});
  want.clear();
  for (int i : {2, 0})
    for (int j : {1, 2, 3})
      for (int k : {4, 2}) want.push_back(20 * i + 5 * j + k);
  REQUIRE_VALUES(steps, want);
  // New axes.
  CHECK(index(x, {Index::new_axis()}).shape() == Shape{1, 3, 4, 5});
  CHECK(index(x, {Index::all(), Index::new_axis()}).shape() == Shape{3, 1, 4, 5});
  CHECK(index(x, {Index::at(1), Index::new_axis(), Index::at(2)}).shape() == Shape{1, 5});
  REQUIRE_VALUES(index(x, {Index::at(1), Index::new_axis(), Index::at(2)}), {30, 31, 32, 33, 34});
  CHECK(index(x, {Index::all(), Index::all(), Index::all(), Index::new_axis()}).shape() == Shape{3, 4, 5, 1});
  CHECK(index(scalar_tensor(4), {Index::new_axis()}).shape() == Shape{1});
  CHECK_FALSE(index(x, {Index::all()}).shares_storage_with(x));
}

TEST_CASE("index errors", "[shape][index][errors]") {
  const Tensor x = iota({2, 3});
  CHECK_THROWS_WITH(index(x, {Index::at(2)}), Contains("index") && Contains("out of range"));
  CHECK_THROWS_AS(index(x, {Index::at(-3)}), Error);
  CHECK_THROWS_AS(index(x, {Index::all(), Index::at(3)}), Error);
  CHECK_THROWS_WITH(index(x, {Index::at(0), Index::at(0), Index::at(0)}), Contains("too many"));
  CHECK_NOTHROW(index(x, {Index::at(0), Index::new_axis(), Index::at(0)}));
  CHECK_THROWS_AS(index(zeros({0, 2}), {Index::at(0)}), Error);
}

TEST_CASE("index_put_ writes through an index expression", "[shape][index_put]") {
  Tensor dst = zeros({3, 4});
  index_put_(dst, {Index::at(1)}, from_vector<float>({1, 2, 3, 4}));
  REQUIRE_VALUES(dst, {0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0});
  index_put_(dst, {Index::all(), Index::range(1, 3)}, scalar_tensor(7));
  REQUIRE_VALUES(dst, {0, 7, 7, 0, 1, 7, 7, 4, 0, 7, 7, 0});
  // Reversed rows with a broadcast column: dst[::-1, :1] = [[0], [1], [2]].
  index_put_(dst, {make_slice(kNone, kNone, -1), Index::until(1)}, iota({3, 1}));
  REQUIRE_VALUES(dst, {2, 7, 7, 0, 1, 7, 7, 4, 0, 7, 7, 0});
  // Strided target: dst[0::2, 1::2] = [[10, 11], [12, 13]].
  index_put_(dst, {Index::from(0, 2), Index::from(1, 2)}, from_vector<float>({10, 11, 12, 13}, {2, 2}));
  REQUIRE_VALUES(dst, {2, 10, 7, 11, 1, 7, 7, 4, 0, 12, 7, 13});
  // A single element, and writes through a view into its base.
  Tensor base = zeros({6});
  Tensor view = base.reshape({2, 3});
  index_put_(view, {Index::at(-1), Index::at(-1)}, scalar_tensor(5));
  REQUIRE_VALUES(base, {0, 0, 0, 0, 0, 5});
  index_put_(view, {Index::new_axis(), Index::at(0)}, from_vector<float>({1, 2, 3}));
  REQUIRE_VALUES(base, {1, 2, 3, 0, 0, 5});
  // A source overlapping the destination is read before anything is written, as in numpy.
  Tensor r = iota({5});
  index_put_(r, {make_slice(kNone, kNone, -1)}, r);  // r[::-1] = r
  REQUIRE_VALUES(r, {4, 3, 2, 1, 0});
  Tensor shifted = iota({6});
  index_put_(shifted, {Index::from(1)}, shifted.slice_rows(0, 5));  // shifted[1:] = shifted[:5]
  REQUIRE_VALUES(shifted, {0, 0, 1, 2, 3, 4});
  Tensor square_t = iota({3, 3});
  index_put_(square_t, {}, transpose(square_t));
  index_put_(square_t, {Index::all(), Index::at(0)}, index(square_t, {Index::at(2)}));
  REQUIRE_VALUES(square_t, {2, 3, 6, 5, 4, 7, 8, 5, 8});
  CHECK_THROWS_WITH(index_put_(dst, {Index::at(0)}, ones({3})), Contains("broadcast_to"));
  CHECK_THROWS_AS(index_put_(dst, {Index::at(0)}, ones({4}, DType::f64)), Error);
  CHECK_THROWS_AS(index_put_(dst, {Index::at(5)}, scalar_tensor(1)), Error);
}

TEST_CASE("slice selects begin:end:step along one axis", "[shape][slice]") {
  const Tensor x = iota({4, 5});
  const Tensor cols = slice(x, 1, 1, 4, 2);
  CHECK(cols.shape() == Shape{4, 2});
  REQUIRE_VALUES(cols, {1, 3, 6, 8, 11, 13, 16, 18});
  REQUIRE_VALUES(slice(x, 0, 1, 3), values(iota({2, 5}) + 5.0));
  REQUIRE_VALUES(slice(x, -1, 3, 100), {3, 4, 8, 9, 13, 14, 18, 19});
  const Tensor reversed = slice(x, 0, -1, -100, -1);
  CHECK(reversed.shape() == Shape{4, 5});
  REQUIRE_VALUES(index(reversed, {Index::all(), Index::at(0)}), {15, 10, 5, 0});
  CHECK(slice(x, 0, 3, 1).shape() == Shape{0, 5});
  CHECK_THROWS_AS(slice(x, 2, 0, 1), Error);
  CHECK_THROWS_AS(slice(x, 0, 0, 4, 0), Error);
}

TEST_CASE("stack names itself in dtype errors", "[shape_ops][errors]") {
  REQUIRE_THROWS_WITH(stack({zeros({2}, DType::f64), zeros({2}, DType::f32)}),
                      Catch::StartsWith("stack:") && Catch::Contains("f64") && Catch::Contains("f32"));
}
