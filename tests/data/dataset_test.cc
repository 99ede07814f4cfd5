// The Dataset interface's default get_batch (stacking get(i)) and index checks.
#include <catch2/catch.hpp>

#include <memory>

#include "core/ops.h"
#include "data/dataset.h"

using namespace tandem;

namespace {

// Example i: {x = [i, 10 i] (f32), y = i (i64, 0-d)}; counts get() calls.
class Computed : public Dataset {
 public:
  explicit Computed(std::int64_t n) : n_(n) {}
  std::int64_t size() const override { return n_; }
  Example get(std::int64_t i) const override {
    check_index(i, "Computed::get");
    ++calls;
    const float v = static_cast<float>(i);
    return {from_vector<float>({v, 10 * v}, {2}), from_vector<std::int64_t>({i}, {})};
  }
  mutable int calls = 0;

 private:
  std::int64_t n_;
};

}  // namespace

TEST_CASE("Dataset::get_batch stacks get(i) field by field by default") {
  Computed ds(5);
  const Example batch = ds.get_batch({3, 0, 3});
  REQUIRE(batch.size() == 2);
  REQUIRE(batch[0].shape() == Shape{3, 2});
  REQUIRE(batch[0].dtype() == DType::f32);
  REQUIRE(batch[0].to_vector<float>() == std::vector<float>{3, 30, 0, 0, 3, 30});
  REQUIRE(batch[1].shape() == Shape{3});
  REQUIRE(batch[1].to_vector<std::int64_t>() == std::vector<std::int64_t>{3, 0, 3});
  REQUIRE(ds.calls == 3);
}

TEST_CASE("Dataset::get_batch of no indices gives batch-axis-0 tensors") {
  Computed ds(2);
  const Example batch = ds.get_batch({});
  REQUIRE(batch.size() == 2);
  REQUIRE(batch[0].shape() == Shape{0, 2});
  REQUIRE(batch[1].shape() == Shape{0});
  REQUIRE(batch[1].dtype() == DType::i64);
  Computed empty(0);
  REQUIRE_THROWS_WITH(empty.get_batch({}), Catch::Contains("empty dataset"));
}

TEST_CASE("Dataset index errors name the index and the size") {
  Computed ds(4);
  REQUIRE_THROWS_AS(ds.get(4), Error);
  REQUIRE_THROWS_WITH(ds.get(4), Catch::Contains("index 4") && Catch::Contains("size 4"));
  REQUIRE_THROWS_WITH(ds.get(-1), Catch::Contains("index -1") && Catch::Contains("size 4"));
  REQUIRE_THROWS_WITH(ds.get_batch({0, 7}), Catch::Contains("get_batch") && Catch::Contains("index 7") &&
                                                Catch::Contains("size 4"));
}
