// SerialIterator against Chainer's semantics: epochs, wrap-around, shuffling, stopping, state.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "core/ops.h"
#include "data/iterator.h"
#include "data/tuple_dataset.h"

using namespace tandem;

namespace {

// Example i is {i (i64, 0-d), 2 i (f32, [2])}.
std::shared_ptr<TupleDataset> numbered(std::int64_t n) {
  Tensor x = arange(n);
  Tensor y = arange(0, 2.0 * n, 1, DType::f32).reshape({n, 2});
  return std::make_shared<TupleDataset>(std::vector<Tensor>{x, y});
}

}  // namespace

TEST_CASE("SerialIterator without shuffle: Chainer's epoch_detail sequence, wrap-around batches") {
  SerialIterator it(numbered(10), 4, /*repeat=*/true, /*shuffle=*/false);
  REQUIRE(it.epoch() == 0);
  REQUIRE(it.epoch_detail() == 0.0);
  REQUIRE_FALSE(it.previous_epoch_detail().has_value());
  REQUIRE_FALSE(it.is_new_epoch());
  REQUIRE(it.has_next());

  struct Step {
    std::vector<std::int64_t> indices;
    std::int64_t epoch;
    bool is_new_epoch;
    double detail;
    std::int64_t position;
  };
  // Chainer: 10 examples in batches of 4.
  const std::vector<Step> steps{
      {{0, 1, 2, 3}, 0, false, 0.4, 4}, {{4, 5, 6, 7}, 0, false, 0.8, 8}, {{8, 9, 0, 1}, 1, true, 1.2, 2},
      {{2, 3, 4, 5}, 1, false, 1.6, 6}, {{6, 7, 8, 9}, 2, true, 2.0, 0},  {{0, 1, 2, 3}, 2, false, 2.4, 4},
      {{4, 5, 6, 7}, 2, false, 2.8, 8}, {{8, 9, 0, 1}, 3, true, 3.2, 2},
  };
  double previous = 0;
  for (const Step& s : steps) {
    REQUIRE(it.next_indices() == s.indices);
    REQUIRE(it.epoch() == s.epoch);
    REQUIRE(it.is_new_epoch() == s.is_new_epoch);
    REQUIRE(it.epoch_detail() == Approx(s.detail));
    REQUIRE(it.current_position() == s.position);
    REQUIRE(it.previous_epoch_detail().value() == Approx(previous));
    previous = s.detail;
  }
}

TEST_CASE("SerialIterator::next returns stacked batches") {
  SerialIterator it(numbered(5), 3, true, false);
  Example b = it.next();
  REQUIRE(b.size() == 2);
  REQUIRE(b[0].shape() == Shape{3});
  REQUIRE(b[0].to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2});
  REQUIRE(b[1].shape() == Shape{3, 2});
  REQUIRE(b[1].to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
  b = it.next();  // wraps: 3, 4, 0
  REQUIRE(b[0].to_vector<std::int64_t>() == std::vector<std::int64_t>{3, 4, 0});
  REQUIRE(b[1].to_vector<float>() == std::vector<float>{6, 7, 8, 9, 0, 1});
}

TEST_CASE("SerialIterator with a batch larger than the dataset spans several epochs") {
  SerialIterator it(numbered(3), 7, true, false);
  REQUIRE(it.next_indices() == std::vector<std::int64_t>{0, 1, 2, 0, 1, 2, 0});
  REQUIRE(it.epoch() == 2);
  REQUIRE(it.is_new_epoch());
  REQUIRE(it.epoch_detail() == Approx(7.0 / 3));

  SerialIterator once(numbered(3), 7, false, true, 1);
  const auto all = once.next_indices();
  REQUIRE(std::set<std::int64_t>(all.begin(), all.end()).size() == 3);
  REQUIRE(all.size() == 3);
  REQUIRE_FALSE(once.has_next());
}

TEST_CASE("SerialIterator with shuffle serves every example exactly once per epoch") {
  const std::int64_t n = 10, batch = 4;
  SerialIterator it(numbered(n), batch, true, true, 42);
  // Over 6 epochs (15 batches of 4 = 60 = 6 * 10), batches span epoch boundaries; split the
  // stream of indices into epochs of n and check each is a permutation.
  std::vector<std::int64_t> stream;
  std::vector<std::vector<std::int64_t>> epoch_orders;
  for (int k = 0; k < 15; ++k) {
    const auto indices = it.next_indices();
    REQUIRE(indices.size() == static_cast<std::size_t>(batch));
    stream.insert(stream.end(), indices.begin(), indices.end());
    REQUIRE(it.epoch_detail() == Approx(0.4 * (k + 1)));
    REQUIRE(it.epoch() == (4 * (k + 1)) / 10);
    REQUIRE(it.is_new_epoch() == ((4 * k) / 10 != (4 * (k + 1)) / 10));
  }
  for (int e = 0; e < 6; ++e) {
    std::vector<std::int64_t> epoch(stream.begin() + e * n, stream.begin() + (e + 1) * n);
    epoch_orders.push_back(epoch);
    std::sort(epoch.begin(), epoch.end());
    for (std::int64_t i = 0; i < n; ++i) REQUIRE(epoch[i] == i);
  }
  // Reshuffled each epoch, not the identity.
  REQUIRE(epoch_orders[0] != epoch_orders[1]);
  std::vector<std::int64_t> identity(n);
  for (std::int64_t i = 0; i < n; ++i) identity[i] = i;
  REQUIRE((epoch_orders[0] != identity || epoch_orders[1] != identity));

  // Each batch's values match its indices.
  SerialIterator fetch(numbered(n), batch, true, true, 42);
  Example b = fetch.next();
  REQUIRE(b[0].to_vector<std::int64_t>() == std::vector<std::int64_t>(stream.begin(), stream.begin() + 4));
}

TEST_CASE("SerialIterator: same seed, same order; different seed, different order") {
  auto ds = numbered(50);
  SerialIterator a(ds, 8, true, true, 7), b(ds, 8, true, true, 7), c(ds, 8, true, true, 8);
  std::vector<std::int64_t> sa, sb, sc;
  for (int k = 0; k < 20; ++k) {
    auto ia = a.next_indices(), ib = b.next_indices(), ic = c.next_indices();
    sa.insert(sa.end(), ia.begin(), ia.end());
    sb.insert(sb.end(), ib.begin(), ib.end());
    sc.insert(sc.end(), ic.begin(), ic.end());
  }
  REQUIRE(sa == sb);
  REQUIRE(sa != sc);
  // Without a seed: reproducible through tandem::manual_seed.
  manual_seed(3);
  SerialIterator d(ds, 8);
  manual_seed(3);
  SerialIterator e(ds, 8);
  REQUIRE(d.next_indices() == e.next_indices());
}

TEST_CASE("SerialIterator with repeat=false: short last batch, then StopIteration") {
  SerialIterator it(numbered(10), 4, /*repeat=*/false, /*shuffle=*/false);
  REQUIRE(it.next_indices() == std::vector<std::int64_t>{0, 1, 2, 3});
  REQUIRE(it.epoch_detail() == Approx(0.4));
  REQUIRE(it.next_indices() == std::vector<std::int64_t>{4, 5, 6, 7});
  REQUIRE(it.has_next());
  const Example last = it.next();
  REQUIRE(last[0].to_vector<std::int64_t>() == std::vector<std::int64_t>{8, 9});
  REQUIRE(last[1].shape() == Shape{2, 2});
  REQUIRE(it.epoch() == 1);
  REQUIRE(it.is_new_epoch());
  REQUIRE(it.epoch_detail() == Approx(1.0));
  REQUIRE(it.current_position() == 0);
  REQUIRE_FALSE(it.has_next());
  REQUIRE_THROWS_AS(it.next(), StopIteration);
  REQUIRE_THROWS_AS(it.next_indices(), Error);  // StopIteration is a tandem::Error
  REQUIRE_THROWS_WITH(it.next(), Catch::Contains("repeat = false") && Catch::Contains("reset()"));
  // reset() starts over.
  it.reset();
  REQUIRE(it.has_next());
  REQUIRE(it.epoch() == 0);
  REQUIRE_FALSE(it.previous_epoch_detail().has_value());
  REQUIRE(it.next_indices() == std::vector<std::int64_t>{0, 1, 2, 3});

  // Shuffled, one epoch covers everything once; a batch dividing the size ends exactly.
  SerialIterator shuffled(numbered(12), 4, false, true, 5);
  std::multiset<std::int64_t> seen;
  int batches = 0;
  while (shuffled.has_next()) {
    const auto indices = shuffled.next_indices();
    REQUIRE(indices.size() == 4);
    seen.insert(indices.begin(), indices.end());
    ++batches;
  }
  REQUIRE(batches == 3);
  REQUIRE(std::set<std::int64_t>(seen.begin(), seen.end()).size() == 12);
  REQUIRE(seen.size() == 12);
  REQUIRE_THROWS_AS(shuffled.next(), StopIteration);

  // An empty dataset yields nothing without repeat, and cannot repeat.
  auto empty = std::make_shared<TupleDataset>(std::vector<Tensor>{zeros({0, 3})});
  SerialIterator none(empty, 2, false, true, 0);
  REQUIRE_FALSE(none.has_next());
  REQUIRE_THROWS_AS(none.next(), StopIteration);
  REQUIRE_THROWS_WITH(SerialIterator(empty, 2, true), Catch::Contains("empty"));
}

TEST_CASE("SerialIterator argument errors") {
  REQUIRE_THROWS_WITH(SerialIterator(numbered(3), 0), Catch::Contains("batch_size") && Catch::Contains("0"));
  REQUIRE_THROWS_WITH(SerialIterator(nullptr, 2), Catch::Contains("null"));
}

TEST_CASE("SerialIterator state()/restore() continues exactly") {
  auto ds = numbered(10);
  for (bool shuffle : {true, false}) {
    SerialIterator it(ds, 4, true, shuffle, 11);
    for (int k = 0; k < 3; ++k) it.next_indices();  // mid-epoch 1 (epoch_detail 1.2)
    const IteratorState saved = it.state();
    REQUIRE(saved.epoch == 1);
    REQUIRE(saved.position == 2);
    REQUIRE(saved.is_new_epoch);
    REQUIRE(saved.previous_epoch_detail == Approx(0.8));
    REQUIRE(saved.order.size() == (shuffle ? 10u : 0u));
    REQUIRE_FALSE(saved.rng.empty());

    std::vector<std::vector<std::int64_t>> want;
    for (int k = 0; k < 12; ++k) want.push_back(it.next_indices());  // through several reshuffles

    // A fresh iterator with another seed, restored, produces the same continuation.
    SerialIterator resumed(ds, 4, true, shuffle, 999);
    resumed.next_indices();
    resumed.restore(saved);
    REQUIRE(resumed.epoch() == 1);
    REQUIRE(resumed.current_position() == 2);
    REQUIRE(resumed.is_new_epoch());
    REQUIRE(resumed.epoch_detail() == Approx(1.2));
    REQUIRE(resumed.previous_epoch_detail().value() == Approx(0.8));
    for (int k = 0; k < 12; ++k) REQUIRE(resumed.next_indices() == want[k]);
    REQUIRE(resumed.state().rng == it.state().rng);

    // Restoring into the same iterator rewinds it.
    it.restore(saved);
    REQUIRE(it.next_indices() == want[0]);
  }
}

TEST_CASE("SerialIterator::restore validates the state and leaves the iterator unchanged on error") {
  auto ds = numbered(10);
  SerialIterator it(ds, 4, true, true, 1);
  it.next_indices();
  const IteratorState good = it.state();

  IteratorState bad = good;
  bad.order.pop_back();
  REQUIRE_THROWS_WITH(it.restore(bad), Catch::Contains("restore") && Catch::Contains("permutation"));
  bad = good;
  bad.order[0] = bad.order[1];
  REQUIRE_THROWS_WITH(it.restore(bad), Catch::Contains("permutation"));
  bad = good;
  bad.position = 10;
  REQUIRE_THROWS_WITH(it.restore(bad), Catch::Contains("position 10") && Catch::Contains("size 10"));
  bad = good;
  bad.epoch = -1;
  REQUIRE_THROWS_WITH(it.restore(bad), Catch::Contains("epoch"));
  bad = good;
  bad.rng = "not an engine";
  REQUIRE_THROWS_WITH(it.restore(bad), Catch::Contains("rng"));
  // The failed restores changed nothing.
  REQUIRE(it.state().order == good.order);
  REQUIRE(it.state().rng == good.rng);
  REQUIRE(it.current_position() == 4);

  SerialIterator ordered(ds, 4, true, false, 1);
  REQUIRE_THROWS_WITH(ordered.restore(good), Catch::Contains("does not shuffle"));
}
