// scatter_dataset and scatter_index on several ranks: what each rank gets, gathered and
// checked against the whole dataset, in both modes, shuffled and not; and the errors every
// rank must see together.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "comm/transport/communicator.h"
#include "comm/multi_node_data/empty_dataset.h"
#include "comm/multi_node_data/scatter_dataset.h"
#include "data/iterator.h"
#include "tests/comm/multi_node_data/test_datasets.h"

using namespace tandem;
using Catch::Matchers::Contains;
using comm_data_test::iota;
using comm_data_test::numbered;

namespace {

Communicator& world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return *comm;
}

// The ids of a share, read through the share (so from this rank's own copy of the data).
std::vector<std::int64_t> ids(const Dataset& share) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < share.size(); ++i) out.push_back(static_cast<std::int64_t>(share.get(i)[0].item()));
  return out;
}

// Every rank's ids, in rank order.
std::vector<std::vector<std::int64_t>> gather_ids(Communicator& comm, const Dataset& share) {
  std::vector<std::vector<std::int64_t>> all;
  for (const Tensor& t : comm.allgather(from_vector(ids(share)))) all.push_back(t.to_vector<std::int64_t>());
  return all;
}

std::vector<std::int64_t> joined(const std::vector<std::vector<std::int64_t>>& parts) {
  std::vector<std::int64_t> out;
  for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

}  // namespace

TEST_CASE("scatter_dataset with equal lengths: every rank ceil(n/size), together the whole dataset") {
  Communicator& comm = world();
  const int size = comm.size();
  for (std::int64_t n : {std::int64_t(1), std::int64_t(size - 1), std::int64_t(7), std::int64_t(10),
                         std::int64_t(3 * size)}) {
    INFO("n = " << n);
    auto dataset = numbered(n);
    auto share = scatter_dataset(dataset, comm);
    REQUIRE(share->base() == dataset);  // a view over this rank's own copy
    const IndexRange range = scatter_index(n, comm);
    REQUIRE(share->start() == range.begin);
    REQUIRE(share->finish() == range.end);
    const auto all = gather_ids(comm, *share);
    for (const auto& part : all) REQUIRE(static_cast<std::int64_t>(part.size()) == (n + size - 1) / size);
    const auto every = joined(all);
    const auto expected = iota(n);
    REQUIRE(std::set<std::int64_t>(every.begin(), every.end()) ==
            std::set<std::int64_t>(expected.begin(), expected.end()));
    REQUIRE(static_cast<std::int64_t>(every.size()) - n < size);  // fewer than size repeats
  }
}

TEST_CASE("scatter_dataset without force_equal_length: disjoint shares, sizes differ by at most one") {
  Communicator& comm = world();
  const int size = comm.size();
  for (std::int64_t n : {std::int64_t(1), std::int64_t(7), std::int64_t(10), std::int64_t(3 * size)}) {
    INFO("n = " << n);
    auto share = scatter_dataset(numbered(n), comm, 0, false, std::nullopt, false);
    const auto all = gather_ids(comm, *share);
    REQUIRE(joined(all) == iota(n));  // in rank order, each example once
    for (int r = 0; r < size; ++r)
      REQUIRE(static_cast<std::int64_t>(all[r].size()) == n / size + (r < n % size ? 1 : 0));
  }
}

TEST_CASE("scatter_dataset with shuffle: the root's seed decides, reproducibly, and it differs from no shuffle") {
  Communicator& comm = world();
  const std::int64_t n = 40;
  auto dataset = numbered(n);
  for (int root : {0, comm.size() - 1}) {
    INFO("root = " << root);
    // Only the root's seed counts: the other ranks pass a different one.
    const std::uint64_t seed = comm.rank() == root ? 5 : 99;
    const auto first = joined(gather_ids(comm, *scatter_dataset(dataset, comm, root, true, seed)));
    const auto again = joined(gather_ids(comm, *scatter_dataset(dataset, comm, root, true, 5)));
    const auto other = joined(gather_ids(comm, *scatter_dataset(dataset, comm, root, true, 6)));
    const auto plain = joined(gather_ids(comm, *scatter_dataset(dataset, comm, root, false)));
    REQUIRE(first == again);
    REQUIRE(first != other);
    REQUIRE(first != plain);
    REQUIRE(std::set<std::int64_t>(first.begin(), first.end()).size() == static_cast<std::size_t>(n));
    // Disjoint mode with a shuffle is a permutation of the dataset.
    auto exact = joined(gather_ids(comm, *scatter_dataset(dataset, comm, root, true, 5, false)));
    std::sort(exact.begin(), exact.end());
    REQUIRE(exact == iota(n));
  }
  // Without a seed the root draws one: every rank still gets a share of the same order.
  const auto drawn = joined(gather_ids(comm, *scatter_dataset(dataset, comm, 0, true, std::nullopt, false)));
  REQUIRE(std::set<std::int64_t>(drawn.begin(), drawn.end()).size() == static_cast<std::size_t>(n));
}

TEST_CASE("scatter_dataset of an empty dataset gives every rank an empty share") {
  Communicator& comm = world();
  auto empty = numbered(0);
  for (bool equal : {true, false}) {
    for (bool shuffle : {false, true}) {
      auto share = scatter_dataset(empty, comm, 0, shuffle, 1, equal);
      REQUIRE(share->size() == 0);
    }
    REQUIRE(scatter_index(0, comm, 0, equal).size() == 0);
  }
  // A non-repeating iterator over the empty share has nothing to serve.
  SerialIterator it(scatter_dataset(empty, comm), 4, false, false);
  REQUIRE_FALSE(it.has_next());
}

TEST_CASE("scatter_dataset errors reach every rank together") {
  Communicator& comm = world();
  const int last = comm.size() - 1;
  // A root that does not exist.
  REQUIRE_THROWS_WITH(scatter_dataset(numbered(4), comm, comm.size()), Contains("root") && Contains("does not exist"));
  REQUIRE_THROWS_WITH(scatter_index(4, comm, -1), Contains("does not exist"));
  // The last rank's dataset is shorter than the others'.
  REQUIRE_THROWS_WITH(scatter_dataset(numbered(comm.rank() == last ? 5 : 6), comm),
                      Contains("disagree on the dataset's length") && Contains("rank " + std::to_string(last) + ": 5"));
  // A rank without the dataset.
  REQUIRE_THROWS_WITH(scatter_dataset(comm.rank() == last ? nullptr : numbered(3), comm),
                      Contains("rank " + std::to_string(last) + ": null"));
  // Ranks that disagree on the root or the mode.
  REQUIRE_THROWS_WITH(scatter_dataset(numbered(3), comm, comm.rank() == last ? 0 : last),
                      Contains("disagree on the root"));
  REQUIRE_THROWS_WITH(scatter_dataset(numbered(3), comm, 0, comm.rank() == last), Contains("disagree on shuffle"));
  REQUIRE_THROWS_WITH(scatter_index(3, comm, 0, comm.rank() != last), Contains("force_equal_length"));
  // The communicator is still in step afterwards.
  REQUIRE(scatter_dataset(numbered(6), comm)->size() == (6 + comm.size() - 1) / comm.size());
}

TEST_CASE("a communicator of one rank: scatter_dataset returns the whole dataset") {
  Communicator& comm = world();
  auto self = comm.split(comm.rank(), 0);
  REQUIRE(self->size() == 1);
  auto dataset = numbered(9);
  REQUIRE(ids(*scatter_dataset(dataset, *self)) == iota(9));
  auto shuffled = ids(*scatter_dataset(dataset, *self, 0, true, 3));
  std::sort(shuffled.begin(), shuffled.end());
  REQUIRE(shuffled == iota(9));
}

TEST_CASE("create_empty_dataset beside a scattered dataset: the same iterations, no data") {
  Communicator& comm = world();
  auto share = scatter_dataset(numbered(11), comm);
  auto empty = create_empty_dataset(share);
  REQUIRE(empty->size() == share->size());
  SerialIterator real(share, 2, false, false), none(empty, 2, false, false);
  while (real.has_next()) {
    REQUIRE(none.has_next());
    REQUIRE(real.next().size() == 4);
    REQUIRE(none.next().empty());
    REQUIRE(none.epoch_detail() == real.epoch_detail());
  }
  REQUIRE_FALSE(none.has_next());
}

TEST_CASE("create_empty_dataset over a communicator: the root's length on every rank, the data only on the root") {
  Communicator& comm = world();
  for (int root : {0, comm.size() - 1}) {
    const DatasetPtr data = comm.rank() == root ? numbered(37 + root) : nullptr;
    const DatasetPtr empty = create_empty_dataset(data, comm, root);
    REQUIRE(empty->size() == 37 + root);
    REQUIRE(empty->get(0).empty());
  }
  // A root without a dataset: every rank fails, none waits.
  REQUIRE_THROWS_WITH(create_empty_dataset(nullptr, comm, 0), Contains("the root (rank 0) has no dataset"));
}
