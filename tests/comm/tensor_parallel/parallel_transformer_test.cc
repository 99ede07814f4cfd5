// The tensor-parallel transformer block (comm/tensor_parallel/parallel_transformer.h) on 2 and 3 ranks
// against TransformerBlock in one process, both built with the same seeded initialisers: the
// output, the input's gradient and every parameter's gradient (each rank's share of the split
// ones) agree to f64 rounding; errors for heads that do not split.
#include <catch2/catch.hpp>

#include "autograd/functions.h"
#include "comm/tensor_parallel/parallel_transformer.h"
#include "comm/tensor_parallel/tensor_parallel_checkpoint.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;
using test_util::values;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

TransformerBlockOptions block_options() {
  TransformerBlockOptions options;
  options.heads = 6;      // splits over 2 and 3 ranks
  options.mlp_ratio = 2;  // hidden 24
  options.linear.dtype = DType::f64;
  options.linear.initialW = initializers::seeded(7, initializers::lecun_normal());
  options.linear.initial_bias = initializers::seeded(8, initializers::normal(0.1));
  return options;
}

// Columns [begin, end) of a 2-D tensor, as doubles in row-major order.
std::vector<double> columns(const Tensor& t, std::int64_t begin, std::int64_t end) {
  const std::vector<double> all = values(t);
  const std::int64_t n = t.shape()[1];
  std::vector<double> out;
  for (std::int64_t r = 0; r < t.shape()[0]; ++r)
    for (std::int64_t c = begin; c < end; ++c) out.push_back(all[r * n + c]);
  return out;
}

void require_close(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(want[i]).epsilon(1e-10).margin(1e-12));
}

}  // namespace

TEST_CASE("make_parallel_transformer_block equals TransformerBlock: values and every gradient") {
  auto comm = world();
  const int rank = comm->rank(), ranks = comm->size();
  const std::int64_t dim = 12, B = 2, T = 5;
  auto parallel = make_parallel_transformer_block(comm, dim, block_options());
  TransformerBlock single(dim, block_options());
  const Tensor x = test_util::uniform({B, T, dim}, 3, -1, 1, DType::f64);
  const Tensor w = test_util::uniform({B, T, dim}, 4, 0.5, 2.0, DType::f64);

  Variable xp(x.clone(), true), xs(x.clone(), true);
  const Variable yp = (*parallel)(xp), ys = single(xs);
  require_close(values(yp.data()), values(ys.data()), "output");
  F::sum(F::mul(yp, Variable(w))).backward();
  F::sum(F::mul(ys, Variable(w))).backward();
  require_close(values(xp.grad()), values(xs.grad()), "input gradient");

  // Each parameter's gradient: replicated ones whole; split ones this rank's share.
  const Share qkv = share_of(3 * dim, rank, ranks), heads = share_of(dim, rank, ranks),
              hidden = share_of(2 * dim, rank, ranks);
  std::map<std::string, Tensor> want;
  for (const auto& [name, p] : single.namedparams()) want[name] = p.grad();
  for (const auto& [name, p] : parallel->namedparams()) {
    const Tensor& full = want.at(name);
    std::vector<double> expected;
    if (name == "attention/qkv/W" || name == "attention/qkv/b") expected = values(full.slice_rows(qkv.begin, qkv.end));
    else if (name == "mlp/fc1/W" || name == "mlp/fc1/b") expected = values(full.slice_rows(hidden.begin, hidden.end));
    else if (name == "attention/proj/W") expected = columns(full, heads.begin, heads.end);
    else if (name == "mlp/fc2/W") expected = columns(full, hidden.begin, hidden.end);
    else expected = values(full);  // layer norms, proj/b, fc2/b: replicated
    require_close(values(p.grad()), expected, "gradient of " + name + " on rank " + std::to_string(rank));
  }
  // The gathered parameters are the single block's.
  const NamedTensors whole = gather_tensor_parallel_params(*parallel);
  std::map<std::string, Tensor> initial;
  for (const auto& [name, p] : single.namedparams()) initial[name] = p.data();
  REQUIRE(whole.size() == initial.size());
  for (const auto& [name, value] : whole) REQUIRE(values(value) == values(initial.at(name)));
}

TEST_CASE("ParallelSelfAttention: heads that do not split over the ranks are an error on every rank") {
  auto comm = world();
  const int ranks = comm->size();
  const std::int64_t heads = ranks + 1;  // never a multiple of 2 or 3 ranks
  REQUIRE_THROWS_WITH(ParallelSelfAttention(comm, 2 * heads, heads),
                      Contains(std::to_string(heads) + " heads do not split evenly over the " + std::to_string(ranks)));
}
