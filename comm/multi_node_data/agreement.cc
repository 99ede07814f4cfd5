#include "comm/multi_node_data/agreement.h"

#include <sstream>

#include "core/error.h"

namespace tandem::comm_data_detail {

std::vector<std::vector<std::int64_t>> allgather_values(Communicator& comm, const std::vector<std::int64_t>& mine,
                                                        const char* operation) {
  const std::vector<Tensor> gathered = comm.allgather(from_vector(mine));
  std::vector<std::vector<std::int64_t>> all;
  all.reserve(gathered.size());
  for (std::size_t r = 0; r < gathered.size(); ++r) {
    all.push_back(gathered[r].to_vector<std::int64_t>());
    // Only a caller bug (ranks calling different utilities) can get here.
    TANDEM_CHECK(all.back().size() == mine.size(), operation, ": rank ", r, " sent ", all.back().size(),
                 " values where this rank sent ", mine.size(), " (are the ranks in different calls?)");
  }
  return all;
}

void require_same(const std::vector<std::vector<std::int64_t>>& all, std::size_t index, const char* operation,
                  const char* what, const char* hint, bool null_below_zero) {
  bool same = true;
  for (const auto& values : all) same = same && values[index] == all[0][index];
  if (same) return;
  std::ostringstream out;
  out << operation << ": the ranks disagree on " << what << " (";
  for (std::size_t r = 0; r < all.size(); ++r) {
    out << (r ? ", " : "") << "rank " << r << ": ";
    if (null_below_zero && all[r][index] < 0) out << "null";
    else out << all[r][index];
  }
  out << "); " << hint;
  TANDEM_FAIL(out.str());
}

void check_root(const Communicator& comm, std::int64_t root, const char* operation, const char* name) {
  TANDEM_CHECK(0 <= root && root < comm.size(), operation, ": ", name, " ", root,
               " does not exist (communicator of size ", comm.size(), ")");
}

}  // namespace tandem::comm_data_detail
