// The tensor-parallel regions (comm/tensor_parallel/parallel_region.h) on 1 to 4 ranks, with sizes
// that do not divide by the ranks: each region's forward and every gradient against the same
// computation written out in one process (f64), each under distributed_gradcheck, a Megatron
// MLP block (column-parallel then row-parallel, through copy_to and reduce_from) against the
// unsplit block, and the ranks disagreeing on what they split.
#include <catch2/catch.hpp>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "comm/functions.h"
#include "comm/functions/gradcheck.h"
#include "comm/tensor_parallel/parallel_region.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;
using test_util::uniform;

namespace {

Communicator& world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return *comm;
}

Tensor f64(const Shape& shape, std::uint64_t seed) { return uniform(shape, seed, -1, 1, DType::f64); }

void require_equal(const Tensor& got, const Tensor& want, const std::string& what, double tol = 1e-12) {
  INFO(what << ": " << got.description() << " vs " << want.description());
  REQUIRE(got.defined());
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": " << g[i] << " vs " << w[i]);
    REQUIRE(std::abs(g[i] - w[i]) <= tol * (1 + std::abs(w[i])));
  }
}

// sum(y * w): the loss whose gradient with respect to y is w.
Variable weighted_sum(const Variable& y, const Tensor& w) { return F::sum(F::mul(y, Variable(w))); }

Tensor columns(const Tensor& x, const Share& s) { return slice(x, 1, s.begin, s.end); }
Tensor rows(const Tensor& x, const Share& s) { return x.slice_rows(s.begin, s.end).clone(); }

// The sum over ranks of f(r), computed on every rank alike.
Tensor sum_over_ranks(int ranks, const std::function<Tensor(int)>& f) {
  Tensor total = f(0);
  for (int r = 1; r < ranks; ++r) total = add(total, f(r));
  return total;
}

}  // namespace

TEST_CASE("share_of: n / ranks each, the first n % ranks one more, covering [0, n)") {
  for (int ranks = 1; ranks <= 5; ++ranks) {
    for (std::int64_t n : {0, 1, 4, 7, 13}) {
      std::int64_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        const Share s = share_of(n, r, ranks);
        CHECK(s.begin == next);
        CHECK(s.size() == n / ranks + (r < n % ranks ? 1 : 0));
        next = s.end;
      }
      CHECK(next == n);
    }
  }
}

TEST_CASE("regions along the features: values and gradients equal the computation in one process") {
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  const std::int64_t features = 7;  // uneven over 2, 3 and 4 ranks
  const Share mine = share_of(features, r, n);
  const Tensor x_full = f64({3, features}, 1), w_full = f64({3, features}, 2);

  SECTION("copy_to: identity; the gradient is the sum of every rank's") {
    Variable x(x_full.clone(), true);
    Variable y = F::copy_to_parallel_region(comm, x);
    require_equal(y.data(), x_full, "copy_to forward");
    weighted_sum(y, f64({3, features}, 10 + r)).backward();
    require_equal(x.grad(), sum_over_ranks(n, [&](int q) { return f64({3, features}, 10 + q); }), "copy_to backward");
  }
  SECTION("reduce_from: the sum of every rank's; the gradient as it is") {
    Variable x(f64({3, features}, 20 + r), true);
    Variable y = F::reduce_from_parallel_region(comm, x);
    require_equal(y.data(), sum_over_ranks(n, [&](int q) { return f64({3, features}, 20 + q); }), "reduce_from forward");
    weighted_sum(y, w_full).backward();
    require_equal(x.grad(), w_full, "reduce_from backward");
  }
  SECTION("scatter_to: this rank's columns; the gradient gathers every rank's") {
    Variable x(x_full.clone(), true);
    Variable y = F::scatter_to_parallel_region(comm, x);
    require_equal(y.data(), columns(x_full, mine), "scatter_to forward");
    weighted_sum(y, columns(w_full, mine)).backward();
    require_equal(x.grad(), w_full, "scatter_to backward");
  }
  SECTION("gather_from: every rank's columns; the gradient is this rank's slice") {
    Variable y(columns(x_full, mine), true);
    Variable z = F::gather_from_parallel_region(comm, y, -1);
    require_equal(z.data(), x_full, "gather_from forward");
    weighted_sum(z, w_full).backward();
    require_equal(y.grad(), columns(w_full, mine), "gather_from backward");
  }
}

TEST_CASE("regions along the sequence: values and gradients equal the computation in one process") {
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  const std::int64_t length = 7;
  const Share mine = share_of(length, r, n);
  const Tensor x_full = f64({length, 3}, 3), w_full = f64({length, 3}, 4);

  SECTION("scatter_to_sequence: this rank's rows; the gradient gathers every rank's") {
    Variable x(x_full.clone(), true);
    Variable y = F::scatter_to_sequence_parallel_region(comm, x);
    require_equal(y.data(), rows(x_full, mine), "forward");
    weighted_sum(y, rows(w_full, mine)).backward();
    require_equal(x.grad(), w_full, "backward");
  }
  SECTION("gather_from_sequence: every rank's rows; the gradient sums the ranks' and keeps this rank's rows") {
    Variable x(rows(x_full, mine), true);
    Variable z = F::gather_from_sequence_parallel_region(comm, x);
    require_equal(z.data(), x_full, "forward");
    weighted_sum(z, f64({length, 3}, 30 + r)).backward();
    const Tensor total = sum_over_ranks(n, [&](int q) { return f64({length, 3}, 30 + q); });
    require_equal(x.grad(), rows(total, mine), "backward");
  }
  SECTION("reduce_scatter_to_sequence: this rank's rows of the sum; the gradient gathers the rows") {
    Variable x(f64({length, 3}, 40 + r), true);
    Variable y = F::reduce_scatter_to_sequence_parallel_region(comm, x);
    const Tensor total = sum_over_ranks(n, [&](int q) { return f64({length, 3}, 40 + q); });
    require_equal(y.data(), rows(total, mine), "forward");
    weighted_sum(y, rows(w_full, mine)).backward();
    require_equal(x.grad(), w_full, "backward");
  }
}

namespace {

// A rank-specific nonlinear map inside a region: tanh(x * c_r + x^2 * d_r), with c_r and d_r
// depending on the rank, so that the ranks' contributions differ and a wrong sum or slice shows.
Variable rank_map(const Variable& x, int rank) {
  return F::tanh(F::add(F::mul(x, 0.5 + 0.3 * rank), F::mul(F::mul(x, x), 0.2 - 0.1 * rank)));
}

// The numerical gradient check of a computation replicated across the ranks, as the feature
// regions assume (Megatron's setting): every rank holds the same inputs and computes the same
// scalar objective <w, fn(inputs)>, so an input element is perturbed on every rank at once and
// the objective counts once. The analytic gradient is each rank's own (they must agree).
void require_replicated_gradcheck(Communicator& comm, const std::function<Variable(const Variable&)>& fn,
                                  const Tensor& input, const std::string& what) {
  INFO(what);
  Variable x(input.clone(), true);
  Variable y = fn(x);
  const Tensor w = f64(y.shape(), 99);  // the same on every rank
  weighted_sum(y, w).backward();
  const std::vector<double> analytic = x.grad().to_vector<double>();
  const double eps = 1e-6;
  std::vector<double> values = input.to_vector<double>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    double objective[2];
    for (int side = 0; side < 2; ++side) {
      std::vector<double> shifted = values;
      shifted[i] += side == 0 ? eps : -eps;
      NoGradGuard no_grad;
      objective[side] = weighted_sum(fn(Variable(from_vector(shifted, input.shape()))), w).data().item();
    }
    const double numeric = (objective[0] - objective[1]) / (2 * eps);
    INFO("element " << i << ": analytic " << analytic[i] << ", numeric " << numeric);
    REQUIRE(std::abs(analytic[i] - numeric) <= 1e-7 + 1e-6 * std::abs(numeric));
  }
  // Every rank holds the same gradient (the replicated computation's).
  const std::vector<Tensor> all = comm.allgather(x.grad());
  for (const Tensor& g : all) require_equal(g, x.grad(), "the ranks' gradients agree", 0);
}

}  // namespace

TEST_CASE("regions: the feature regions' pairings pass a replicated numerical gradient check") {
  Communicator& comm = world();
  const int r = comm.rank();
  const Tensor x = f64({3, 7}, 80);
  require_replicated_gradcheck(
      comm, [&](const Variable& v) { return F::gather_from_parallel_region(comm, rank_map(F::scatter_to_parallel_region(comm, v), r), -1); },
      x, "scatter_to, then gather_from (a layer split along the features)");
  require_replicated_gradcheck(
      comm, [&](const Variable& v) { return F::reduce_from_parallel_region(comm, rank_map(F::copy_to_parallel_region(comm, v), r)); },
      x, "copy_to, then reduce_from (a row-parallel layer's partial sums)");
  require_replicated_gradcheck(
      comm, [&](const Variable& v) { return F::gather_from_parallel_region(comm, rank_map(F::copy_to_parallel_region(comm, v), r), 0); },
      x, "copy_to, then gather_from (a column-parallel layer with gather_output)");
}

TEST_CASE("regions: the sequence regions pass distributed_gradcheck (each rank's rows its own input)") {
  Communicator& comm = world();
  const int r = comm.rank();
  GradcheckOptions options;
  options.eps = 1e-6;
  options.atol = 1e-7;
  options.rtol = 1e-6;
  options.seed = 5;
  const std::int64_t length = 7;
  // Megatron's sequence-parallel block: gather the rows, a rank-specific map (the tensor-parallel
  // region), reduce-scatter back to rows. (scatter_to_sequence takes a replicated tensor, which
  // per-rank inputs are not: its values and gradient are checked above.)
  const GradcheckResult block = distributed_gradcheck(
      comm,
      [&](const Variables& xs) -> Variables {
        return {F::reduce_scatter_to_sequence_parallel_region(
            comm, rank_map(F::gather_from_sequence_parallel_region(comm, xs[0]), r))};
      },
      {f64({share_of(length, r, comm.size()).size(), 3}, 90 + r)}, options);
  INFO(block.report);
  REQUIRE(block.ok);
}

TEST_CASE("a Megatron MLP block (column- then row-parallel) equals the unsplit block") {
  Communicator& comm = world();
  const int r = comm.rank(), n = comm.size();
  const std::int64_t batch = 4, d = 5, hidden = 9;  // 9 hidden units split unevenly
  const Share mine = share_of(hidden, r, n);
  const Tensor x_full = f64({batch, d}, 60), w1 = f64({hidden, d}, 61), w2 = f64({d, hidden}, 62),
               target = f64({batch, d}, 63);
  // Unsplit: y = tanh(x W1^T) W2^T, loss = sum(y * target).
  Variable W1(w1.clone(), true), W2(w2.clone(), true), X(x_full.clone(), true);
  weighted_sum(F::matmul(F::tanh(F::matmul(X, W1, false, true)), W2, false, true), target).backward();
  // Split: W1's rows (column-parallel: its output features) and W2's columns (row-parallel).
  Variable w1_mine(w1.slice_rows(mine.begin, mine.end).clone(), true), w2_mine(columns(w2, mine), true);
  Variable x(x_full.clone(), true);
  Variable h = F::tanh(F::matmul(F::copy_to_parallel_region(comm, x), w1_mine, false, true));
  Variable y = F::reduce_from_parallel_region(comm, F::matmul(h, w2_mine, false, true));
  weighted_sum(y, target).backward();
  require_equal(x.grad(), X.grad(), "input gradient (every rank)", 1e-10);
  require_equal(w1_mine.grad(), W1.grad().slice_rows(mine.begin, mine.end).clone(), "W1 rows", 1e-10);
  require_equal(w2_mine.grad(), columns(W2.grad(), mine), "W2 columns", 1e-10);
}

TEST_CASE("regions: ranks that disagree on what they split get an error naming both") {
  Communicator& comm = world();
  if (comm.size() < 2) return;
  const int r = comm.rank();
  // Rank 0 splits 6 features, the others 7: every rank learns it in forward.
  Variable x(f64({2, r == 0 ? 6 : 7}, 70), true);
  REQUIRE_THROWS_WITH(F::scatter_to_parallel_region(comm, x),
                      Contains("scatter_to_parallel_region: the ranks disagree on what they split"));
  comm.barrier();
}

TEST_CASE("dropout_in_parallel_region: each rank's mask is its share of the unsplit dropout's mask") {
  Communicator& comm = world();
  const int r = comm.rank();
  const std::int64_t features = 9;
  const Share mine = share_of(features, r, comm.size());
  const Tensor x_full = f64({4, features}, 100), w_full = f64({4, features}, 101);
  // The unsplit run, then the split run from the same generator state.
  manual_seed(77);
  Variable x1(x_full.clone(), true);
  Variable y1 = F::dropout(x1, 0.4);
  weighted_sum(y1, w_full).backward();
  manual_seed(77);
  Variable x2(columns(x_full, mine), true);
  Variable y2 = F::dropout_in_parallel_region(comm, x2, 0.4);
  weighted_sum(y2, columns(w_full, mine)).backward();
  require_equal(y2.data(), columns(y1.data(), mine), "this rank's share of the output", 0);
  require_equal(x2.grad(), columns(x1.grad(), mine), "this rank's share of the gradient", 0);
  // The generator moved on alike: the next draw (outside the region) is the same on every rank.
  const std::vector<Tensor> next = comm.allgather(philox_uniform({3}, global_generator()));
  for (const Tensor& t : next) require_equal(t, next[0], "the generators agree after the region", 0);
  // Outside training it is the identity.
  TrainModeGuard eval(false);
  REQUIRE(F::dropout_in_parallel_region(comm, x2, 0.4).same_as(x2));
}
