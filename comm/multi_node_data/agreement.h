// Internal to comm/multi_node_data: how the data utilities agree on their arguments before they rely on
// them. One allgather of a few integers per rank; every rank then checks every rank's values
// with the same rules, so a disagreement is the same tandem::Error on every rank instead of a
// hang on some and a wrong split on others.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/transport/communicator.h"

namespace tandem::comm_data_detail {

// Every rank's `mine`, in rank order (all ranks pass the same number of values).
std::vector<std::vector<std::int64_t>> allgather_values(Communicator& comm, const std::vector<std::int64_t>& mine,
                                                        const char* operation);

// Throws "OPERATION: the ranks disagree on WHAT (rank 0: a, rank 1: b, ...); HINT" on every rank
// unless value `index` is the same on all ranks. `null_below_zero`: a negative value is printed
// as "null" (a rank that passed no dataset).
void require_same(const std::vector<std::vector<std::int64_t>>& all, std::size_t index, const char* operation,
                  const char* what, const char* hint, bool null_below_zero = false);

// "OPERATION: root R does not exist (communicator of size N)" unless 0 <= root < size.
void check_root(const Communicator& comm, std::int64_t root, const char* operation, const char* name = "root");

}  // namespace tandem::comm_data_detail
