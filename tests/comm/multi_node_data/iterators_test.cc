// The multi-node iterator (the master's batches on every rank) and the synchronized iterator
// (the same order on every rank, each its own data) on several ranks.
#include <catch2/catch.hpp>

#include "comm/transport/communicator.h"
#include "comm/multi_node_data/multi_node_iterator.h"
#include "comm/multi_node_data/synchronized_iterator.h"
#include "data/iterator.h"
#include "tests/comm/multi_node_data/test_datasets.h"

using namespace tandem;
using Catch::Matchers::Contains;
using comm_data_test::numbered;

namespace {

Communicator& world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return *comm;
}

std::vector<std::int64_t> ids(const Example& batch) { return batch.at(0).to_vector<std::int64_t>(); }

// Every rank's values of `values`, compared with rank 0's.
void require_same_on_every_rank(Communicator& comm, const std::vector<double>& values) {
  const auto all = comm.allgather(from_vector(values));
  for (const Tensor& t : all) REQUIRE(t.to_vector<double>() == all[0].to_vector<double>());
}

std::vector<double> counters(const Iterator& it) {
  return {static_cast<double>(it.epoch()), it.epoch_detail(), it.previous_epoch_detail().value_or(-1),
          static_cast<double>(it.is_new_epoch()), static_cast<double>(it.has_next())};
}

// The batch equals the reference batch field by field (dtype, shape, values), and the counters
// equal the reference's; then the same checks across ranks.
void require_batch(Communicator& comm, const Example& batch, const Iterator& it, const Example& want,
                   const Iterator& reference) {
  REQUIRE(batch.size() == want.size());
  for (std::size_t f = 0; f < batch.size(); ++f) {
    REQUIRE(batch[f].dtype() == want[f].dtype());
    REQUIRE(batch[f].shape() == want[f].shape());
    REQUIRE(batch[f].to_vector<double>() == want[f].to_vector<double>());
  }
  REQUIRE(counters(it) == counters(reference));
  std::vector<double> seen = counters(it);
  for (double id : batch[0].to_vector<double>()) seen.push_back(id);
  require_same_on_every_rank(comm, seen);
}

}  // namespace

TEST_CASE("multi-node iterator, repeating and shuffled: every rank gets the master's batches and counters") {
  Communicator& comm = world();
  auto dataset = numbered(10);
  // Only the master's iterator counts: rank 1 passes none, rank 2 an unrelated one.
  std::shared_ptr<Iterator> actual;
  if (comm.rank() == 0) actual = std::make_shared<SerialIterator>(dataset, 4, true, true, 3);
  if (comm.rank() == 2) actual = std::make_shared<SerialIterator>(numbered(5), 2);
  auto it = create_multi_node_iterator(actual, comm);
  REQUIRE(it->is_master() == (comm.rank() == 0));
  SerialIterator reference(dataset, 4, true, true, 3);
  REQUIRE(it->has_next());
  REQUIRE_FALSE(it->previous_epoch_detail().has_value());
  for (int k = 0; k < 13; ++k) {  // 5.2 epochs, batches crossing epoch boundaries
    INFO("batch " << k);
    const Example batch = it->next();
    require_batch(comm, batch, *it, reference.next(), reference);
  }
  REQUIRE(it->epoch() == 5);
}

TEST_CASE("multi-node iterator without repeat: the end of data reaches every rank at once") {
  Communicator& comm = world();
  const int master = comm.size() - 1;
  auto dataset = numbered(10);
  for (bool shuffle : {false, true}) {
    INFO("shuffle = " << shuffle);
    auto it = create_multi_node_iterator(
        comm.rank() == master ? std::make_shared<SerialIterator>(dataset, 4, false, shuffle, 9) : nullptr, comm,
        master);
    SerialIterator reference(dataset, 4, false, shuffle, 9);
    std::vector<std::size_t> sizes;
    while (it->has_next()) {
      const Example batch = it->next();
      sizes.push_back(batch[0].numel());
      require_batch(comm, batch, *it, reference.next(), reference);
    }
    REQUIRE(sizes == std::vector<std::size_t>{4, 4, 2});
    REQUIRE(it->epoch() == 1);
    REQUIRE(it->epoch_detail() == 1.0);
    REQUIRE(it->is_new_epoch());
    REQUIRE_THROWS_AS(it->next(), StopIteration);
    REQUIRE_THROWS_AS(it->next(), StopIteration);
    // reset() starts again everywhere.
    it->reset();
    reference.reset();
    REQUIRE(it->has_next());
    REQUIRE(it->epoch() == 0);
    const Example batch = it->next();
    require_batch(comm, batch, *it, reference.next(), reference);
  }
}

TEST_CASE("multi-node iterator state() and restore(): the master's state is the truth") {
  Communicator& comm = world();
  auto dataset = numbered(7);
  auto it = create_multi_node_iterator(
      comm.rank() == 0 ? std::make_shared<SerialIterator>(dataset, 3, true, true, 8) : nullptr, comm);
  for (int k = 0; k < 4; ++k) it->next();  // into the second epoch
  const IteratorState saved = it->state();
  // The other ranks mirror the master's counters.
  require_same_on_every_rank(comm, {static_cast<double>(saved.epoch), static_cast<double>(saved.position),
                                    static_cast<double>(saved.is_new_epoch), saved.previous_epoch_detail});
  REQUIRE(saved.epoch == 1);
  REQUIRE(saved.position == 5);
  std::vector<std::vector<std::int64_t>> after;
  std::vector<std::vector<double>> after_counters;
  for (int k = 0; k < 3; ++k) {
    after.push_back(ids(it->next()));
    after_counters.push_back(counters(*it));
  }
  // Back to the saved point: every rank passes its own saved state; only the master's is used.
  it->restore(saved);
  REQUIRE(it->epoch() == 1);
  for (int k = 0; k < 3; ++k) {
    REQUIRE(ids(it->next()) == after[k]);
    REQUIRE(counters(*it) == after_counters[k]);
  }
  // Resuming in a new job: a fresh iterator (with another seed) restored from the snapshot.
  auto resumed = create_multi_node_iterator(
      comm.rank() == 0 ? std::make_shared<SerialIterator>(dataset, 3, true, true, 1) : nullptr, comm);
  resumed->restore(saved);
  for (int k = 0; k < 3; ++k) REQUIRE(ids(resumed->next()) == after[k]);
}

TEST_CASE("multi-node iterator: the master's failures become errors on every rank") {
  Communicator& comm = world();
  REQUIRE_THROWS_WITH(create_multi_node_iterator(nullptr, comm), Contains("null iterator"));
  REQUIRE_THROWS_WITH(create_multi_node_iterator(nullptr, comm, comm.size()), Contains("rank_master"));
  auto it = create_multi_node_iterator(
      comm.rank() == 0 ? std::make_shared<SerialIterator>(numbered(6), 2, true, false) : nullptr, comm);
  it->next();
  IteratorState bad;
  bad.position = 1000;
  REQUIRE_THROWS_WITH(it->restore(bad), Contains("position 1000"));
  // Nothing changed, and the ranks are still in step.
  REQUIRE(it->epoch_detail() == Approx(2.0 / 6));
  REQUIRE(ids(it->next()) == std::vector<std::int64_t>{2, 3});
}

TEST_CASE("multi-node iterator on a one-rank communicator is the actual iterator") {
  Communicator& comm = world();
  auto self = comm.split(comm.rank(), 0);
  auto dataset = numbered(5);
  auto it = create_multi_node_iterator(std::make_shared<SerialIterator>(dataset, 2, false, true, 4), *self);
  SerialIterator reference(dataset, 2, false, true, 4);
  while (reference.has_next()) {
    REQUIRE(it->has_next());
    REQUIRE(ids(it->next()) == ids(reference.next()));
    REQUIRE(counters(*it) == counters(reference));
  }
  REQUIRE_FALSE(it->has_next());
}

TEST_CASE("synchronized iterator: the same order on every rank, each reading its own data") {
  Communicator& comm = world();
  const std::int64_t offset = 1000 * comm.rank();
  auto own = numbered(11, offset);  // rank r's example i has id 1000 r + i
  auto positions = [&](const Example& batch) {
    std::vector<double> out;
    for (std::int64_t id : ids(batch)) out.push_back(static_cast<double>(id - offset));
    return out;
  };

  SECTION("from an existing SerialIterator, whatever its seed") {
    auto it = create_synchronized_iterator(std::make_shared<SerialIterator>(own, 3, true, true, 100 + comm.rank()),
                                           comm);
    std::vector<double> stream;
    for (int k = 0; k < 12; ++k) {
      const auto p = positions(it->next());
      require_same_on_every_rank(comm, p);
      require_same_on_every_rank(comm, counters(*it));
      stream.insert(stream.end(), p.begin(), p.end());
    }
    std::vector<double> unshuffled;
    for (int k = 0; k < 12 * 3; ++k) unshuffled.push_back(k % 11);
    REQUIRE(stream != unshuffled);
    // state() and restore() are the SerialIterator's own, and keep the ranks in step.
    const IteratorState saved = it->state();
    const auto next = positions(it->next());
    it->next();
    it->restore(saved);
    REQUIRE(positions(it->next()) == next);
    require_same_on_every_rank(comm, positions(it->next()));
  }

  SECTION("from a dataset, with rank 0's seed") {
    auto it = create_synchronized_iterator(own, 4, comm, true, true, comm.rank() == 0 ? 7 : 70 + comm.rank());
    SerialIterator reference(own, 4, true, true, 7);
    for (int k = 0; k < 6; ++k) {
      const Example batch = it->next();
      REQUIRE(ids(batch) == ids(reference.next()));
      require_same_on_every_rank(comm, positions(batch));
    }
  }

  SECTION("datasets of different lengths are an error on every rank") {
    auto mine = comm.rank() == 1 ? numbered(10) : own;
    REQUIRE_THROWS_WITH(create_synchronized_iterator(mine, 4, comm), Contains("disagree on the dataset's length"));
    REQUIRE_THROWS_WITH(create_synchronized_iterator(own, 3 + comm.rank(), comm), Contains("batch_size"));
    REQUIRE_THROWS_WITH(
        create_synchronized_iterator(comm.rank() == 0 ? nullptr : std::make_shared<SerialIterator>(own, 2), comm),
        Contains("rank 0: null"));
  }
}
