// Row gather and scatter-add (the kernels behind embeddings) on cuda:0 against the CPU: ids of
// both integer types and any shape, every table dtype, repeated ids, ignore_label inside and
// outside the table, empty ids, and a deterministic scatter-add of heavily repeated ids.
#include <catch2/catch.hpp>

#include <optional>

#include "core/ops/indexing.h"
#include "tests/cuda/gpu_test_util.h"

using namespace tandem;
using namespace gpu_test;
using Catch::Matchers::Contains;

namespace {

const std::vector<DType> kTableDtypes = {DType::f32, DType::f64, DType::i32, DType::i64};

Tensor ids_tensor(const std::vector<std::int64_t>& ids, const Shape& shape, DType dtype) {
  return from_vector<std::int64_t>(ids, shape).to(dtype);
}

Tensor table_of(const Shape& shape, std::uint64_t seed, DType dtype) {
  return is_floating(dtype) ? uniform(shape, seed, -1, 1, dtype) : random_ints(shape, seed, -100, 100, dtype);
}

TensorOp gather(std::optional<std::int64_t> ignore = std::nullopt) {
  return [ignore](std::vector<Tensor>& v) { return std::vector<Tensor>{take_rows(v[0], v[1], ignore)}; };
}

TensorOp scatter_add(std::optional<std::int64_t> ignore = std::nullopt) {
  return [ignore](std::vector<Tensor>& v) {
    index_add_rows_(v[0], v[1], v[2], ignore);
    return std::vector<Tensor>{};
  };
}

}  // namespace

TEST_CASE("take_rows gathers rows for ids of any shape, every dtype", "[indexing][take_rows]") {
  const std::vector<std::int64_t> ids = {4, 0, 2, 2, 1, 4};
  for (DType id_dtype : {DType::i32, DType::i64}) {
    for (DType dtype : kTableDtypes) {
      INFO("ids " << dtype_name(id_dtype) << ", table " << dtype_name(dtype));
      const Tensor table = table_of({5, 3}, 1, dtype);
      check_op(gather(), {table, ids_tensor(ids, {6}, id_dtype)}, kExact);
      check_op(gather(), {table, ids_tensor(ids, {2, 3}, id_dtype)}, kExact);
      check_op(gather(), {table, ids_tensor({3}, {}, id_dtype)}, kExact);  // a scalar id: one row [D]
    }
  }
  // Empty ids, a zero-width table, one-column and wide tables, many ids.
  check_op(gather(), {uniform({4, 2}, 2), ids_tensor({}, {0}, DType::i64)}, kExact);
  check_op(gather(), {zeros({4, 0}), ids_tensor({1, 2}, {2}, DType::i32)}, kExact);
  check_op(gather(), {uniform({1000, 1}, 3), random_ints({5000}, 4, 0, 999, DType::i64)}, kExact);
  check_op(gather(), {uniform({100, 4099}, 5), random_ints({300}, 6, 0, 99, DType::i32)}, kExact);
  check_op(gather(), {uniform({1000, 256}, 7), random_ints({64, 25}, 8, 0, 999, DType::i32)}, kExact);
  // A table that is a view with an offset.
  check_op([](std::vector<Tensor>& v) { return std::vector<Tensor>{take_rows(v[0].slice_rows(2, 7), v[1])}; },
           {uniform({9, 4}, 9), ids_tensor({0, 4, 1}, {3}, DType::i64)}, kExact);
}

TEST_CASE("take_rows with an ignore_label gives zero rows", "[indexing][take_rows][ignore]") {
  for (DType id_dtype : {DType::i32, DType::i64}) {
    // Outside the table (Chainer's -1) and inside it (a padding id).
    check_op(gather(-1), {uniform({4, 3}, 10, 1, 2), ids_tensor({1, -1, 3, -1}, {4}, id_dtype)}, kExact);
    check_op(gather(0), {uniform({4, 3}, 11, 1, 2), ids_tensor({0, 2, 0, 3}, {2, 2}, id_dtype)}, kExact);
    check_op(gather(-1), {uniform({50, 70}, 12), random_ints({40, 30}, 13, -1, 49, id_dtype)}, kExact);
  }
}

TEST_CASE("index_add_rows_ accumulates repeated ids", "[indexing][index_add_rows]") {
  const std::vector<std::int64_t> ids = {1, 3, 1, 1, 0, 3};
  for (DType id_dtype : {DType::i32, DType::i64}) {
    for (DType dtype : kTableDtypes) {
      INFO("ids " << dtype_name(id_dtype) << ", table " << dtype_name(dtype));
      check_op(scatter_add(), {table_of({4, 3}, 20, dtype), ids_tensor(ids, {2, 3}, id_dtype), table_of({2, 3, 3}, 21, dtype)},
               for_dtype(dtype, 1e-6, 1e-15));
    }
  }
  // Ignored ids are skipped, wherever the ignore_label lies.
  check_op(scatter_add(-1), {zeros({3, 2}, DType::f64), ids_tensor({2, -1, 2, 0}, {4}, DType::i64),
                             uniform({4, 2}, 22, -1, 1, DType::f64)},
           near(1e-15));
  check_op(scatter_add(2), {zeros({3, 2}, DType::f64), ids_tensor({2, 1, 2, 0}, {4}, DType::i32),
                            uniform({4, 2}, 23, -1, 1, DType::f64)},
           near(1e-15));
  // Empty ids change nothing.
  check_op(scatter_add(), {uniform({3, 2}, 24), ids_tensor({}, {0}, DType::i64), zeros({0, 2})}, kExact);
}

TEST_CASE("index_add_rows_ over heavily repeated ids: close to the CPU and reproducible", "[indexing][index_add_rows]") {
  // 4000 ids over 7 rows, 300 columns (an embedding gradient of a small vocabulary).
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 4000; ++i) ids.push_back((i * 5 + i / 3) % 7);
  const Tensor id_t = ids_tensor(ids, {4000}, DType::i32);
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    const Tensor base = uniform({7, 300}, 30, -1, 1, dtype), src = uniform({4000, 300}, 31, -1, 1, dtype);
    // ~570 terms per element, in some order.
    check_op(scatter_add(), {base, id_t, src}, for_dtype(dtype, Tolerance{1e-5, 2e-5}, near(1e-13)));
    // Deterministic: the same bits on every run (no order-dependent atomics).
    Tensor a = base.to(gpu()), b = base.to(gpu());
    const Tensor ids_dev = id_t.to(gpu()), src_dev = src.to(gpu());
    index_add_rows_(a, ids_dev, src_dev);
    index_add_rows_(b, ids_dev, src_dev);
    REQUIRE(same_bytes(a, b));
  }
  // Exactly representable data: every order gives the same sum, so the GPU must equal the CPU.
  check_op(scatter_add(), {quarters({7, 300}, 32), id_t, quarters({4000, 300}, 33)}, kExact);
  // Integers are exact, a large vocabulary with few repeats too.
  check_op(scatter_add(), {random_ints({7, 300}, 34, -9, 9, DType::i64), id_t.to(DType::i64),
                           random_ints({4000, 300}, 35, -9, 9, DType::i64)},
           kExact);
  check_op(scatter_add(-1), {zeros({10000, 64}), random_ints({20000}, 36, -1, 9999, DType::i64),
                             quarters({20000, 64}, 37)},
           kExact);
}

TEST_CASE("bad ids are reported before anything is written", "[indexing][errors]") {
  const Tensor table = uniform({5, 2}, 40);
  CHECK_THAT(require_same_error(gather(), {table, ids_tensor({0, 5}, {2}, DType::i64)}),
             Contains("take_rows") && Contains("id 5") && Contains("[0, 5)"));
  CHECK_THAT(require_same_error(gather(-1), {table, ids_tensor({-1, 7}, {2}, DType::i32)}), Contains("id 7"));
  CHECK_THAT(require_same_error(gather(), {table, ids_tensor({-2, 1}, {2}, DType::i32)}), Contains("id -2"));
  Tensor dev = zeros({3, 2}, DType::f64, gpu());
  CHECK_THROWS_WITH(index_add_rows_(dev, ids_tensor({0, 3}, {2}, DType::i64).to(gpu()), ones({2, 2}, DType::f64, gpu())),
                    Contains("index_add_rows_") && Contains("id 3"));
  REQUIRE_GPU_MATCHES(dev, zeros({3, 2}, DType::f64), kExact);  // nothing was added
  CHECK_THROWS_WITH(take_rows(table.to(gpu()), from_vector<float>({0, 1}).to(gpu())), Contains("i32 or i64"));
}
