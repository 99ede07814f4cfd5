// Tensor creation, views, copies, conversions and read-out (core/tensor.h).
#include <catch2/catch.hpp>

#include <cstdlib>

#include <sstream>

#include "core/ops.h"
#include "tests/core/test_util.h"

using namespace tandem;
using Catch::Matchers::Contains;

TEST_CASE("zeros, ones, full and the *_like creators fill every element", "[tensor]") {
  const Tensor z = zeros({2, 3});
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.dim() == 2);
  CHECK(z.numel() == 6);
  CHECK(z.dtype() == DType::f32);
  CHECK(z.nbytes() == 24);
  REQUIRE_VALUES(z, {0, 0, 0, 0, 0, 0});

  const Tensor o = ones({4}, DType::i32);
  CHECK(o.dtype() == DType::i32);
  REQUIRE_VALUES(o, {1, 1, 1, 1});

  const Tensor f = full({2, 2}, 2.5, DType::f64);
  CHECK(f.dtype() == DType::f64);
  CHECK(f.nbytes() == 32);
  REQUIRE_VALUES(f, {2.5, 2.5, 2.5, 2.5});
  REQUIRE_VALUES(full({3}, -7.9, DType::i64), {-7, -7, -7});
  REQUIRE(full({2}, 1, DType::boolean).to_vector<bool>() == std::vector<bool>{true, true});

  const Tensor zl = zeros_like(f), ol = ones_like(f), fl = full_like(o, 9);
  CHECK(zl.shape() == f.shape());
  CHECK(zl.dtype() == DType::f64);
  REQUIRE_VALUES(zl, {0, 0, 0, 0});
  REQUIRE_VALUES(ol, {1, 1, 1, 1});
  CHECK(fl.dtype() == DType::i32);
  REQUIRE_VALUES(fl, {9, 9, 9, 9});
  CHECK_FALSE(zl.shares_storage_with(f));

  CHECK_THROWS_AS(zeros({2, -1}), Error);
  CHECK_FALSE(Tensor().defined());
  CHECK(z.size(-1) == 3);
  CHECK(z.size(0) == 2);
  CHECK_THROWS_AS(z.size(2), Error);
}

TEST_CASE("arange follows numpy.arange, including negative and fractional steps", "[tensor]") {
  const Tensor a = arange(5);
  CHECK(a.dtype() == DType::i64);
  CHECK(a.shape() == Shape{5});
  REQUIRE(a.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2, 3, 4});

  REQUIRE_VALUES(arange(2, 11, 3), {2, 5, 8});
  REQUIRE_VALUES(arange(5, 0, -1), {5, 4, 3, 2, 1});
  REQUIRE_VALUES(arange(3, -4, -3, DType::i32), {3, 0, -3});
  REQUIRE_VALUES(arange(0, 1, 0.25), {0, 0.25, 0.5, 0.75});
  REQUIRE_VALUES(arange(1, 0, -0.25, DType::f64), {1, 0.75, 0.5, 0.25});
  REQUIRE_VALUES(arange(-1.5, 1.5, 1.0), {-1.5, -0.5, 0.5});
  REQUIRE_VALUES(arange(0, 1, 0.3, DType::f64), {0, 0.3, 0.6, 0.8999999999999999}, 1e-12);  // ceil(3.33) = 4
  CHECK(arange(0, 1, 0.1, DType::f64).numel() == 10);

  const Tensor i = arange(0, 5, 2, DType::i32);
  CHECK(i.dtype() == DType::i32);
  REQUIRE(i.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 2, 4});

  // Empty ranges: the step points away from stop.
  CHECK(arange(0, -3, 1).shape() == Shape{0});
  CHECK(arange(0, 3, -1).numel() == 0);
  CHECK(arange(2, 2, 1).numel() == 0);
  CHECK_THROWS_WITH(arange(0, 1, 0), Contains("arange"));
  CHECK_THROWS_AS(arange(0, 3, 1, DType::boolean), Error);
}

TEST_CASE("from_vector copies host values for every dtype", "[tensor]") {
  const Tensor f = from_vector<float>({1.5f, -2.25f, 3, 4, 5, 6}, {2, 3});
  CHECK(f.dtype() == DType::f32);
  CHECK(f.shape() == Shape{2, 3});
  CHECK(f.data<float>()[1] == -2.25f);
  CHECK(f.to_vector<float>() == std::vector<float>{1.5f, -2.25f, 3, 4, 5, 6});

  const Tensor d = from_vector<double>({0.1, 1e300, -1e-300});
  CHECK(d.dtype() == DType::f64);
  CHECK(d.shape() == Shape{3});
  CHECK(d.to_vector<double>() == std::vector<double>{0.1, 1e300, -1e-300});

  const Tensor i = from_vector<std::int32_t>({-2147483647 - 1, 0, 2147483647}, {3, 1});
  CHECK(i.dtype() == DType::i32);
  CHECK(i.shape() == Shape{3, 1});
  CHECK(i.to_vector<std::int32_t>() == std::vector<std::int32_t>{-2147483647 - 1, 0, 2147483647});

  const std::int64_t big = (std::int64_t{1} << 53) + 1;  // not representable as a double
  const Tensor l = from_vector<std::int64_t>({big, -big}, {1, 2});
  CHECK(l.dtype() == DType::i64);
  CHECK(l.data<std::int64_t>()[0] == big);
  CHECK(l.to_vector<std::int64_t>() == std::vector<std::int64_t>{big, -big});

  const Tensor b = from_vector<bool>({true, false, false, true}, {2, 2});
  CHECK(b.dtype() == DType::boolean);
  CHECK(b.nbytes() == 4);
  CHECK(b.data<bool>()[3]);
  CHECK_FALSE(b.data<bool>()[1]);
  CHECK(b.to_vector<bool>() == std::vector<bool>{true, false, false, true});

  CHECK_THROWS_WITH((from_vector<float>({1, 2, 3}, {2, 2})), Contains("from_vector") && Contains("[2, 2]"));
}

TEST_CASE("scalar_tensor has shape [] and one element", "[tensor]") {
  const Tensor s = scalar_tensor(3.5);
  CHECK(s.shape().empty());
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item() == 3.5);
  CHECK(scalar_tensor(7.9, DType::i32).item() == 7);
  CHECK(scalar_tensor(-1, DType::f64).dtype() == DType::f64);
  CHECK(s.reshape({1, 1}).shape() == Shape{1, 1});
}

TEST_CASE("reshape is a view that shares storage", "[tensor][view]") {
  Tensor t = test_util::iota({2, 3});
  Tensor v = t.reshape({3, 2});
  CHECK(v.shape() == Shape{3, 2});
  CHECK(v.shares_storage_with(t));
  t.data<float>()[4] = 42;
  CHECK(v.data<float>()[4] == 42);
  REQUIRE_VALUES(v, {0, 1, 2, 3, 42, 5});
  v.data<float>()[0] = -1;
  REQUIRE_VALUES(t, {-1, 1, 2, 3, 42, 5});
  CHECK(t.flatten().shape() == Shape{6});
  CHECK(t.flatten().shares_storage_with(t));
}

TEST_CASE("reshape infers a single -1 extent", "[tensor][view]") {
  const Tensor t = test_util::iota({12});
  CHECK(t.reshape({-1, 4}).shape() == Shape{3, 4});
  CHECK(t.reshape({2, -1, 3}).shape() == Shape{2, 2, 3});
  CHECK(t.reshape({-1}).shape() == Shape{12});
  CHECK(t.reshape({1, -1, 1}).shape() == Shape{1, 12, 1});
  REQUIRE_VALUES(t.reshape({-1, 6}), test_util::values(t));
  CHECK(zeros({0, 3}).reshape({-1, 3}).shape() == Shape{0, 3});
}

TEST_CASE("bad reshapes throw", "[tensor][view]") {
  const Tensor t = test_util::iota({2, 3});
  CHECK_THROWS_WITH(t.reshape({5}), Contains("reshape") && Contains("[5]"));
  CHECK_THROWS_AS(t.reshape({4, 2}), Error);
  CHECK_THROWS_AS(t.reshape({-1, -1}), Error);
  CHECK_THROWS_AS(t.reshape({-1, 4}), Error);
  CHECK_THROWS_AS(t.reshape({-2, -3}), Error);
  CHECK_THROWS_AS(Tensor().reshape({1}), Error);
}

TEST_CASE("slice_rows is a view of rows of the first axis", "[tensor][view]") {
  Tensor t = test_util::iota({4, 3});
  Tensor s = t.slice_rows(1, 3);
  CHECK(s.shape() == Shape{2, 3});
  CHECK(s.numel() == 6);
  CHECK(s.storage_offset() == 3);
  CHECK(s.shares_storage_with(t));
  REQUIRE_VALUES(s, {3, 4, 5, 6, 7, 8});
  s.data<float>()[0] = -1;
  CHECK(t.data<float>()[3] == -1);
  t.data<float>()[8] = 100;
  CHECK(s.to_vector<float>()[5] == 100);
  // A view of a view keeps the accumulated offset.
  REQUIRE_VALUES(s.slice_rows(1, 2), {6, 7, 100});
  CHECK(t.slice_rows(2, 2).shape() == Shape{0, 3});
  CHECK_THROWS_WITH(t.slice_rows(2, 5), Contains("slice_rows"));
  CHECK_THROWS_AS(t.slice_rows(3, 1), Error);
  CHECK_THROWS_AS(t.slice_rows(-1, 2), Error);
  CHECK_THROWS_AS(scalar_tensor(1).slice_rows(0, 1), Error);
}

TEST_CASE("slice_flat views consecutive elements in any shape", "[tensor][view]") {
  Tensor t = test_util::iota({4, 3});
  const Tensor rows = t.slice_rows(1, 4);  // offset 3
  Tensor s = rows.slice_flat(2, {2, 2});   // elements 5..8 of t
  CHECK(s.shape() == Shape{2, 2});
  CHECK(s.numel() == 4);
  CHECK(s.storage_offset() == 5);
  CHECK(s.shares_storage_with(t));
  REQUIRE_VALUES(s, {5, 6, 7, 8});
  s.data<float>()[3] = -8;
  CHECK(t.data<float>()[8] == -8);
  CHECK(t.slice_flat(12, {0, 5}).numel() == 0);
  CHECK(t.slice_flat(0, {}).shape() == Shape{});  // a scalar: element 0
  CHECK_THROWS_WITH(rows.slice_flat(7, {3}), Contains("slice_flat") && Contains("[7, 10)") && Contains("f32[3, 3]"));
  CHECK_THROWS_AS(t.slice_flat(-1, {2}), Error);
  CHECK_THROWS_AS(Tensor().slice_flat(0, {1}), Error);
  // A named shape (copied) and a moved one view the same elements.
  const Shape shape{3, 1};
  Shape moved = shape;
  const Tensor copied_view = t.slice_flat(1, shape), moved_view = t.slice_flat(1, std::move(moved));
  CHECK(shape == Shape{3, 1});
  CHECK(copied_view.shape() == shape);
  CHECK(moved_view.shape() == shape);
  CHECK(moved_view.storage_offset() == 1);
  REQUIRE_VALUES(moved_view, {1, 2, 3});
  Shape too_long{13};
  CHECK_THROWS_WITH(t.slice_flat(0, std::move(too_long)), Contains("[0, 13)"));
}

TEST_CASE("clone copies rather than shares", "[tensor]") {
  Tensor t = test_util::iota({2, 3});
  Tensor c = t.clone();
  CHECK_FALSE(c.shares_storage_with(t));
  CHECK(c.shape() == t.shape());
  c.data<float>()[0] = 99;
  CHECK(t.data<float>()[0] == 0);
  // Cloning a view copies only the view's elements.
  Tensor row = t.slice_rows(1, 2).clone();
  CHECK(row.storage_offset() == 0);
  REQUIRE_VALUES(row, {3, 4, 5});

  Tensor dst = zeros({2, 3});
  dst.copy_(t);
  REQUIRE_VALUES(dst, {0, 1, 2, 3, 4, 5});
  CHECK_THROWS_AS(dst.copy_(zeros({3, 2})), Error);
  CHECK_THROWS_AS(dst.copy_(zeros({2, 3}, DType::f64)), Error);
}

TEST_CASE("to(dtype) converts element values", "[tensor][dtype]") {
  const Tensor f = from_vector<float>({-2.7f, -0.5f, 0.0f, 0.5f, 2.9f, 3.0f});
  const Tensor i = f.to(DType::i32);
  CHECK(i.dtype() == DType::i32);
  CHECK(i.to_vector<std::int32_t>() == std::vector<std::int32_t>{-2, 0, 0, 0, 2, 3});  // truncation
  const Tensor b = f.to(DType::boolean);
  CHECK(b.dtype() == DType::boolean);
  CHECK(b.to_vector<bool>() == std::vector<bool>{true, true, false, true, true, true});
  REQUIRE_VALUES(b.to(DType::f32), {1, 1, 0, 1, 1, 1});
  REQUIRE_VALUES(from_vector<std::int64_t>({-3, 5}).to(DType::f64), {-3, 5});
  REQUIRE_VALUES(from_vector<double>({0.1, 1e10}).to(DType::f32), {0.1f, 1e10f});
  CHECK(from_vector<double>({0.1}).to(DType::f32).to_vector<float>()[0] == 0.1f);
  // Same dtype: the tensor itself, not a copy.
  CHECK(f.to(DType::f32).shares_storage_with(f));
  CHECK_FALSE(i.shares_storage_with(f));
  CHECK(f.to(Device::cpu()).shares_storage_with(f));
}

TEST_CASE("to_vector converts to the requested element type", "[tensor][dtype]") {
  const Tensor i = from_vector<std::int32_t>({-3, 0, 7}, {3});
  CHECK(i.to_vector<double>() == std::vector<double>{-3, 0, 7});
  CHECK(i.to_vector<bool>() == std::vector<bool>{true, false, true});
  const Tensor f = from_vector<float>({1.9f, -1.9f}, {2});
  CHECK(f.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, -1});
  CHECK(zeros({0}).to_vector<float>().empty());
  CHECK(test_util::iota({2, 2}).slice_rows(1, 2).to_vector<float>() == std::vector<float>{2, 3});
}

TEST_CASE("item needs exactly one element", "[tensor]") {
  CHECK(full({1, 1}, -4.5).item() == -4.5);
  CHECK(from_vector<std::int64_t>({12}).item() == 12);
  CHECK(from_vector<bool>({true}, {1}).item() == 1);
  CHECK_THROWS_WITH(zeros({2}).item(), Contains("item") && Contains("f32[2]"));
  CHECK_THROWS_AS(zeros({0}).item(), Error);
  CHECK_THROWS_AS(Tensor().item(), Error);
}

TEST_CASE("zero-sized tensors pass through operations", "[tensor][empty]") {
  const Tensor z = zeros({0, 3});
  CHECK(z.numel() == 0);
  CHECK(z.nbytes() == 0);
  CHECK(z.defined());
  CHECK((z + ones({3})).shape() == Shape{0, 3});
  CHECK((z * 2.0).shape() == Shape{0, 3});
  CHECK(exp(z).shape() == Shape{0, 3});
  CHECK(less(z, 1.0).dtype() == DType::boolean);
  CHECK(z.clone().shape() == Shape{0, 3});
  CHECK(z.to(DType::i32).shape() == Shape{0, 3});
  CHECK(sum(z).item() == 0);
  REQUIRE_VALUES(sum(z, {0}), {0, 0, 0});
  CHECK(sum(z, {1}).shape() == Shape{0});
  CHECK(max(z, {1}).shape() == Shape{0});
  CHECK(matmul(z, ones({3, 2})).shape() == Shape{0, 2});
  CHECK(transpose(z).shape() == Shape{3, 0});
  CHECK(broadcast_to(z, {4, 0, 3}).shape() == Shape{4, 0, 3});
  const Tensor joined = concat({z, ones({2, 3})});
  CHECK(joined.shape() == Shape{2, 3});
  REQUIRE_VALUES(joined, {1, 1, 1, 1, 1, 1});
  CHECK(index(z, {Index::all(), Index::at(1)}).shape() == Shape{0});
  CHECK(where(less(z, 0.0), z, z).shape() == Shape{0, 3});
}

TEST_CASE("data<T>() checks the element type", "[tensor][dtype]") {
  Tensor f = zeros({2});
  CHECK_THROWS_WITH(f.data<double>(), Contains("f64") && Contains("f32[2]"));
  CHECK_THROWS_AS(f.data<std::int32_t>(), Error);
  CHECK_THROWS_AS(f.data<bool>(), Error);
  const Tensor& cf = f;
  CHECK_THROWS_AS(cf.data<double>(), Error);
  CHECK_NOTHROW(f.data<float>());
  Tensor l = zeros({2}, DType::i64);
  CHECK_THROWS_AS(l.data<std::int32_t>(), Error);
  CHECK(l.data<std::int64_t>()[1] == 0);
  CHECK_THROWS_AS(Tensor().raw_data(), Error);
}

TEST_CASE("description names dtype and shape", "[tensor][print]") {
  CHECK(zeros({2, 3}).description() == "f32[2, 3]");
  CHECK(scalar_tensor(1, DType::f64).description() == "f64[]");
  CHECK(zeros({0}, DType::i32).description() == "i32[0]");
  CHECK(zeros({1, 2, 1}, DType::i64).description() == "i64[1, 2, 1]");
  CHECK(zeros({4}, DType::boolean).description() == "bool[4]");
  CHECK(Tensor().description() == "undefined tensor");
  CHECK(std::string(dtype_name(DType::boolean)) == "bool");
  CHECK(dtype_size(DType::f64) == 8);
  CHECK(shape_str({}) == "[]");
}

TEST_CASE("operator<< prints dtype, shape and leading values", "[tensor][print]") {
  std::ostringstream small;
  small << from_vector<float>({1, 2.5f, -3}, {3});
  CHECK(small.str() == "Tensor(f32[3], [1, 2.5, -3])");

  std::ostringstream ints;
  ints << from_vector<std::int32_t>({4, 5}, {1, 2});
  CHECK(ints.str() == "Tensor(i32[1, 2], [4, 5])");

  std::ostringstream big;
  big << arange(20, DType::i64);
  CHECK(big.str() == "Tensor(i64[20], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, ...])");

  std::ostringstream undefined;
  undefined << Tensor();
  CHECK(undefined.str() == "Tensor(undefined tensor)");
}

TEST_CASE("pin_memory: a host copy, page-locked only where an allocator can pin it", "[tensor][pinned]") {
  const Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  // No pinned allocator here (a CPU build, or no GPU): ordinary memory, a real copy.
  register_pinned_host_allocator(PinnedHostAllocator{});
  const Tensor plain = x.pin_memory();
  REQUIRE_FALSE(plain.is_pinned());
  REQUIRE(plain.device() == Device::cpu());
  REQUIRE_FALSE(plain.shares_storage_with(x));
  REQUIRE(plain.to_vector<float>() == x.to_vector<float>());

  // With one registered (what the CUDA backend does), the storage comes from it and goes back to
  // it; an allocator that cannot serve (returns nullptr) falls back to ordinary memory.
  static int allocations = 0, frees = 0;
  static bool refuse = false;
  register_pinned_host_allocator(PinnedHostAllocator{
      [](std::size_t n) -> void* { return refuse ? nullptr : (++allocations, std::malloc(n)); },
      [](void* p) noexcept { ++frees, std::free(p); }});
  {
    const Tensor pinned = x.pin_memory();
    REQUIRE(pinned.is_pinned());
    REQUIRE(pinned.to_vector<float>() == x.to_vector<float>());
    REQUIRE((pinned * 2.0f).to_vector<float>() == std::vector<float>{2, 4, 6, 8, 10, 12});
    const Tensor view = pinned.reshape({3, 2});
    REQUIRE(view.is_pinned());
    const Tensor empty = empty_pinned({0, 4}, DType::i64);
    REQUIRE((empty.is_pinned() && empty.shape() == Shape{0, 4} && empty.dtype() == DType::i64));
    REQUIRE(allocations == 2);
  }
  REQUIRE(frees == 2);
  refuse = true;
  REQUIRE_FALSE(x.pin_memory().is_pinned());
  register_pinned_host_allocator(PinnedHostAllocator{});
  REQUIRE_THROWS_WITH(empty_pinned({-1, 2}), Catch::Contains("empty_pinned"));
}
