// bcast (communicator.h) on 2-4 ranks. Up to MpiCommunicator::kEagerBcastRanks ranks the root
// sends the payload beside its header; beyond, and with TANDEM_EAGER_DATA=0, MPI's bcast moves
// it after the headers. Both paths: values from every root in several dtypes and sizes, and a
// payload already on its way when the ranks disagree, discarded everywhere.
#include <catch2/catch.hpp>

#include "comm/transport/communicator.h"
#include "core/ops.h"
#include "tests/core/test_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using test_util::require_values;

namespace {

Communicator& world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return *comm;
}

}  // namespace

TEST_CASE("bcast gives every rank the root's tensor: every root, dtypes, sizes past MPI's eager limit") {
  Communicator& comm = world();
  const int n = comm.size(), me = comm.rank();
  for (int root = 0; root < n; ++root) {
    for (const DType dtype : {DType::f32, DType::f64, DType::i64}) {
      for (const Shape& shape : {Shape{}, Shape{0, 3}, Shape{7}, Shape{300, 1000}}) {
        const std::int64_t numel = shape_numel(shape);
        // Only the root's tensor counts: the others pass something else (or nothing).
        const Tensor mine = me == root ? add(arange(0, double(numel), 1).to(dtype).reshape(shape), double(root))
                                       : full({2}, -5.0, dtype);
        const Tensor got = comm.bcast(mine, root);
        REQUIRE(got.shape() == shape);
        REQUIRE(got.dtype() == dtype);
        std::vector<double> want(static_cast<std::size_t>(numel));
        for (std::int64_t i = 0; i < numel; ++i) want[static_cast<std::size_t>(i)] = double(i + root);
        require_values(got, want, 0, 0);
      }
    }
  }
}

TEST_CASE("bcast errors: a payload already on its way when the headers disagree is discarded") {
  // The root's 1.2 MB (past MPI's eager limit) leaves with its header; the others are in an
  // allreduce. Every rank raises, every rank that got the payload drops it, and the next bcast
  // gets its own values only.
  Communicator& comm = world();
  const int n = comm.size(), me = comm.rank();
  for (int root = 0; root < n; ++root) {
    if (me == root) {
      REQUIRE_THROWS_WITH(comm.bcast(full({300, 1000}, -1.0), root), Contains("different operations"));
    } else {
      REQUIRE_THROWS_WITH(comm.allreduce(full({5}, 1.0)), Contains("different operations"));
    }
    const Tensor got = comm.bcast(full({300, 1000}, 10.0 * root + 1), root);
    require_values(got, std::vector<double>(300000, 10.0 * root + 1), 0, 0);
  }
}
