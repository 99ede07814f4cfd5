// How a sequence's positions are split over the ranks of a context-parallel group. Each rank
// holds runs of consecutive positions, in order; its rows are those runs' positions, run after
// run. Two layouts are built in:
//   contiguous: rank r holds [T r / R, T (r + 1) / R): under a causal mask the last rank's
//               queries see R times the keys of the first's;
//   balanced:   the sequence cut into 2R chunks, rank r holding chunk r and chunk 2R - 1 - r
//               (torchtitan's and Megatron-LM's load balance): every rank's causal work is equal
//               to within a chunk's rounding.
// Any length over any number of ranks (uneven splits; a rank may hold no position).
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/variable.h"

namespace tandem {

struct PositionRun {
  std::int64_t start = 0, length = 0;
};

class SequenceLayout {
 public:
  static SequenceLayout contiguous(std::int64_t length, int ranks);
  static SequenceLayout balanced(std::int64_t length, int ranks);
  // Explicit runs per rank; together they must cover [0, length) once.
  SequenceLayout(std::int64_t length, std::vector<std::vector<PositionRun>> runs);

  std::int64_t length() const { return length_; }
  int ranks() const { return static_cast<int>(runs_.size()); }
  const std::vector<PositionRun>& runs(int rank) const;
  std::int64_t local_length(int rank) const;
  // The layout of groups of `group` consecutive ranks, each group holding its ranks' runs in rank
  // order (the hybrid's ring over all-to-all groups): ranks() / group ranks.
  SequenceLayout grouped(int group) const;

  // The rows of x along `axis` (which holds all length() positions) that `rank` holds, in its
  // order; differentiable (backward puts the gradient back into those rows).
  Variable shard(const Variable& x, int rank, std::int64_t axis) const;
  // The whole sequence along `axis` from every rank's rows (parts in rank order).
  Variable unshard(const Variables& parts, std::int64_t axis) const;

 private:
  std::int64_t length_ = 0;
  std::vector<std::vector<PositionRun>> runs_;
};

}  // namespace tandem
