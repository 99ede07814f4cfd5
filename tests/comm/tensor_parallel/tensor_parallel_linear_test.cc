// ColumnParallelLinear and RowParallelLinear (comm/tensor_parallel/tensor_parallel_linear.h) against the
// unsplit Linear built from the same seed, at 1 to 4 ranks with sizes that do not divide: the
// forward output, the input's and every parameter's gradient, and the parameters after one SGD
// step, in f64; Megatron's MLP block (column, tanh, row); and the errors of a wrong split.
#include <catch2/catch.hpp>

#include "autograd/functions.h"
#include "comm/tensor_parallel/tensor_parallel_linear.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "core/random.h"
#include "layers/optimizers/sgd.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

LinearOptions f64_options() {
  LinearOptions options;
  options.dtype = DType::f64;
  options.initial_bias = initializers::normal(0.5);  // not zero: the bias's share must be the right one
  return options;
}

Tensor f64(const Shape& shape, std::uint64_t seed) { return test_util::uniform(shape, seed, -1, 1, DType::f64); }

void require_close(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what << ": " << got.description() << " vs " << want.description());
  REQUIRE(got.defined());
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": " << g[i] << " vs " << w[i]);
    REQUIRE(std::abs(g[i] - w[i]) <= 1e-10 * (1 + std::abs(w[i])));
  }
}

Tensor columns(const Tensor& x, const Share& s) { return slice(x, 1, s.begin, s.end); }
Tensor rows(const Tensor& x, const Share& s) { return x.slice_rows(s.begin, s.end).clone(); }
Variable weighted_sum(const Variable& y, const Tensor& w) { return F::sum(F::mul(y, Variable(w))); }

// One SGD step on every parameter of a link.
void sgd_step(const std::shared_ptr<Link>& link) {
  SGD opt(0.1);
  opt.setup(link);
  opt.update();
}

}  // namespace

TEST_CASE("ColumnParallelLinear equals Linear: output, gradients, one SGD step") {
  const CommunicatorPtr comm = world();
  for (bool gather : {false, true}) {
    INFO("gather_output " << gather);
    const std::int64_t in = 5, out = 7;
    manual_seed(11);
    auto full = std::make_shared<Linear>(in, out, f64_options());
    manual_seed(11);
    auto split = std::make_shared<ColumnParallelLinear>(comm, in, out, gather, f64_options());
    const Share s = split->share();
    const Tensor x_data = f64({4, in}, 1), w = f64({4, out}, 2);
    Variable x_full(x_data.clone(), true), x_split(x_data.clone(), true);
    Variable y_full = (*full)(x_full), y_split = (*split)(x_split);
    require_close(y_split.data(), gather ? y_full.data() : columns(y_full.data(), s), "output");
    weighted_sum(y_full, w).backward();
    weighted_sum(y_split, gather ? w : columns(w, s)).backward();
    require_close(x_split.grad(), x_full.grad(), "input gradient");
    require_close(split->W().grad(), rows(full->W().grad(), s), "W gradient");
    require_close(split->b().grad(), rows(full->b().grad(), s), "b gradient");
    sgd_step(full);
    sgd_step(split);
    require_close(split->W().data(), rows(full->W().data(), s), "W after a step");
    require_close(split->b().data(), rows(full->b().data(), s), "b after a step");
  }
}

TEST_CASE("RowParallelLinear equals Linear: output, gradients, one SGD step") {
  const CommunicatorPtr comm = world();
  for (bool input_is_parallel : {true, false}) {
    INFO("input_is_parallel " << input_is_parallel);
    const std::int64_t in = 7, out = 5;
    manual_seed(12);
    auto full = std::make_shared<Linear>(in, out, f64_options());
    manual_seed(12);
    auto split = std::make_shared<RowParallelLinear>(comm, in, out, input_is_parallel, f64_options());
    const Share s = split->share();
    const Tensor x_data = f64({4, in}, 3), w = f64({4, out}, 4);
    Variable x_full(x_data.clone(), true);
    Variable x_split(input_is_parallel ? columns(x_data, s) : x_data.clone(), true);
    Variable y_full = (*full)(x_full), y_split = (*split)(x_split);
    require_close(y_split.data(), y_full.data(), "output (every rank)");
    weighted_sum(y_full, w).backward();
    weighted_sum(y_split, w).backward();
    require_close(x_split.grad(), input_is_parallel ? columns(x_full.grad(), s) : x_full.grad(), "input gradient");
    require_close(split->W().grad(), columns(full->W().grad(), s), "W gradient");
    require_close(split->b().grad(), full->b().grad(), "b gradient (every rank)");
    sgd_step(full);
    sgd_step(split);
    require_close(split->W().data(), columns(full->W().data(), s), "W after a step");
    require_close(split->b().data(), full->b().data(), "b after a step");
  }
}

TEST_CASE("Megatron's MLP block (column, tanh, row) equals the unsplit block") {
  const CommunicatorPtr comm = world();
  const std::int64_t d = 6, hidden = 11;
  manual_seed(13);
  auto fc1 = std::make_shared<Linear>(d, hidden, f64_options());
  auto fc2 = std::make_shared<Linear>(hidden, d, f64_options());
  manual_seed(13);
  auto col = std::make_shared<ColumnParallelLinear>(comm, d, hidden, false, f64_options());
  auto row = std::make_shared<RowParallelLinear>(comm, hidden, d, true, f64_options());
  const Tensor x_data = f64({3, d}, 5), w = f64({3, d}, 6);
  Variable x_full(x_data.clone(), true), x_split(x_data.clone(), true);
  Variable y_full = (*fc2)(F::tanh((*fc1)(x_full)));
  Variable y_split = (*row)(F::tanh((*col)(x_split)));
  require_close(y_split.data(), y_full.data(), "output");
  weighted_sum(y_full, w).backward();
  weighted_sum(y_split, w).backward();
  require_close(x_split.grad(), x_full.grad(), "input gradient");
  require_close(col->W().grad(), rows(fc1->W().grad(), col->share()), "fc1 W");
  require_close(col->b().grad(), rows(fc1->b().grad(), col->share()), "fc1 b");
  require_close(row->W().grad(), columns(fc2->W().grad(), row->share()), "fc2 W");
  require_close(row->b().grad(), fc2->b().grad(), "fc2 b");
}

TEST_CASE("tensor-parallel linear layers: a wrong split is a clear error") {
  const CommunicatorPtr comm = world();
  const int n = comm->size();
  auto row = std::make_shared<RowParallelLinear>(comm, 8, 3);
  // The full input given where this rank's share is expected.
  if (n > 1) {
    REQUIRE_THROWS_WITH((*row)(Variable(zeros({2, 8}))),
                        Contains("RowParallelLinear: rank " + std::to_string(comm->rank()) + " of " +
                                 std::to_string(n) + " takes its") &&
                            Contains("input_is_parallel"));
  }
  // A W split for another number of ranks.
  auto col = std::make_shared<ColumnParallelLinear>(comm, -1, 9);
  REQUIRE_THROWS_WITH(col->initialize_param_from("W", zeros({9 + 1, 4})),
                      Contains("ColumnParallelLinear: W on rank") && Contains("a checkpoint split for another number"));
  REQUIRE_THROWS_WITH(ColumnParallelLinear(comm, 4, n - 1 > 0 ? n - 1 : 0),
                      Contains("ColumnParallelLinear: out_size"));
  // Ranks that built different layers (rank 0 one more output feature): every rank learns it at
  // the first forward.
  if (n > 1) {
    auto odd = std::make_shared<ColumnParallelLinear>(comm, 4, comm->rank() == 0 ? 9 : 8);
    REQUIRE_THROWS_WITH((*odd)(Variable(zeros({2, 4}))),
                        Contains("ColumnParallelLinear: the ranks of its group built different layers") &&
                            Contains("4 x 9") && Contains("4 x 8"));
  }
}

TEST_CASE("tensor x data parallelism: 2 x 2 on 4 ranks (tp x dp otherwise) equals one process") {
  const CommunicatorPtr world_comm = world();
  const int size = world_comm->size(), rank = world_comm->rank();
  const int tp = size % 2 == 0 ? 2 : 1, dp = size / tp;
  // Consecutive ranks share a layer (the tensor-parallel group); ranks with the same place in
  // their group hold the same shares (the data-parallel group, averaging their gradients).
  const CommunicatorPtr tp_comm = world_comm->split(rank / tp, rank % tp);
  const CommunicatorPtr dp_comm = world_comm->split(rank % tp, rank / tp);
  const std::int64_t d = 6, hidden = 9, per_replica = 3;
  manual_seed(41);
  auto fc1 = std::make_shared<Linear>(d, hidden, f64_options());
  auto fc2 = std::make_shared<Linear>(hidden, d, f64_options());
  auto whole = std::make_shared<ChainList>();
  whole->append(fc1);
  whole->append(fc2);
  manual_seed(41);
  auto col = std::make_shared<ColumnParallelLinear>(tp_comm, d, hidden, false, f64_options());
  auto row = std::make_shared<RowParallelLinear>(tp_comm, hidden, d, true, f64_options());
  auto block = std::make_shared<ChainList>();
  block->append(col);
  block->append(row);
  auto opt = create_multi_node_optimizer(std::make_shared<SGD>(0.5), dp_comm);
  opt->setup(block);
  SGD ref_opt(0.5);
  ref_opt.setup(whole);
  for (int step = 0; step < 2; ++step) {
    // The whole batch; replica k (rank / tp) takes rows [k * per_replica, (k + 1) * per_replica).
    const Tensor x = f64({per_replica * dp, d}, 50 + step), w = f64({per_replica * dp, d}, 60 + step);
    const std::int64_t k = rank / tp;
    const Tensor x_mine = x.slice_rows(k * per_replica, (k + 1) * per_replica).clone();
    const Tensor w_mine = w.slice_rows(k * per_replica, (k + 1) * per_replica).clone();
    block->cleargrads();
    F::mul(weighted_sum((*row)(F::tanh((*col)(Variable(x_mine)))), w_mine), 1.0 / per_replica).backward();
    opt->update();
    whole->cleargrads();
    F::mul(weighted_sum((*fc2)(F::tanh((*fc1)(Variable(x)))), w), 1.0 / (per_replica * dp)).backward();
    ref_opt.update();
  }
  require_close(col->W().data(), rows(fc1->W().data(), col->share()), "fc1 W after 2 steps");
  require_close(col->b().data(), rows(fc1->b().data(), col->share()), "fc1 b");
  require_close(row->W().data(), columns(fc2->W().data(), row->share()), "fc2 W");
  require_close(row->b().data(), fc2->b().data(), "fc2 b");
}
