// Tensor parallelism: Megatron's MLP block (ColumnParallelLinear 1024 -> 4096, GELU's stand-in
// tanh, RowParallelLinear 4096 -> 1024; SGD), batch 64, f32:
//   tp.mlp.block.train        2 ranks x 1 thread, each rank half of both weights; a step is
//                             forward + backward + SGD update, with one allreduce of the block's
//                             output [64, 1024] forward and one of the input's gradient backward.
//   tp.mlp.block.single.t<T>  the same block unsplit in one process, T = 1, 2 threads (run with 1
//                             rank; bench.sh runs both).
// Each tp line also carries what the two allreduces of [64, 1024] cost alone (allreduce_ms: the
// same communicator, the same sizes, measured apart) and the weights each rank holds (param_mb).
// As mlp_parallel_bench: a barrier before every step, the max over ranks, median of the timed steps.
//
//   bazel build -c opt //bench:tensor_parallel_bench
//   OMP_NUM_THREADS=1 /usr/bin/mpiexec.mpich -n 2 bazel-bin/bench/tensor_parallel_bench
//   bazel-bin/bench/tensor_parallel_bench     (one process)
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "autograd/functions.h"
#include "bench/bench_util.h"
#include "bench/mpi_timing.h"
#include "comm/tensor_parallel/tensor_parallel_linear.h"
#include "comm/transport/communicator.h"
#include "core/ops.h"
#include "core/random.h"
#include "layers/links/linear.h"
#include "layers/optimizers/sgd.h"

using namespace tandem;
namespace F = tandem::functions;

namespace {

constexpr std::int64_t B = 64, D = 1024, H = 4096;

int warmup() { return 5; }
int iters() { return bench::scaled(30); }

std::int64_t param_bytes(const Link& link) {
  std::int64_t bytes = 0;
  for (const Variable& p : link.params()) bytes += static_cast<std::int64_t>(p.data().nbytes());
  return bytes;
}

void single(int threads) {
  bench::set_threads(threads);
  manual_seed(1);
  auto block = std::make_shared<ChainList>();
  auto fc1 = block->append(std::make_shared<Linear>(D, H));
  auto fc2 = block->append(std::make_shared<Linear>(H, D));
  SGD opt(0.01);
  opt.setup(block);
  Generator gen(2);
  const Tensor x = randn({B, D}, gen), w = randn({B, D}, gen);
  const bench::Stats s = bench::measure(warmup(), iters(), [&] {
    block->cleargrads();
    F::sum(F::mul((*fc2)(F::tanh((*fc1)(Variable(x)))), Variable(w))).backward();
    opt.update();
  });
  bench::print_stats("tp.mlp.block.single.t" + std::to_string(threads), bench::threads_tag(threads) + " batch=64", s);
  std::printf(" param_mb=%.1f\n", param_bytes(*block) / 1e6);
  std::fflush(stdout);
}

void tensor_parallel(const CommunicatorPtr& comm) {
  bench::set_threads(1);
  manual_seed(1);
  auto block = std::make_shared<ChainList>();
  auto fc1 = block->append(std::make_shared<ColumnParallelLinear>(comm, D, H));
  auto fc2 = block->append(std::make_shared<RowParallelLinear>(comm, H, D));
  SGD opt(0.01);
  opt.setup(block);
  Generator gen(2);
  const Tensor x = randn({B, D}, gen), w = randn({B, D}, gen);
  const bench::Stats s = bench::timed_steps(warmup(), iters(), [&] {
    block->cleargrads();
    F::sum(F::mul((*fc2)(F::tanh((*fc1)(Variable(x)))), Variable(w))).backward();
    opt.update();
  });
  // What the block's two allreduces cost by themselves.
  const Tensor message = randn({B, D}, gen);
  const bench::Stats a = bench::timed_steps(warmup(), iters(), [&] {
    comm->allreduce(message, AllreduceOp::sum);
    comm->allreduce(message, AllreduceOp::sum);
  });
  if (comm->rank() != 0) return;
  bench::print_stats("tp.mlp.block.train", bench::threads_tag(1) + " ranks=" + std::to_string(comm->size()) +
                                               " batch=64", s);
  std::printf(" allreduce_ms=%.3f param_mb=%.1f\n", a.median_ms, param_bytes(*block) / 1e6);
  std::fflush(stdout);
}

}  // namespace

int main() {
  CommunicatorPtr comm = create_communicator("naive");
  if (comm->size() == 1) {
    for (int threads : bench::thread_list()) single(threads);
  } else {
    tensor_parallel(comm);
  }
  return 0;
}
