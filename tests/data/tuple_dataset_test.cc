// TupleDataset: views for single examples, gathers for batches, validation.
#include <catch2/catch.hpp>

#include <memory>

#include "core/ops.h"
#include "data/tuple_dataset.h"

using namespace tandem;

namespace {

// x: f32[6, 2, 3] with x[i] = 6 i + (0 .. 5); y: i32[6] with y[i] = 100 + i.
TupleDataset make_dataset() {
  Tensor x = arange(0, 36, 1, DType::f32).reshape({6, 2, 3});
  Tensor y = arange(100, 106, 1, DType::i32);
  return TupleDataset({x, y});
}

std::vector<float> row_values(std::int64_t i) {
  std::vector<float> v;
  for (int k = 0; k < 6; ++k) v.push_back(static_cast<float>(6 * i + k));
  return v;
}

}  // namespace

TEST_CASE("TupleDataset::get returns views without the leading axis") {
  TupleDataset ds = make_dataset();
  REQUIRE(ds.size() == 6);
  REQUIRE(ds.num_fields() == 2);
  const Example e = ds.get(4);
  REQUIRE(e.size() == 2);
  REQUIRE(e[0].shape() == Shape{2, 3});
  REQUIRE(e[0].dtype() == DType::f32);
  REQUIRE(e[0].to_vector<float>() == row_values(4));
  REQUIRE(e[1].shape() == Shape{});
  REQUIRE(e[1].dtype() == DType::i32);
  REQUIRE(e[1].item() == 104);
  // No copy: the example shares storage with the field, and sees writes to it.
  REQUIRE(e[0].shares_storage_with(ds.fields()[0]));
  REQUIRE(e[1].shares_storage_with(ds.fields()[1]));
  Tensor field = ds.fields()[0];
  field.data<float>()[4 * 6 + 1] = -7;
  REQUIRE(e[0].to_vector<float>()[1] == -7);
}

TEST_CASE("TupleDataset::get_batch gathers rows, one copy per field") {
  TupleDataset ds = make_dataset();
  // Runs (2, 3, 4), a repeat, a backwards step and a single row.
  const std::vector<std::int64_t> indices{2, 3, 4, 4, 0, 5, 1};
  const Example b = ds.get_batch(indices);
  REQUIRE(b.size() == 2);
  REQUIRE(b[0].shape() == Shape{7, 2, 3});
  REQUIRE(b[1].shape() == Shape{7});
  std::vector<float> want_x;
  std::vector<std::int32_t> want_y;
  for (std::int64_t i : indices) {
    const auto r = row_values(i);
    want_x.insert(want_x.end(), r.begin(), r.end());
    want_y.push_back(static_cast<std::int32_t>(100 + i));
  }
  REQUIRE(b[0].to_vector<float>() == want_x);
  REQUIRE(b[1].to_vector<std::int32_t>() == want_y);
  REQUIRE_FALSE(b[0].shares_storage_with(ds.fields()[0]));
  REQUIRE_FALSE(b[1].shares_storage_with(ds.fields()[1]));

  // The whole dataset in order is one contiguous run.
  const Example all = ds.get_batch({0, 1, 2, 3, 4, 5});
  REQUIRE(all[0].to_vector<float>() == ds.fields()[0].to_vector<float>());
  REQUIRE(all[1].to_vector<std::int32_t>() == ds.fields()[1].to_vector<std::int32_t>());

  const Example none = ds.get_batch({});
  REQUIRE(none[0].shape() == Shape{0, 2, 3});
  REQUIRE(none[1].shape() == Shape{0});
}

TEST_CASE("TupleDataset works on views with an offset and on zero-width rows") {
  // A field that is itself a view starting mid-storage.
  Tensor base = arange(0, 20, 1, DType::f64).reshape({10, 2});
  Tensor x = base.slice_rows(3, 8);  // rows 3..7
  Tensor empty_rows = zeros({5, 0});
  TupleDataset ds({x, empty_rows});
  REQUIRE(ds.get(1)[0].to_vector<double>() == std::vector<double>{8, 9});
  const Example b = ds.get_batch({4, 0});
  REQUIRE(b[0].to_vector<double>() == std::vector<double>{14, 15, 6, 7});
  REQUIRE(b[1].shape() == Shape{2, 0});
}

TEST_CASE("TupleDataset errors") {
  REQUIRE_THROWS_WITH(TupleDataset({}), Catch::Contains("at least one field"));
  REQUIRE_THROWS_WITH(TupleDataset({zeros({3, 2}), zeros({4}, DType::i32)}),
                      Catch::Contains("f32[3, 2]") && Catch::Contains("i32[4]") && Catch::Contains("same length"));
  REQUIRE_THROWS_WITH(TupleDataset({scalar_tensor(1)}), Catch::Contains("f32[]"));
  REQUIRE_THROWS_WITH(TupleDataset({Tensor()}), Catch::Contains("field 0"));
  TupleDataset ds = make_dataset();
  REQUIRE_THROWS_WITH(ds.get(6), Catch::Contains("TupleDataset::get") && Catch::Contains("index 6") &&
                                     Catch::Contains("size 6"));
  REQUIRE_THROWS_WITH(ds.get_batch({1, -2}), Catch::Contains("index -2") && Catch::Contains("size 6"));
}
