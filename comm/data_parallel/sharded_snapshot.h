// Snapshots of a sharded data-parallel run (zero >= 1) as one process would have written them.
//
// Each rank's snapshot holds the model whole (a zero = 3 run gathers it for the snapshot) and
// its own slices of the optimizer state, named after the slice: "optimizer/l1/W[0:512]/m" is
// elements [0, 512) of l1/W's "m" (flattened). consolidate_sharded_snapshots puts every rank's
// slices together: the result loads into a one-process run (or any zero = 0 run) and equals
// what that run's snapshot holds. Entries that are each rank's own (an iterator's order, the
// trainer's state) are rank 0's. `bazel run //tools:consolidate_snapshot`.
#pragma once

#include <string>
#include <vector>

#include "layers/serializers/npz.h"

namespace tandem {

// per_rank: every rank's snapshot entries, in rank order. Errors name the entry and the ranks
// when a slice is missing, overlaps another, or the ranks' whole entries differ.
NamedTensors consolidate_sharded_snapshots(const std::vector<NamedTensors>& per_rank);

}  // namespace tandem
