// The parts of comm/multi_node_data that need no communicator: the split arithmetic and empty datasets.
#include <catch2/catch.hpp>

#include <algorithm>

#include "comm/multi_node_data/empty_dataset.h"
#include "comm/multi_node_data/scatter_dataset.h"
#include "data/iterator.h"
#include "data/sub_dataset.h"
#include "tests/comm/multi_node_data/test_datasets.h"

using namespace tandem;
using Catch::Matchers::Contains;

TEST_CASE("scatter_index_ranges: equal lengths cover the dataset with fewer than size repeats") {
  for (std::int64_t n = 0; n <= 25; ++n) {
    for (int size = 1; size <= 6; ++size) {
      INFO("n = " << n << ", size = " << size);
      const auto ranges = scatter_index_ranges(n, size);
      REQUIRE(ranges.size() == static_cast<std::size_t>(size));
      std::vector<int> seen(static_cast<std::size_t>(n), 0);
      for (const IndexRange& r : ranges) {
        REQUIRE(r.size() == (n + size - 1) / size);
        REQUIRE(0 <= r.begin);
        REQUIRE(r.end <= n);
        for (std::int64_t i = r.begin; i < r.end; ++i) ++seen[i];
      }
      REQUIRE(ranges.back().end == n);
      REQUIRE(std::count(seen.begin(), seen.end(), 0) == 0);
      std::int64_t repeats = 0;
      for (int c : seen) repeats += c - 1;
      REQUIRE(repeats < size);
    }
  }
  // ChainerMN's windows: 10 examples over 3 ranks.
  REQUIRE(scatter_index_ranges(10, 3) == std::vector<IndexRange>{{0, 4}, {3, 7}, {6, 10}});
}

TEST_CASE("scatter_index_ranges: without equal lengths, contiguous disjoint shares differing by at most one") {
  for (std::int64_t n = 0; n <= 25; ++n) {
    for (int size = 1; size <= 6; ++size) {
      INFO("n = " << n << ", size = " << size);
      const auto ranges = scatter_index_ranges(n, size, false);
      std::int64_t next = 0;
      for (int r = 0; r < size; ++r) {
        REQUIRE(ranges[r].begin == next);
        REQUIRE(ranges[r].size() == n / size + (r < n % size ? 1 : 0));
        next = ranges[r].end;
      }
      REQUIRE(next == n);
    }
  }
  REQUIRE(scatter_index_ranges(10, 3, false) == std::vector<IndexRange>{{0, 4}, {4, 7}, {7, 10}});
  REQUIRE_THROWS_WITH(scatter_index_ranges(-1, 2), Contains("non-negative"));
  REQUIRE_THROWS_WITH(scatter_index_ranges(4, 0), Contains("size must be positive"));
}

TEST_CASE("create_empty_dataset: the same length, examples without fields, the source untouched") {
  auto source = comm_data_test::numbered(7);
  auto empty = create_empty_dataset(source);
  REQUIRE(empty->size() == 7);
  REQUIRE(empty->get(0).empty());
  REQUIRE(empty->get(6).empty());
  REQUIRE(empty->get_batch({0, 3, 3, 6}).empty());
  REQUIRE(empty->get_batch({}).empty());
  REQUIRE_THROWS_WITH(empty->get(7), Contains("out of range"));
  REQUIRE_THROWS_WITH(empty->get_batch({1, -1}), Contains("out of range"));
  // It does not hold the source.
  REQUIRE(source.use_count() == 1);
  // A view of it behaves the same.
  SubDataset half(empty, 2, 5);
  REQUIRE(half.get_batch({0, 2}).empty());
  // Iterating it gives the counters of iterating the source, batch for batch.
  SerialIterator real(source, 3, true, true, 11), none(empty, 3, true, true, 11);
  for (int k = 0; k < 8; ++k) {
    REQUIRE(real.next_indices() == none.next_indices());
    REQUIRE(none.epoch() == real.epoch());
    REQUIRE(none.epoch_detail() == real.epoch_detail());
    REQUIRE(none.is_new_epoch() == real.is_new_epoch());
  }
  REQUIRE(create_empty_dataset(comm_data_test::numbered(0))->size() == 0);
  REQUIRE_THROWS_WITH(create_empty_dataset(nullptr), Contains("null"));
}
