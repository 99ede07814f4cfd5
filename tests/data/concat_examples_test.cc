// concat_examples: field-wise stacking, padding, device, and errors naming the example.
#include <catch2/catch.hpp>

#include "core/ops.h"
#include "data/concat_examples.h"

using namespace tandem;

namespace {

Example example(float a, std::int32_t label) {
  return {from_vector<float>({a, a + 1, a + 2}, {3}), from_vector<std::int32_t>({label}, {})};
}

}  // namespace

TEST_CASE("concat_examples stacks each field with a leading batch axis") {
  const Example batch = concat_examples({example(0, 7), example(10, 8), example(20, 9)});
  REQUIRE(batch.size() == 2);
  REQUIRE(batch[0].shape() == Shape{3, 3});
  REQUIRE(batch[0].to_vector<float>() == std::vector<float>{0, 1, 2, 10, 11, 12, 20, 21, 22});
  REQUIRE(batch[1].shape() == Shape{3});
  REQUIRE(batch[1].dtype() == DType::i32);
  REQUIRE(batch[1].to_vector<std::int32_t>() == std::vector<std::int32_t>{7, 8, 9});

  // A single example gets a batch axis of 1; the result is a copy.
  const Example one = example(5, 1);
  const Example single = concat_examples({one});
  REQUIRE(single[0].shape() == Shape{1, 3});
  REQUIRE_FALSE(single[0].shares_storage_with(one[0]));

  // Views with offsets stack correctly.
  Tensor base = arange(0, 12, 1, DType::f64).reshape({4, 3});
  const Example views = concat_examples({{base.slice_rows(2, 3)}, {base.slice_rows(0, 1)}});
  REQUIRE(views[0].shape() == Shape{2, 1, 3});
  REQUIRE(views[0].to_vector<double>() == std::vector<double>{6, 7, 8, 0, 1, 2});

  // An explicit (here: the same) device.
  REQUIRE(concat_examples({example(1, 2)}, Device::cpu())[0].device() == Device::cpu());
}

TEST_CASE("concat_examples with padding pads every axis to the largest extent") {
  const Example a{from_vector<std::int32_t>({1, 2, 3}, {3}), from_vector<float>({1, 2}, {1, 2})};
  const Example b{from_vector<std::int32_t>({4}, {1}), from_vector<float>({3, 4, 5, 6}, {2, 2})};
  const Example batch = concat_examples({a, b}, std::nullopt, -1.0);
  REQUIRE(batch[0].shape() == Shape{2, 3});
  REQUIRE(batch[0].to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 2, 3, 4, -1, -1});
  REQUIRE(batch[1].shape() == Shape{2, 2, 2});
  REQUIRE(batch[1].to_vector<float>() == std::vector<float>{1, 2, -1, -1, 3, 4, 5, 6});
  // Padding still needs the same number of axes.
  REQUIRE_THROWS_WITH(concat_examples({a, {zeros({2, 2}, DType::i32), a[1]}}, std::nullopt, 0.0),
                      Catch::Contains("field 0 of example 1") && Catch::Contains("number of axes"));
}

TEST_CASE("concat_examples errors name the example and the field") {
  REQUIRE_THROWS_WITH(concat_examples({}), Catch::Contains("concat_examples") && Catch::Contains("empty"));
  REQUIRE_THROWS_WITH(concat_examples({example(0, 0), example(1, 1), {zeros({3})}}),
                      Catch::Contains("example 2 has 1 field(s)") && Catch::Contains("example 0 has 2"));
  REQUIRE_THROWS_WITH(concat_examples({example(0, 0), {zeros({4}), zeros({}, DType::i32)}}),
                      Catch::Contains("field 0 of example 1 is f32[4]") && Catch::Contains("f32[3]"));
  REQUIRE_THROWS_WITH(concat_examples({example(0, 0), example(1, 1), {zeros({3}), zeros({}, DType::i64)}}),
                      Catch::Contains("field 1 of example 2 is i64[]") && Catch::Contains("i32[]"));
  REQUIRE_THROWS_WITH(concat_examples({{Tensor()}}), Catch::Contains("field 0 of example 0 is undefined"));
  REQUIRE_THROWS_WITH(concat_examples({{}}), Catch::Contains("example 0 has no fields"));
  REQUIRE_THROWS_AS(concat_examples({example(0, 0), {zeros({3}), Tensor()}}), Error);
}
