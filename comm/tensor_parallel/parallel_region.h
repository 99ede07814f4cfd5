// Tensor model parallelism (Megatron-LM's mappings): the functions that carry a variable into
// and out of a region of the model whose work is split across the ranks of a communicator,
// named by what their forward and backward do. Two families:
//
// Split along features (the last axis by default; ParallelConvolution2D uses the channels):
// every rank holds the same full activation outside the region, and its own share inside.
// | function                     | forward                                  | backward                          |
// | copy_to_parallel_region      | identity                                 | allreduce (sum) of the gradient   |
// | reduce_from_parallel_region  | allreduce (sum)                          | identity                          |
// | scatter_to_parallel_region   | this rank's share along `axis`           | allgather, concat along `axis`    |
// | gather_from_parallel_region  | allgather, concat along `axis`           | this rank's share of the gradient |
//
// Split along the sequence (the first axis; Megatron's sequence parallelism): outside the
// tensor-parallel region each rank holds its own share of the rows, so what the region needs in
// full is gathered on the way in and reduced and scattered on the way out.
// | function                                    | forward                         | backward                       |
// | scatter_to_sequence_parallel_region         | this rank's rows                | allgather of the rows          |
// | gather_from_sequence_parallel_region        | allgather of the rows           | reduce-scatter of the rows     |
// | reduce_scatter_to_sequence_parallel_region  | reduce-scatter of the rows      | allgather of the rows          |
//
// Shares: a size n splits as share_of says (n / ranks each, the first n % ranks ranks one more),
// so any size works at any number of ranks, as ParallelConvolution2D's channels do. Gathers take
// every rank's share as it comes (their extents along the axis may differ; every other extent
// must agree, or the error names the rank whose share differs).
//
// Why copy_to's backward sums, and gather_from's backward slices instead of reduce-scattering:
// every rank computes the same loss from the same full output of gather_from, so a sum over
// ranks would count the gradient once per rank; and copy_to's x feeds every rank's share, so
// its gradient is the sum over ranks. In the sequence family the gathered rows feed the
// tensor-parallel region, where each rank computes something different from them, so
// gather_from_sequence's backward sums the ranks' gradients (reduce-scatter).
//
// All need the graph to be replicated across the group: every rank calls them in the same order
// with the same full sizes (the data from a multi-node iterator, the replicated layers seeded
// alike). Each is recorded only when its input requires a gradient (on every rank alike), and
// once recorded its backward collective runs on every rank, gradient or not.
#pragma once

#include "autograd/variable.h"
#include "comm/transport/communicator.h"

namespace tandem {

// Rank `rank`'s share [begin, end) of n items split over `ranks`: n / ranks each, the first
// n % ranks ranks one more (so every size splits, and shares differ by at most one).
struct Share {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};
Share share_of(std::int64_t n, int rank, int ranks);

}  // namespace tandem

namespace tandem::functions {

// Identity; in backward, an allreduce (sum) of x's gradient.
Variable copy_to_parallel_region(Communicator& comm, const Variable& x);

// Allreduce (sum) of every rank's x (the partial results of a row-parallel layer); in backward,
// the gradient as it is.
Variable reduce_from_parallel_region(Communicator& comm, const Variable& x);

// This rank's share of x along `axis` (share_of its extent); in backward, the ranks' gradients
// allgathered and concatenated along `axis` into x's full shape.
Variable scatter_to_parallel_region(Communicator& comm, const Variable& x, std::int64_t axis = -1);

// Allgather of each rank's share y (shapes equal except along `axis`), concatenated in rank
// order along `axis`; in backward, the slice of the full output's gradient that y produced.
Variable gather_from_parallel_region(Communicator& comm, const Variable& y, std::int64_t axis = 1);

// This rank's rows of x (share_of x's first extent); backward: allgather of the rows.
Variable scatter_to_sequence_parallel_region(Communicator& comm, const Variable& x);

// Every rank's rows, concatenated in rank order; backward: the sum over ranks of the gradient,
// each rank keeping the rows it contributed (reduce-scatter).
Variable gather_from_sequence_parallel_region(Communicator& comm, const Variable& x);

// The sum over ranks of x (the same shape everywhere), each rank keeping its share of the rows;
// backward: allgather of the rows.
Variable reduce_scatter_to_sequence_parallel_region(Communicator& comm, const Variable& x);

}  // namespace tandem::functions
