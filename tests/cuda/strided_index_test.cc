// The index arithmetic of the strided CUDA kernels (cuda/strided_index.h), run on the host:
// every element offset that make_indexer + StridedIndexer::offsets produce is compared with a
// straightforward unravel-and-dot reference over the original, unmerged shape and strides.
#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "cuda/strided_index.h"

using namespace tandem;
using namespace tandem::cuda;
using Catch::Matchers::Contains;

namespace {

// The offset of row-major element `linear` of `shape` in a view with `strides` and `base`.
std::int64_t reference_offset(std::int64_t linear, const Shape& shape, const Shape& strides, std::int64_t base) {
  std::int64_t offset = base;
  for (std::size_t d = shape.size(); d-- > 0;) {
    offset += (linear % shape[d]) * strides[d];
    linear /= shape[d];
  }
  return offset;
}

// Checks every element of `shape`, with 64-bit and with 32-bit division.
template <int K>
void check_all_offsets(const Shape& shape, const std::array<Shape, K>& strides,
                       const std::array<std::int64_t, K>& bases) {
  const StridedIndexer<K> indexer = make_indexer<K>("test", shape, strides, bases);
  CHECK(indexer.dims <= kMaxIndexDims);
  const std::int64_t n = shape_numel(shape);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t wide[K], narrow[K];
    indexer.offsets(i, wide);
    indexer.template offsets<std::uint32_t>(i, narrow);
    for (int k = 0; k < K; ++k) {
      INFO("shape " << shape_str(shape) << ", operand " << k << ", element " << i);
      const std::int64_t expected = reference_offset(i, shape, strides[k], bases[k]);
      REQUIRE(wide[k] == expected);
      REQUIRE(narrow[k] == expected);
    }
  }
}

}  // namespace

TEST_CASE("broadcast_strides follows NumPy's rules") {
  CHECK(broadcast_strides({2, 3}, {2, 3}) == Shape{3, 1});
  CHECK(broadcast_strides({3}, {2, 3}) == Shape{0, 1});
  CHECK(broadcast_strides({2, 1}, {2, 3}) == Shape{1, 0});
  CHECK(broadcast_strides({1, 3}, {4, 2, 3}) == Shape{0, 0, 1});
  CHECK(broadcast_strides({}, {4, 5}) == Shape{0, 0});
  CHECK(broadcast_strides({}, {}) == Shape{});
  CHECK(broadcast_strides({4, 1, 5}, {2, 4, 3, 5}) == Shape{0, 5, 0, 1});
  CHECK(broadcast_strides({0, 3}, {0, 3}) == Shape{3, 1});
  CHECK(broadcast_strides({1}, {0}) == Shape{0});
  CHECK_THROWS_WITH(broadcast_strides({2, 3}, {3}), Contains("cannot broadcast"));
  CHECK_THROWS_WITH(broadcast_strides({2}, {3}), Contains("cannot broadcast [2] to [3]"));
}

TEST_CASE("merge_axes collapses contiguous runs and drops extent-1 axes") {
  SECTION("a contiguous tensor becomes one axis") {
    std::vector<Shape> strides = {contiguous_strides({2, 3, 4})};
    CHECK(merge_axes("test", {2, 3, 4}, strides) == Shape{24});
    CHECK(strides == std::vector<Shape>{{1}});
  }
  SECTION("a row broadcast over a matrix needs two axes") {
    std::vector<Shape> strides = {contiguous_strides({5, 6, 7}), broadcast_strides({7}, {5, 6, 7})};
    CHECK(merge_axes("test", {5, 6, 7}, strides) == Shape{30, 7});
    CHECK(strides == std::vector<Shape>{{7, 1}, {0, 1}});
  }
  SECTION("a scalar broadcast everywhere merges with anything contiguous") {
    std::vector<Shape> strides = {contiguous_strides({3, 4}), broadcast_strides({}, {3, 4})};
    CHECK(merge_axes("test", {3, 4}, strides) == Shape{12});
    CHECK(strides == std::vector<Shape>{{1}, {0}});
  }
  SECTION("extent-1 axes vanish, whatever their strides") {
    std::vector<Shape> strides = {{99, 4, 77, 1}};
    CHECK(merge_axes("test", {1, 3, 1, 4}, strides) == Shape{12});
    CHECK(strides == std::vector<Shape>{{1}});
  }
  SECTION("only extent-1 axes: no axes at all") {
    std::vector<Shape> strides = {{5, 1}, {0, 0}};
    CHECK(merge_axes("test", {1, 1}, strides) == Shape{});
    CHECK(strides == std::vector<Shape>{{}, {}});
  }
  SECTION("a transpose does not merge") {
    std::vector<Shape> strides = {{3, 1}, {1, 2}};  // out [2, 3] contiguous, in is a [3, 2] transposed
    CHECK(merge_axes("test", {2, 3}, strides) == Shape{2, 3});
    CHECK(strides == std::vector<Shape>{{3, 1}, {1, 2}});
  }
  SECTION("a zero extent is kept") {
    std::vector<Shape> strides = {contiguous_strides({2, 0, 3})};
    const Shape sizes = merge_axes("test", {2, 0, 3}, strides);
    CHECK(shape_numel(sizes) == 0);
  }
  SECTION("strides of the wrong rank are an error") {
    std::vector<Shape> strides = {{1}};
    CHECK_THROWS_WITH(merge_axes("test", {2, 3}, strides), Contains("test: strides [1] do not match shape [2, 3]"));
  }
}

TEST_CASE("more than kMaxIndexDims unmergeable axes are an error naming the op") {
  // Nine axes of extent 2, each with a stride that breaks contiguity with its neighbours.
  const Shape shape(9, 2);
  Shape strides(9);
  std::int64_t stride = 1;
  for (int d = 8; d >= 0; --d) {
    strides[d] = stride;
    stride *= 3;  // gaps: never stride[d] == stride[d + 1] * 2
  }
  std::vector<Shape> all = {strides};
  CHECK_THROWS_WITH(merge_axes("copy_strided", shape, all),
                    Contains("copy_strided: the CUDA kernels index at most 8") && Contains("got 9"));
  CHECK_THROWS_AS((make_indexer<1>("add", shape, {strides}, {0})), Error);

  // Nine axes that merge (a contiguous tensor, or a broadcast of one) are fine.
  check_all_offsets<2>(shape, {contiguous_strides(shape), broadcast_strides({2, 1, 2, 2, 2, 2, 2, 2, 2}, shape)},
                       {0, 0});
  // Exactly eight unmergeable axes are fine.
  const Shape shape8(8, 2);
  const Shape strides8(strides.begin() + 1, strides.end());
  check_all_offsets<1>(shape8, {strides8}, {5});
}

TEST_CASE("offsets of broadcast operands") {
  const Shape out = {3, 4, 5};
  check_all_offsets<3>(out, {contiguous_strides(out), broadcast_strides({5}, out), broadcast_strides({3, 1, 5}, out)},
                       {0, 0, 0});
  check_all_offsets<3>(out, {contiguous_strides(out), broadcast_strides({4, 1}, out), broadcast_strides({}, out)},
                       {0, 0, 0});
  // where(): four operands, broadcast three ways.
  const Shape w = {2, 1, 3, 4};
  check_all_offsets<4>(w,
                       {contiguous_strides(w), broadcast_strides({3, 1}, w), broadcast_strides({2, 1, 1, 4}, w),
                        broadcast_strides({1}, w)},
                       {0, 0, 0, 0});
  // Everything broadcast from scalars, and a scalar output.
  check_all_offsets<2>({}, {Shape{}, Shape{}}, {0, 7});
  check_all_offsets<2>({1, 1}, {Shape{1, 1}, Shape{0, 0}}, {3, 7});
}

TEST_CASE("offsets of permuted and offset views") {
  // permute([2, 3, 4] -> axes {2, 0, 1}): the source strides are a permutation of [12, 4, 1].
  check_all_offsets<2>({4, 2, 3}, {contiguous_strides({4, 2, 3}), Shape{1, 12, 4}}, {0, 0});
  // A slice [1:3, ::2] of a [4, 6] source with an offset, into a strided destination.
  check_all_offsets<2>({2, 3}, {Shape{10, 3}, Shape{6, 2}}, {100, 6});
  // A broadcast source (stride 0) in the middle of a permuted one.
  check_all_offsets<2>({3, 5, 2}, {contiguous_strides({3, 5, 2}), Shape{1, 0, 3}}, {0, 11});
  // Extent-1 axes with odd strides among permuted ones.
  check_all_offsets<2>({2, 1, 3, 1, 4}, {contiguous_strides({2, 1, 3, 1, 4}), Shape{1, 1000, 8, -5, 2}}, {0, 0});
  // Partial merging: the inner two axes are contiguous in both, the outer one is not.
  check_all_offsets<2>({3, 4, 5}, {contiguous_strides({3, 4, 5}), Shape{40, 5, 1}}, {0, 2});
}

TEST_CASE("empty shapes give no elements and are accepted") {
  for (const Shape& shape : {Shape{0}, Shape{3, 0}, Shape{0, 1, 4}, Shape{2, 0, 2, 0}}) {
    const StridedIndexer<2> indexer =
        make_indexer<2>("test", shape, {contiguous_strides(shape), broadcast_strides({1}, shape)}, {0, 0});
    std::int64_t product = 1;
    for (int d = 0; d < indexer.dims; ++d) product *= indexer.sizes[d];
    CHECK(product == 0);
  }
}

TEST_CASE("offsets beyond 32 bits") {
  // Large extents and strides: offsets need 64 bits, divisions of in-range indices do not.
  const Shape shape = {3, 70000, 50000};  // 1.05e10 elements: 64-bit division only
  const std::array<Shape, 2> strides = {contiguous_strides(shape), Shape{1, 150001, 3}};
  const StridedIndexer<2> indexer = make_indexer<2>("test", shape, strides, {0, 0});
  REQUIRE(indexer.dims == 3);
  for (std::int64_t i : {std::int64_t{0}, std::int64_t{1}, std::int64_t{3499999999}, std::int64_t{7000000001},
                         shape_numel(shape) - 1}) {
    std::int64_t off[2];
    indexer.offsets(i, off);
    CHECK(off[0] == i);
    CHECK(off[1] == reference_offset(i, shape, strides[1], 0));
  }
  // 32-bit division with 64-bit offsets: each product index * stride exceeds 2^32.
  const Shape small = {7, 9};
  const std::array<Shape, 1> big_strides = {Shape{std::int64_t{1} << 40, std::int64_t{3} << 33}};
  const StridedIndexer<1> wide = make_indexer<1>("test", small, big_strides, {std::int64_t{1} << 45});
  for (std::int64_t i = 0; i < 63; ++i) {
    std::int64_t off[1];
    wide.offsets<std::uint32_t>(i, off);
    CHECK(off[0] == reference_offset(i, small, big_strides[0], std::int64_t{1} << 45));
  }
}
