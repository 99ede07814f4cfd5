// Row gather and scatter-add (core/ops/indexing.h) against naive loops.
#include <catch2/catch.hpp>

#include <optional>

#include "core/ops.h"
#include "core/ops/indexing.h"
#include "tests/core/test_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using test_util::uniform;
using test_util::values;

namespace {

// table[ids[s], :] per position s, zero rows for the ignored id.
std::vector<double> naive_take(const Tensor& table, const std::vector<std::int64_t>& ids,
                               std::optional<std::int64_t> ignore = std::nullopt) {
  const std::vector<double> t = values(table);
  const std::int64_t D = table.size(1);
  std::vector<double> out;
  for (std::int64_t id : ids)
    for (std::int64_t d = 0; d < D; ++d) out.push_back(ignore && id == *ignore ? 0.0 : t[id * D + d]);
  return out;
}

// table + scatter of src rows, accumulated in id order.
std::vector<double> naive_add(const Tensor& table, const std::vector<std::int64_t>& ids, const Tensor& src,
                              std::optional<std::int64_t> ignore = std::nullopt) {
  std::vector<double> out = values(table);
  const std::vector<double> s = values(src);
  const std::int64_t D = table.size(1);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ignore && ids[i] == *ignore) continue;
    for (std::int64_t d = 0; d < D; ++d) out[ids[i] * D + d] += s[i * D + d];
  }
  return out;
}

Tensor ids_tensor(const std::vector<std::int64_t>& ids, const Shape& shape, DType dtype) {
  return from_vector<std::int64_t>(ids, shape).to(dtype);
}

}  // namespace

TEST_CASE("take_rows gathers rows for ids of any shape", "[indexing]") {
  for (DType id_dtype : {DType::i32, DType::i64}) {
    for (DType dtype : {DType::f32, DType::f64, DType::i32}) {
      INFO("ids " << id_dtype << ", table " << dtype);
      const Tensor table = test_util::iota({5, 3}, dtype);
      const std::vector<std::int64_t> ids = {4, 0, 2, 2, 1, 4};
      const Tensor flat = take_rows(table, ids_tensor(ids, {6}, id_dtype));
      REQUIRE(flat.shape() == Shape{6, 3});
      REQUIRE(flat.dtype() == dtype);
      REQUIRE_VALUES(flat, naive_take(table, ids));
      const Tensor shaped = take_rows(table, ids_tensor(ids, {2, 3}, id_dtype));
      REQUIRE(shaped.shape() == Shape{2, 3, 3});
      REQUIRE_VALUES(shaped, naive_take(table, ids));
      // A scalar id gives one row of shape [D].
      const Tensor one = take_rows(table, ids_tensor({3}, {}, id_dtype));
      REQUIRE(one.shape() == Shape{3});
      REQUIRE_VALUES(one, {9, 10, 11});
    }
  }
  SECTION("empty ids and zero-width tables") {
    const Tensor table = uniform({4, 2}, 1);
    REQUIRE(take_rows(table, ids_tensor({}, {0}, DType::i64)).shape() == Shape{0, 2});
    REQUIRE(take_rows(zeros({4, 0}), ids_tensor({1, 2}, {2}, DType::i32)).shape() == Shape{2, 0});
  }
  SECTION("large enough to run on several threads") {
    const Tensor table = uniform({100, 257}, 2);
    std::vector<std::int64_t> ids;
    for (int i = 0; i < 3000; ++i) ids.push_back((i * 37) % 100);
    REQUIRE_VALUES(take_rows(table, ids_tensor(ids, {3000}, DType::i64)), naive_take(table, ids));
  }
}

TEST_CASE("take_rows with an ignore_label gives zero rows", "[indexing]") {
  const Tensor table = uniform({4, 3}, 3, 1, 2);
  const std::vector<std::int64_t> outside = {1, -1, 3, -1};
  REQUIRE_VALUES(take_rows(table, ids_tensor(outside, {4}, DType::i32), -1), naive_take(table, outside, -1));
  // An ignore_label inside [0, V) also zeroes its rows (a padding id).
  const std::vector<std::int64_t> inside = {0, 2, 0, 3};
  REQUIRE_VALUES(take_rows(table, ids_tensor(inside, {2, 2}, DType::i64), 0), naive_take(table, inside, 0));
}

TEST_CASE("take_rows rejects bad ids and tables", "[indexing][errors]") {
  const Tensor table = uniform({5, 2}, 4);
  SECTION("an id outside [0, V) names the op, the id and V") {
    REQUIRE_THROWS_AS(take_rows(table, ids_tensor({0, 5}, {2}, DType::i64)), Error);
    REQUIRE_THROWS_WITH(take_rows(table, ids_tensor({0, 5}, {2}, DType::i64)),
                        Contains("take_rows") && Contains("id 5") && Contains("[0, 5)") && Contains("position 1"));
    REQUIRE_THROWS_WITH(take_rows(table, ids_tensor({-2, 1}, {2}, DType::i32)), Contains("id -2"));
    REQUIRE_THROWS_WITH(take_rows(table, ids_tensor({-1, 7}, {2}, DType::i32), -1),
                        Contains("id 7") && Contains("ignore_label -1"));
    REQUIRE_THROWS_WITH(take_rows(table, ids_tensor({9}, {1}, DType::i32), std::nullopt, "embed_id"),
                        Contains("embed_id: id 9"));
  }
  SECTION("ids that are not integers, tables that are not 2-D") {
    REQUIRE_THROWS_WITH(take_rows(table, from_vector<float>({0, 1})), Contains("i32 or i64") && Contains("f32"));
    REQUIRE_THROWS_WITH(take_rows(uniform({5}, 5), ids_tensor({0}, {1}, DType::i64)), Contains("2-D"));
    REQUIRE_THROWS_AS(take_rows(Tensor(), ids_tensor({0}, {1}, DType::i64)), Error);
  }
}

TEST_CASE("take_rows_trusted gathers as take_rows does, still checking shapes, dtypes and devices",
          "[indexing]") {
  const Tensor table = uniform({5, 3}, 21);
  const Tensor ids = from_vector<std::int64_t>({4, 0, 0, 2}, {2, 2});
  CHECK(values(take_rows_trusted(table, ids, "my_op")) == values(take_rows(table, ids)));
  CHECK(take_rows_trusted(table, ids, "my_op").shape() == Shape{2, 2, 3});
  CHECK_THROWS_WITH(take_rows_trusted(table, from_vector<double>({0.0}), "my_op"), Contains("my_op"));
  CHECK_THROWS_WITH(take_rows_trusted(ones({5}), ids, "my_op"), Contains("my_op") && Contains("2-D"));
}

TEST_CASE("index_add_rows_ accumulates repeated ids", "[indexing]") {
  for (DType id_dtype : {DType::i32, DType::i64}) {
    for (DType dtype : {DType::f64, DType::i64}) {
      INFO("ids " << id_dtype << ", table " << dtype);
      const Tensor base = test_util::iota({4, 3}, dtype);
      const std::vector<std::int64_t> ids = {1, 3, 1, 1, 0, 3};
      const Tensor src = test_util::iota({2, 3, 3}, dtype);
      Tensor table = base.clone();
      index_add_rows_(table, ids_tensor(ids, {2, 3}, id_dtype), src);
      REQUIRE_VALUES(table, naive_add(base, ids, src));
    }
  }
  SECTION("ignored ids are skipped") {
    const Tensor base = zeros({3, 2}, DType::f64);
    const std::vector<std::int64_t> ids = {2, -1, 2, 0};
    const Tensor src = uniform({4, 2}, 6, -1, 1, DType::f64);
    Tensor table = base.clone();
    index_add_rows_(table, ids_tensor(ids, {4}, DType::i64), src, -1);
    REQUIRE_VALUES(table, naive_add(base, ids, src, -1), 1e-15, 1e-15);
  }
  SECTION("many repeats on several threads: the same sums, every run") {
    // 300 columns split into 19 column blocks; 4000 ids over 7 rows repeat constantly.
    const Tensor base = uniform({7, 300}, 7, -1, 1, DType::f64);
    std::vector<std::int64_t> ids;
    for (int i = 0; i < 4000; ++i) ids.push_back((i * 5 + i / 3) % 7);
    const Tensor src = uniform({4000, 300}, 8, -1, 1, DType::f64);
    const Tensor id_t = ids_tensor(ids, {4000}, DType::i32);
    Tensor a = base.clone(), b = base.clone();
    index_add_rows_(a, id_t, src);
    index_add_rows_(b, id_t, src);
    REQUIRE_VALUES(a, naive_add(base, ids, src), 1e-12, 1e-12);
    REQUIRE_VALUES(a, values(b));  // bitwise reproducible
    // f32: accumulated per column in id order, so exactly the sequential float sums.
    const Tensor base32 = base.to(DType::f32), src32 = src.to(DType::f32);
    Tensor c = base32.clone();
    index_add_rows_(c, id_t, src32);
    std::vector<float> want = base32.to_vector<float>();
    const std::vector<float> s = src32.to_vector<float>();
    for (std::size_t i = 0; i < ids.size(); ++i)
      for (int d = 0; d < 300; ++d) want[ids[i] * 300 + d] += s[i * 300 + d];
    REQUIRE(c.to_vector<float>() == want);
  }
}

TEST_CASE("index_add_rows_ rejects bad ids and shapes before writing", "[indexing][errors]") {
  Tensor table = zeros({3, 2}, DType::f64);
  const Tensor src = ones({2, 2}, DType::f64);
  REQUIRE_THROWS_WITH(index_add_rows_(table, ids_tensor({0, 3}, {2}, DType::i64), src),
                      Contains("index_add_rows_") && Contains("id 3") && Contains("[0, 3)"));
  REQUIRE_VALUES(table, {0, 0, 0, 0, 0, 0});  // nothing was added
  REQUIRE_THROWS_WITH(index_add_rows_(table, ids_tensor({0, 1, 2}, {3}, DType::i64), src),
                      Contains("[2, 2]") && Contains("[3, 2]"));
  REQUIRE_THROWS_WITH(index_add_rows_(table, ids_tensor({0, 1}, {2}, DType::i64), ones({2, 2}, DType::f32)),
                      Contains("dtypes"));
  REQUIRE_THROWS_WITH(index_add_rows_(table, from_vector<double>({0, 1}), src), Contains("i32 or i64"));
}
