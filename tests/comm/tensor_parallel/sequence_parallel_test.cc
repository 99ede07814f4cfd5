// Sequence parallelism in the tensor-parallel transformer block (comm/tensor_parallel/parallel_transformer.h,
// tensor_parallel_linear.h) on 2 and 3 ranks against TransformerBlock in one process, both drawn
// from the same seeded initialisers, in f64: each rank feeds the block its positions share_of(T, r)
// of the sequence ([T_r, B, dim], sequence first) and gets the single block's output at those
// positions; the input's gradient is those positions' of the single block's, the split weights'
// gradients are their shares, and the layer norms' and row-parallel biases' gradients
// (sequence_parallel_parameters) sum over the ranks to the single block's, by hand and through
// sum_gradients_over and an SGD step. T = 6 splits evenly over 2 and 3 ranks, T = 7 unevenly, and
// T = 1 leaves every rank but the first without positions. Also: the block without sequence
// parallelism as before, and gather_output with sequence parallelism is an error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "comm/model_parallel/tied_parameters.h"
#include "comm/tensor_parallel/parallel_transformer.h"
#include "layers/optimizers/sgd.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;
using test_util::values;

namespace {

constexpr std::int64_t kDim = 24, kBatch = 2;  // 24: whole heads of 6 and 4 at 2 and 3 ranks
constexpr double kLr = 0.5;

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

// Fresh options on every call: a seeded initialiser's copies share one stream, so the parallel and
// the single block must each get their own to draw the same weights.
TransformerBlockOptions block_options(int ranks) {
  TransformerBlockOptions options;
  options.heads = 2 * ranks;  // two per rank
  options.mlp_ratio = 2;      // hidden 48
  options.linear.initialW = initializers::seeded(11, initializers::normal(0.02));
  options.linear.initial_bias = initializers::seeded(12, initializers::normal(0.1));
  return options;
}

void require_close(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  const std::int64_t i = test_util::first_mismatch(got, want, 1e-10, 1e-10);
  INFO(test_util::mismatch_message(got, want, i));
  REQUIRE(i == -1);
}

// Positions [share.begin, share.end) of a [B, T, ...] tensor, sequence first: [T_r, B, ...].
Tensor positions(const Tensor& batch_first, Share share) {
  return slice(permute(batch_first, {1, 0, 2}), 0, share.begin, share.end).clone();
}

std::map<std::string, Variable> params_of(const Link& link) {
  std::map<std::string, Variable> out;
  for (const auto& [name, p] : link.namedparams()) out[name] = p;
  return out;
}

// This rank's share of the single block's tensor `full` for the parameter `name` of the parallel
// block: the column-parallel layers' rows, the row-parallel layers' columns, the rest whole.
Tensor share_of_param(const std::string& name, const Tensor& full, int rank, int ranks) {
  const std::int64_t hidden = 2 * kDim;
  if (name == "attention/qkv/W" || name == "attention/qkv/b") {
    const Share s = share_of(3 * kDim, rank, ranks);
    return full.slice_rows(s.begin, s.end);
  }
  if (name == "mlp/fc1/W" || name == "mlp/fc1/b") {
    const Share s = share_of(hidden, rank, ranks);
    return full.slice_rows(s.begin, s.end);
  }
  if (name == "attention/proj/W") {
    const Share s = share_of(kDim, rank, ranks);
    return slice(full, 1, s.begin, s.end);
  }
  if (name == "mlp/fc2/W") {
    const Share s = share_of(hidden, rank, ranks);
    return slice(full, 1, s.begin, s.end);
  }
  return full;
}

// The whole check for a sequence of T positions (see the file's comment).
void check_sequence_parallel_block(std::int64_t T) {
  auto comm = world();
  const int rank = comm->rank(), ranks = comm->size();
  const Share mine = share_of(T, rank, ranks);
  INFO("T = " << T << ", rank " << rank << " of " << ranks << ", positions [" << mine.begin << ", " << mine.end << ")");

  auto parallel = make_parallel_transformer_block(comm, kDim, block_options(ranks), true);
  auto single = std::make_shared<TransformerBlock>(kDim, block_options(ranks));
  parallel->to(DType::f64);
  single->to(DType::f64);
  const std::vector<std::string> parts = sequence_parallel_parameters(*parallel);

  const Tensor x = test_util::uniform({kBatch, T, kDim}, 3, -1, 1, DType::f64);
  const Tensor w = test_util::uniform({kBatch, T, kDim}, 4, 0.5, 2.0, DType::f64);  // asymmetric loss

  Variable xs(x.clone(), true);
  const Variable ys = (*single)(xs);
  F::sum(F::mul(ys, Variable(w))).backward();

  Variable xp(positions(x, mine), true);
  const Variable yp = (*parallel)(xp);
  REQUIRE(yp.shape() == Shape{mine.size(), kBatch, kDim});
  require_close(values(yp.data()), values(positions(ys.data(), mine)), "output at this rank's positions");
  F::sum(F::mul(yp, Variable(positions(w, mine)))).backward();
  require_close(values(xp.grad()), values(positions(xs.grad(), mine)), "input gradient at this rank's positions");

  // Gradients: split parameters their shares of the single block's; the sequence-parallel ones
  // (whole on every rank) this rank's part, which sums over the ranks to the single block's.
  const std::map<std::string, Variable> want = params_of(*single);
  std::map<std::string, Tensor> before;  // the parallel block's parameters before the update
  for (const auto& [name, p] : parallel->namedparams()) {
    INFO("gradient of " << name);
    REQUIRE(want.count(name) == 1);
    before[name] = p.data().clone();
    const Tensor& full = want.at(name).grad();
    REQUIRE(p.grad().defined());
    const bool part = std::find(parts.begin(), parts.end(), name) != parts.end();
    const Tensor got = part ? comm->allreduce(p.grad(), AllreduceOp::sum) : p.grad();
    require_close(values(got), values(share_of_param(name, full, rank, ranks)), "gradient of " + name);
  }

  // The same through the optimizer: sum_gradients_over sums the parts, SGD steps; the parameters
  // then are (this rank's shares of) the single block's after its SGD step.
  SGD sgd_parallel(kLr), sgd_single(kLr);
  sum_gradients_over(sgd_parallel, comm, parts);
  sgd_parallel.setup(parallel);
  sgd_single.setup(single);
  sgd_parallel.update();
  sgd_single.update();
  for (const auto& [name, p] : parallel->namedparams()) {
    const Tensor expected = share_of_param(name, want.at(name).data(), rank, ranks);
    require_close(values(p.data()), values(expected), "parameter " + name + " after the SGD step");
    REQUIRE(test_util::first_mismatch(values(p.data()), values(before.at(name)), 0, 1e-6) != -1);  // it moved
  }
}

}  // namespace

TEST_CASE("sequence parallel block equals TransformerBlock: T splits evenly") { check_sequence_parallel_block(6); }

TEST_CASE("the block without sequence parallelism still equals TransformerBlock") {
  auto comm = world();
  const std::int64_t T = 7;
  auto parallel = make_parallel_transformer_block(comm, kDim, block_options(comm->size()), false);
  TransformerBlock single(kDim, block_options(comm->size()));
  parallel->to(DType::f64);
  single.to(DType::f64);
  const Tensor x = test_util::uniform({kBatch, T, kDim}, 5, -1, 1, DType::f64);
  require_close(values((*parallel)(Variable(x)).data()), values(single(Variable(x)).data()), "output");
}

TEST_CASE("ColumnParallelLinear: sequence parallelism with gather_output is an error") {
  auto comm = world();
  ColumnParallelLinear layer(comm, kDim, 2 * kDim, /*gather_output=*/true);
  REQUIRE_THROWS_WITH(layer.set_sequence_parallel(true), Contains("gather_output"));
  REQUIRE_NOTHROW(layer.set_sequence_parallel(false));
}

TEST_CASE("scatter_to_sequence_parallel_region: fewer positions than ranks leaves the last ranks none") {
  auto comm = world();
  const int rank = comm->rank();
  const Tensor x = test_util::uniform({1, kBatch, kDim}, 6, -1, 1, DType::f64);
  const Variable y = F::scatter_to_sequence_parallel_region(*comm, Variable(x));
  REQUIRE(y.shape() == Shape{rank == 0 ? 1 : 0, kBatch, kDim});
}

// Last: where some ranks fail inside the block and others go on, the ranks' collectives no longer
// match, and every case after them would fail too.
TEST_CASE("sequence parallel block equals TransformerBlock: T splits unevenly") { check_sequence_parallel_block(7); }

TEST_CASE("sequence parallel block equals TransformerBlock: ranks without positions") {
  check_sequence_parallel_block(1);
}
