// chainermn.scatter_dataset and chainermn.scatter_index: each rank's share of a dataset.
//
// Unlike ChainerMN, which pickles the root's dataset to every rank, tandem expects the dataset
// to be available on every rank already (every rank loads it, or maps the same file) and moves
// only what decides the split: one allgather of a few integers (so that every rank checks the
// same lengths and arguments), plus, when shuffling, one broadcast of the root's order. Each
// rank then builds its share as a SubDataset view over its own copy; no example is sent.
//
// The split (ChainerMN's arithmetic, so a given order puts each example in the same share):
//   force_equal_length = true (the default, for training): every rank gets ceil(n / size)
//     examples, rank r the window [n*r/size, n*r/size + ceil(n/size)) of the order. The
//     windows cover the dataset, the last one ends exactly at n, and fewer than `size`
//     examples appear twice (the windows overlap by a few). Equal lengths are what
//     multi-node updaters and evaluators need: every rank runs the same number of iterations.
//   force_equal_length = false (for exact evaluation): disjoint contiguous shares that
//     together are the dataset; the first n % size ranks get one example more than the others.
// An empty dataset (n = 0) gives every rank an empty share; so does a rank past the end when
// n < size without force_equal_length.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "comm/transport/communicator.h"
#include "data/dataset.h"
#include "data/sub_dataset.h"

namespace tandem {

// A half-open range [begin, end) of positions in the (possibly shuffled) order of a dataset.
struct IndexRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end - begin; }
  bool operator==(const IndexRange& other) const { return begin == other.begin && end == other.end; }
};

// Every rank's range for `n_total` examples over `size` ranks (entry r is rank r's), as
// described above; no communication. Requires n_total >= 0 and size >= 1.
std::vector<IndexRange> scatter_index_ranges(std::int64_t n_total, int size, bool force_equal_length = true);

// This rank's range of n_total examples (collective: one allgather). Every rank passes the same
// n_total, root and force_equal_length; otherwise every rank throws a tandem::Error listing each
// rank's value. `root` only coordinates (as in ChainerMN); it must be a rank of `comm`.
IndexRange scatter_index(std::int64_t n_total, Communicator& comm, int root = 0, bool force_equal_length = true);

// This rank's share of `dataset`: a SubDataset over this rank's own `dataset`, covering its
// scatter_index range of the root's order (collective).
//
// shuffle: the root draws a random order (data/permutation.h) from std::mt19937_64(seed), or,
// without a seed, from a seed drawn from the root's tandem::global_generator(); that order is
// broadcast and used on every rank (the other ranks' seeds are ignored and their generators
// are not touched). The same seed on the root gives the same shares. Without shuffle the
// shares are contiguous ranges of the dataset.
//
// Errors, the same tandem::Error on every rank: a null dataset on any rank; datasets whose
// lengths differ across ranks; ranks that disagree on root, shuffle or force_equal_length; a
// root that is not a rank of `comm`.
std::shared_ptr<SubDataset> scatter_dataset(DatasetPtr dataset, Communicator& comm, int root = 0, bool shuffle = false,
                                            std::optional<std::uint64_t> seed = std::nullopt,
                                            bool force_equal_length = true);

}  // namespace tandem
