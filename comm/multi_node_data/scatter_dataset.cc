#include "comm/multi_node_data/scatter_dataset.h"

#include <memory>
#include <random>

#include "comm/multi_node_data/agreement.h"
#include "core/error.h"
#include "core/random.h"
#include "data/permutation.h"

namespace tandem {

using comm_data_detail::allgather_values;
using comm_data_detail::check_root;
using comm_data_detail::require_same;

std::vector<IndexRange> scatter_index_ranges(std::int64_t n_total, int size, bool force_equal_length) {
  TANDEM_CHECK(n_total >= 0, "scatter_index_ranges: n_total must be non-negative, got ", n_total);
  TANDEM_CHECK(size >= 1, "scatter_index_ranges: size must be positive, got ", size);
  std::vector<IndexRange> ranges(static_cast<std::size_t>(size));
  if (force_equal_length) {
    // Windows of ceil(n/size) starting at floor(n*r/size); the last ends at
    // floor(n - n/size) + ceil(n/size) = n exactly, so every window fits.
    const std::int64_t length = (n_total + size - 1) / size;
    for (int r = 0; r < size; ++r) {
      const std::int64_t begin = n_total * r / size;
      ranges[r] = {begin, begin + length};
    }
  } else {
    const std::int64_t base = n_total / size, extra = n_total % size;
    std::int64_t begin = 0;
    for (int r = 0; r < size; ++r) {
      const std::int64_t length = base + (r < extra ? 1 : 0);
      ranges[r] = {begin, begin + length};
      begin += length;
    }
  }
  return ranges;
}

namespace {

// Agrees on (n_total, root, force_equal_length[, shuffle]) and returns this rank's range.
IndexRange agreed_range(Communicator& comm, std::int64_t n_total, int root, bool force_equal_length,
                        std::optional<bool> shuffle, const char* operation, bool null_below_zero) {
  std::vector<std::int64_t> mine{n_total, root, force_equal_length ? 1 : 0};
  if (shuffle) mine.push_back(*shuffle ? 1 : 0);
  const auto all = allgather_values(comm, mine, operation);
  require_same(all, 0, operation, null_below_zero ? "the dataset's length" : "n_total",
               "every rank must pass the same, whole dataset (only indices are sent)", null_below_zero);
  require_same(all, 1, operation, "the root", "every rank must pass the same root");
  require_same(all, 2, operation, "force_equal_length", "every rank must pass the same force_equal_length");
  if (shuffle) require_same(all, 3, operation, "shuffle", "every rank must pass the same shuffle");
  // Checked only now, when every rank knows that every rank reaches the same verdict.
  check_root(comm, root, operation);
  if (null_below_zero) TANDEM_CHECK(n_total >= 0, operation, ": the dataset is null");
  TANDEM_CHECK(n_total >= 0, operation, ": n_total must be non-negative, got ", n_total);
  return scatter_index_ranges(n_total, comm.size(), force_equal_length)[comm.rank()];
}

}  // namespace

IndexRange scatter_index(std::int64_t n_total, Communicator& comm, int root, bool force_equal_length) {
  return agreed_range(comm, n_total, root, force_equal_length, std::nullopt, "scatter_index", false);
}

std::shared_ptr<SubDataset> scatter_dataset(DatasetPtr dataset, Communicator& comm, int root, bool shuffle,
                                            std::optional<std::uint64_t> seed, bool force_equal_length) {
  const char* operation = "scatter_dataset";
  const std::int64_t n = dataset ? dataset->size() : -1;
  const IndexRange range = agreed_range(comm, n, root, force_equal_length, shuffle, operation, true);
  std::vector<std::int64_t> order;
  if (shuffle) {
    Tensor root_order;
    if (comm.rank() == root) {
      std::mt19937_64 engine(seed ? *seed : global_generator().next());
      root_order = from_vector(random_permutation(n, engine));
    }
    order = comm.bcast(root_order, root).to_vector<std::int64_t>();
    // The bcast checks nothing about the contents: guard the SubDataset against a bad message.
    TANDEM_CHECK(is_permutation_of(order, n), operation, ": the order broadcast by the root is not a permutation of ",
                 n, " indices");
  }
  return std::make_shared<SubDataset>(std::move(dataset), range.begin, range.end, std::move(order));
}

}  // namespace tandem
