// Expert parallelism: a Mixture-of-Experts layer (comm/moe/mixture_of_experts.h) of E = 8
// experts, each an MLP 512 -> 2048 -> 512 (GELU), top-1, a training step (forward, backward, SGD)
// in f32, the loss the mean of the output times fixed random weights (small gradients: the router
// keeps its routing over the timed steps):
//   moe.train.single.t<T>.<mode>.<routing>   the whole layer in one process, T = 1, 2 threads,
//                                            on 2 x 512 tokens (run with 1 rank)
//   moe.train.ep2.<mode>.<routing>           2 ranks x 1 thread, 4 experts and 512 tokens each:
//                                            the same work, with dispatch and combine by alltoallv
//   moe.alltoallv.<routing>                  (2 ranks) one dispatch's alltoallv alone, of the
//                                            step's own row counts, beside raw MPI_Alltoallv of
//                                            the same bytes, interleaved in the same run (mpi_ms, ratio)
// mode: dropless, or cf1.25 (capacity factor 1.25); routing: balanced (a random router) or
// skewed (a router that favours expert 0, which rank 0 holds: a straggler). Each line carries
// max_load (the busiest expert's share x E: 1 when even) and dropped (assignments dropped).
//
//   bazel build -c opt //bench:moe_bench
//   bazel-bin/bench/moe_bench; OMP_NUM_THREADS=1 /usr/bin/mpiexec.mpich -n 2 bazel-bin/bench/moe_bench
#include <mpi.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "bench/bench_util.h"
#include "bench/mpi_timing.h"
#include "comm/moe/mixture_of_experts.h"
#include "core/ops.h"
#include "core/random.h"
#include "layers/initializers.h"
#include "layers/links/transformer.h"
#include "layers/optimizers/sgd.h"

using namespace tandem;
namespace F = tandem::functions;

namespace {

constexpr std::int64_t kDim = 512, kHidden = 2048, kExperts = 8, kTokensPerRank = 512;

int warmup() { return 2; }
int iters() { return bench::scaled(10); }

struct Case {
  std::string mode, routing;
  double capacity_factor;
  bool skewed;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {{"dropless", "balanced", 0.0, false},
                                        {"dropless", "skewed", 0.0, true},
                                        {"cf1.25", "balanced", 1.25, false},
                                        {"cf1.25", "skewed", 1.25, true}};
  return all;
}

// The layer over comm (null: one process), with the experts seeded by index so that every
// rank count builds the same experts.
std::shared_ptr<MixtureOfExperts> make_layer(CommunicatorPtr comm, const Case& c) {
  MoEOptions options;
  options.experts = kExperts;
  options.capacity_factor = c.capacity_factor;
  options.router.initialW = initializers::seeded(1, initializers::lecun_normal());
  auto moe = std::make_shared<MixtureOfExperts>(comm, kDim, options, [](std::int64_t e) -> LinkPtr {
    LinearOptions linear;
    linear.initialW = initializers::seeded(100 + e, initializers::lecun_normal());
    return std::make_shared<TransformerMLP>(kDim, kHidden, linear);
  });
  if (c.skewed) {
    // Feature 0 of every token is 1 (see tokens()); a weight of 1.5 on it tilts expert 0's
    // score so that it takes about half of the tokens.
    Tensor W = moe->get<Linear>("router")->param("W").data();
    W.data<float>()[0] = 1.5f;
  }
  return moe;
}

Tensor tokens(std::int64_t n, std::uint64_t seed) {
  Generator generator(seed);
  Tensor x = randn({n, kDim}, generator);
  float* p = x.data<float>();
  for (std::int64_t i = 0; i < n; ++i) p[i * kDim] = 1.0f;
  return x;
}

std::string load_tags(const MixtureOfExperts& moe) {
  char text[96];
  std::snprintf(text, sizeof text, " max_load=%.2f dropped=%.0f", moe.observation().at("moe/max_load"),
                moe.observation().at("moe/dropped"));
  return text;
}

void single(int threads) {
  bench::set_threads(threads);
  for (const Case& c : cases()) {
    auto moe = make_layer(nullptr, c);
    SGD opt(0.01);
    opt.setup(moe);
    const Tensor x = tokens(2 * kTokensPerRank, 7);
    Generator generator(8);
    const Tensor w = randn({2 * kTokensPerRank, kDim}, generator);
    const bench::Stats s = bench::measure(warmup(), iters(), [&] {
      moe->cleargrads();
      F::mean(F::mul((*moe)(Variable(x)), Variable(w))).backward();
      opt.update();
    });
    bench::print_stats("moe.train.single.t" + std::to_string(threads) + "." + c.mode + "." + c.routing,
                       bench::threads_tag(threads) + " experts=8 dim=512 hidden=2048 tokens=1024", s);
    std::printf("%s\n", load_tags(*moe).c_str());
    std::fflush(stdout);
  }
}

// The row counts this rank's tokens send to each rank under top-1 routing (what the layer's
// dispatch sends): from the router's scores.
std::vector<std::int64_t> dispatch_counts(MixtureOfExperts& moe, const Tensor& x, int ranks) {
  NoGradGuard no_grad;
  const std::vector<float> scores = moe.get<Linear>("router")->forward(Variable(x)).data().to_vector<float>();
  std::vector<std::int64_t> counts(static_cast<std::size_t>(ranks), 0);
  for (std::int64_t i = 0; i < x.shape()[0]; ++i) {
    std::int64_t best = 0;
    for (std::int64_t e = 1; e < kExperts; ++e)
      if (scores[i * kExperts + e] > scores[i * kExperts + best]) best = e;
    ++counts[static_cast<std::size_t>(best / (kExperts / ranks))];
  }
  return counts;
}

void expert_parallel(const CommunicatorPtr& comm) {
  bench::set_threads(1);
  const int rank = comm->rank(), ranks = comm->size();
  for (const Case& c : cases()) {
    auto moe = make_layer(comm, c);
    SGD opt(0.01);
    opt.setup(moe);
    // This rank's half of the one-process run's tokens.
    const Tensor all = tokens(2 * kTokensPerRank, 7);
    const Tensor x = all.slice_rows(rank * kTokensPerRank, (rank + 1) * kTokensPerRank).clone();
    Generator generator(8);
    const Tensor w = randn({2 * kTokensPerRank, kDim}, generator)
                         .slice_rows(rank * kTokensPerRank, (rank + 1) * kTokensPerRank)
                         .clone();
    const bench::Stats s = bench::timed_steps(warmup(), iters(), [&] {
      moe->cleargrads();
      F::mean(F::mul((*moe)(Variable(x)), Variable(w))).backward();
      opt.update();
    });
    const std::string load = load_tags(*moe);
    if (rank == 0) {
      bench::print_stats("moe.train.ep" + std::to_string(ranks) + "." + c.mode + "." + c.routing,
                         bench::threads_tag(1) + " ranks=" + std::to_string(ranks) +
                             " experts=8 dim=512 hidden=2048 tokens=1024",
                         s);
      std::printf("%s\n", load.c_str());
      std::fflush(stdout);
    }
    if (c.mode != "dropless") continue;

    // One dispatch's alltoallv of these counts, and raw MPI_Alltoallv of the same bytes.
    const std::vector<std::int64_t> counts = dispatch_counts(*moe, x, ranks);
    std::int64_t rows = 0;
    for (std::int64_t n : counts) rows += n;
    const Tensor send = x.slice_rows(0, rows);
    const std::vector<std::int64_t> received = comm->alltoallv(send, counts).recv_counts;
    std::vector<int> sc(ranks), sd(ranks), rc(ranks), rd(ranks);
    int in = 0, out = 0;
    for (int r = 0; r < ranks; ++r) {
      sc[r] = static_cast<int>(counts[r] * kDim * 4), sd[r] = out, out += sc[r];
      rc[r] = static_cast<int>(received[r] * kDim * 4), rd[r] = in, in += rc[r];
    }
    std::vector<char> recv_buffer(static_cast<std::size_t>(in));
    // Interleaved, in alternating order (as comm_bench): the two see the same machine. A 0.2 ms
    // operation needs many rounds for a stable median on a shared 2-core machine.
    const std::function<void()> variants[2] = {
        [&] { comm->alltoallv(send, counts); },
        [&] {
          MPI_Alltoallv(send.raw_data(), sc.data(), sd.data(), MPI_BYTE, recv_buffer.data(), rc.data(), rd.data(),
                        MPI_BYTE, MPI_COMM_WORLD);
        }};
    std::vector<double> times[2];
    const int rounds = bench::scaled(200);
    for (int i = 0; i < warmup() + rounds; ++i)
      for (int k = 0; k < 2; ++k) {
        const int v = i % 2 ? 1 - k : k;
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        variants[v]();
        if (i >= warmup()) times[v].push_back((MPI_Wtime() - t0) * 1e3);
      }
    bench::Stats stats[2];
    for (int v = 0; v < 2; ++v) {
      std::vector<double> slowest(times[v].size());
      MPI_Allreduce(times[v].data(), slowest.data(), static_cast<int>(slowest.size()), MPI_DOUBLE, MPI_MAX,
                    MPI_COMM_WORLD);
      stats[v] = bench::summarize(std::move(slowest));
    }
    const bench::Stats &t = stats[0], &m = stats[1];
    if (rank == 0) {
      const std::string tags = "ranks=" + std::to_string(ranks) + " send_bytes=" + std::to_string(out);
      bench::print_stats("moe.alltoallv." + c.routing, tags, t);
      std::printf(" mpi_ms=%.4f ratio=%.3f\n", m.median_ms, t.median_ms / m.median_ms);
      // The raw line, as comm_bench prints its raw MPI lines, for scripts/bench.sh's targets.
      std::printf("name=mpi.moe.alltoallv.%s lib=mpi %s iters=%d median_ms=%.4f min_ms=%.4f max_ms=%.4f\n",
                  c.routing.c_str(), tags.c_str(), m.iters, m.median_ms, m.min_ms, m.max_ms);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main() {
  CommunicatorPtr comm = create_communicator("naive");
  if (comm->size() == 1) {
    for (int threads : bench::thread_list()) single(threads);
  } else {
    expert_parallel(comm);
  }
  return 0;
}
