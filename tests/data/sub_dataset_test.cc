// SubDataset, split_dataset, split_dataset_random and cross-validation splits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <set>

#include "core/ops.h"
#include "data/sub_dataset.h"
#include "data/tuple_dataset.h"

using namespace tandem;

namespace {

// Example i is {i} (i64, 0-d) so that values identify base indices.
std::shared_ptr<TupleDataset> numbered(std::int64_t n) {
  return std::make_shared<TupleDataset>(std::vector<Tensor>{arange(n)});
}

std::vector<std::int64_t> all_values(const Dataset& ds) {
  std::vector<std::int64_t> v;
  for (std::int64_t i = 0; i < ds.size(); ++i) v.push_back(static_cast<std::int64_t>(ds.get(i)[0].item()));
  return v;
}

}  // namespace

TEST_CASE("SubDataset selects a range, optionally through an order") {
  auto base = numbered(10);
  SubDataset plain(base, 2, 6);
  REQUIRE(plain.size() == 4);
  REQUIRE(all_values(plain) == std::vector<std::int64_t>{2, 3, 4, 5});
  const std::vector<std::int64_t> order{9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  SubDataset reordered(base, 1, 4, order);
  REQUIRE(all_values(reordered) == std::vector<std::int64_t>{8, 7, 6});
  REQUIRE(reordered.get_batch({2, 0}).at(0).to_vector<std::int64_t>() == std::vector<std::int64_t>{6, 8});
  REQUIRE(SubDataset(base, 3, 3).size() == 0);
  // A subset of a subset.
  auto inner = std::make_shared<SubDataset>(base, 2, 8);
  SubDataset nested(inner, 1, 3);
  REQUIRE(all_values(nested) == std::vector<std::int64_t>{3, 4});
}

TEST_CASE("SubDataset errors") {
  auto base = numbered(5);
  REQUIRE_THROWS_WITH(SubDataset(base, 2, 6), Catch::Contains("[2, 6)") && Catch::Contains("size 5"));
  REQUIRE_THROWS_WITH(SubDataset(base, -1, 3), Catch::Contains("[-1, 3)"));
  REQUIRE_THROWS_WITH(SubDataset(base, 3, 2), Catch::Contains("[3, 2)"));
  REQUIRE_THROWS_WITH(SubDataset(base, 0, 2, {0, 1, 2}), Catch::Contains("3 entries") && Catch::Contains("5"));
  REQUIRE_THROWS_WITH(SubDataset(base, 0, 2, {0, 1, 2, 3, 5}), Catch::Contains("order[4] = 5"));
  REQUIRE_THROWS_AS(SubDataset(nullptr, 0, 0), Error);
  SubDataset sub(base, 1, 3);
  REQUIRE_THROWS_WITH(sub.get(2), Catch::Contains("index 2") && Catch::Contains("size 2"));
  REQUIRE_THROWS_WITH(sub.get_batch({0, 5}), Catch::Contains("index 5") && Catch::Contains("size 2"));
}

TEST_CASE("split_dataset") {
  auto base = numbered(7);
  auto [a, b] = split_dataset(base, 3);
  REQUIRE(all_values(*a) == std::vector<std::int64_t>{0, 1, 2});
  REQUIRE(all_values(*b) == std::vector<std::int64_t>{3, 4, 5, 6});
  auto [c, d] = split_dataset(base, 2, {6, 5, 4, 3, 2, 1, 0});
  REQUIRE(all_values(*c) == std::vector<std::int64_t>{6, 5});
  REQUIRE(all_values(*d) == std::vector<std::int64_t>{4, 3, 2, 1, 0});
  REQUIRE(split_dataset(base, 0).first->size() == 0);
  REQUIRE(split_dataset(base, 7).second->size() == 0);
  REQUIRE_THROWS_WITH(split_dataset(base, 8), Catch::Contains("first_size 8") && Catch::Contains("size 7"));
  REQUIRE_THROWS_WITH(split_dataset(base, -1), Catch::Contains("first_size -1"));
}

TEST_CASE("split_dataset_random: disjoint, covering, deterministic for a seed") {
  auto base = numbered(100);
  auto [a, b] = split_dataset_random(base, 30, 1234);
  REQUIRE(a->size() == 30);
  REQUIRE(b->size() == 70);
  std::vector<std::int64_t> va = all_values(*a), vb = all_values(*b);
  std::set<std::int64_t> all(va.begin(), va.end());
  all.insert(vb.begin(), vb.end());
  REQUIRE(all.size() == 100);  // disjoint and covering
  REQUIRE(*all.begin() == 0);
  REQUIRE(*all.rbegin() == 99);
  REQUIRE(!std::is_sorted(va.begin(), va.end()));  // actually shuffled

  auto [a2, b2] = split_dataset_random(base, 30, 1234);
  REQUIRE(all_values(*a2) == va);
  REQUIRE(all_values(*b2) == vb);
  auto [a3, b3] = split_dataset_random(base, 30, 4321);
  REQUIRE(all_values(*a3) != va);

  // Without a seed: reproducible through tandem::manual_seed.
  manual_seed(5);
  auto r1 = split_dataset_random(base, 50).first;
  manual_seed(5);
  auto r2 = split_dataset_random(base, 50).first;
  REQUIRE(all_values(*r1) == all_values(*r2));

  REQUIRE_THROWS_WITH(split_dataset_random(base, 101, 0), Catch::Contains("first_size 101"));
}

TEST_CASE("get_cross_validation_datasets: validation folds partition the dataset") {
  auto base = numbered(10);
  const auto splits = get_cross_validation_datasets(base, 3);
  REQUIRE(splits.size() == 3);
  std::multiset<std::int64_t> validation;
  std::vector<std::int64_t> sizes;
  for (const auto& [train, valid] : splits) {
    REQUIRE(train->size() + valid->size() == 10);
    auto vt = all_values(*train), vv = all_values(*valid);
    std::set<std::int64_t> both(vt.begin(), vt.end());
    both.insert(vv.begin(), vv.end());
    REQUIRE(both.size() == 10);  // train and validation are complementary
    validation.insert(vv.begin(), vv.end());
    sizes.push_back(valid->size());
  }
  REQUIRE(validation.size() == 10);
  REQUIRE(std::set<std::int64_t>(validation.begin(), validation.end()).size() == 10);
  std::sort(sizes.begin(), sizes.end());
  REQUIRE(sizes == std::vector<std::int64_t>{3, 3, 4});
  // As Chainer: the first split validates on the last fold.
  REQUIRE(all_values(*splits[0].second) == std::vector<std::int64_t>{6, 7, 8, 9});

  const auto r1 = get_cross_validation_datasets_random(base, 2, 9);
  const auto r2 = get_cross_validation_datasets_random(base, 2, 9);
  REQUIRE(all_values(*r1[1].second) == all_values(*r2[1].second));
  REQUIRE_THROWS_WITH(get_cross_validation_datasets(base, 11), Catch::Contains("n_folds 11"));
  REQUIRE_THROWS_WITH(get_cross_validation_datasets(base, 0), Catch::Contains("n_folds 0"));
}
