// Across hosts: what the network between hosts costs, flat against hierarchical. Run it under
// scripts/sim_hosts.sh (2 hosts x 2 ranks, 1 Gbit/s links), and on one host for the baseline:
//   bazel build -c opt //bench:hosts_bench
//   OMP_NUM_THREADS=1 scripts/sim_hosts.sh --hosts 2 --ranks-per-host 2 --rate 1gbit -- bazel-bin/bench/hosts_bench
//   OMP_NUM_THREADS=1 /usr/bin/mpiexec.mpich -n 4 bazel-bin/bench/hosts_bench      (one host)
// Lines (the bench line format; tags hosts=<H> per_host=<k>):
//   hosts.pingpong.<inter|intra>.<size>   raw MPI one-way time, world rank 0 to the first rank of
//                                         the last host (inter) or to rank 1 (intra, on its host)
//   hosts.allreduce.<mpi|flat|hierarchical>.<1MB|16MB>   raw MPI_Allreduce, then the "naive" and
//                                         "hierarchical" communicators' allreduce (f32)
//   hosts.dp.train.<flat|hierarchical>   a data-parallel SGD step of an MLP 784-1000-1000-10
//                                         (1.8 M parameters, 7.2 MB of gradients), 100 per rank,
//                                         buckets of 4 MiB averaged while backward runs
//   hosts.model.<inter|intra>            alpha (us) and beta (us per MB) of the ping-pongs (see fit),
//                                         and what the model predicts
//                                         for the allreduces measured here (predicted_ms beside
//                                         the measured lines) and for 1,024 ranks (128 hosts x 8)
// A step or collective follows a barrier and its time is the slowest rank's (bench/mpi_timing.h).
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "bench/bench_util.h"
#include "bench/mpi_timing.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "comm/transport/communicator.h"
#include "core/random.h"
#include "layers/links/linear.h"
#include "layers/optimizers/sgd.h"

using namespace tandem;
namespace F = tandem::functions;

namespace {

struct Fit {
  double alpha_us = 0, beta_us_per_mb = 0;
};

// A barrier that sleeps while it waits: the ranks outside a ping-pong wait in it, so that on a
// machine with fewer cores than ranks they leave the cores to the two that measure.
void sleeping_barrier() {
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  int done = 0;
  while (MPI_Test(&request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) usleep(200);
}

// One-way time (ms) of a ping-pong of `bytes` between world ranks a and b (others wait).
bench::Stats pingpong(int a, int b, std::size_t bytes, int rank) {
  std::vector<char> buffer(std::max<std::size_t>(bytes, 1));
  const int rounds = static_cast<int>(std::clamp<std::size_t>((std::size_t(16) << 20) / std::max<std::size_t>(bytes, 1), 1, 200));
  std::vector<double> samples;
  for (int s = 0; s < 2 + bench::scaled(10); ++s) {
    sleeping_barrier();
    const double t0 = MPI_Wtime();
    for (int r = 0; r < rounds; ++r) {
      if (rank == a) {
        MPI_Send(buffer.data(), static_cast<int>(bytes), MPI_BYTE, b, 0, MPI_COMM_WORLD);
        MPI_Recv(buffer.data(), static_cast<int>(bytes), MPI_BYTE, b, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == b) {
        MPI_Recv(buffer.data(), static_cast<int>(bytes), MPI_BYTE, a, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buffer.data(), static_cast<int>(bytes), MPI_BYTE, a, 0, MPI_COMM_WORLD);
      }
    }
    if (s >= 2) samples.push_back((MPI_Wtime() - t0) * 1e3 / (2.0 * rounds));
    sleeping_barrier();
  }
  double median = bench::summarize(samples).median_ms;
  MPI_Bcast(&median, 1, MPI_DOUBLE, a, MPI_COMM_WORLD);
  bench::Stats s = bench::summarize(samples);
  s.median_ms = median;
  return s;
}

// Hockney's alpha-beta model from the ping-pongs (sizes ascending): beta from the two largest
// (the bandwidth regime), alpha from the smallest. A least-squares fit over every size does
// worse here: tc's token bucket lets messages up to its burst (1 MB) through faster than the
// rate, so no single line fits both ends.
Fit fit(const std::vector<double>& bytes, const std::vector<double>& ms) {
  const std::size_t n = bytes.size();
  Fit f;
  f.beta_us_per_mb = (ms[n - 1] - ms[n - 2]) * 1e3 / ((bytes[n - 1] - bytes[n - 2]) / 1e6);
  f.alpha_us = ms[0] * 1e3 - f.beta_us_per_mb * bytes[0] / 1e6;
  return f;
}

// The model (ms) of an allreduce of `mb` MB over H hosts of k ranks (ranks host by host, as
// mpiexec places them), with recursive halving and doubling (MPICH's algorithm for large data):
// flat: its first log2(k) steps pair ranks of one host, the rest ranks of different hosts, each
// rank then holding 1/k of the data, so a host's link carries 2 (H-1)/H of the data in all and
// 2 log2(H) messages per rank; hierarchical: a reduce and a broadcast within the host (the whole
// data, log2(k) steps each), and the same exchange among the H first ranks alone. Between hosts
// both send the same bytes: the hierarchical one sends k times fewer messages at once (it wins
// on latency), and pays the within-host stages (which its pipeline hides in part; the model
// adds them in full).
double flat_ms(const Fit& inter, const Fit& intra, double mb, int hosts, int k) {
  const double lk = std::ceil(std::log2(k)), lh = std::ceil(std::log2(hosts)), h = hosts;
  const double within = 2 * lk * intra.alpha_us + 2.0 * (k - 1) / k * mb * intra.beta_us_per_mb;
  const double between = 2 * lh * inter.alpha_us + 2 * (h - 1) / h * mb * inter.beta_us_per_mb;
  return (within + between) / 1e3;
}
double hierarchical_ms(const Fit& inter, const Fit& intra, double mb, int hosts, int k) {
  const double lk = std::ceil(std::log2(k)), lh = std::ceil(std::log2(hosts)), h = hosts;
  const double within = 2 * lk * (intra.alpha_us + mb * intra.beta_us_per_mb);
  const double between = 2 * lh * inter.alpha_us + 2 * (h - 1) / h * mb * inter.beta_us_per_mb;
  return (within + between) / 1e3;
}

}  // namespace

int main() {
  CommunicatorPtr flat = create_communicator("naive");
  CommunicatorPtr hierarchical = create_communicator("hierarchical");
  const int rank = flat->rank(), size = flat->size();
  const int hosts = flat->inter_size(), k = flat->intra_size();
  char tags[96];
  std::snprintf(tags, sizeof tags, "ranks=%d hosts=%d per_host=%d dtype=f32", size, hosts, k);
  auto line = [&](const std::string& id, const bench::Stats& s, const std::string& extra) {
    if (rank != 0) return;
    bench::print_stats(id, tags, s);
    std::printf("%s\n", extra.c_str());
    std::fflush(stdout);
  };

  // Ping-pongs: to the first rank of the last host, and to rank 1 when it shares rank 0's host.
  const int inter_peer = hosts > 1 ? size - k : -1;
  const int intra_peer = k > 1 ? 1 : -1;
  const std::vector<std::size_t> sizes = {4, 4096, 65536, 1 << 20, 16 << 20};
  Fit inter, intra;
  for (int peer : {inter_peer, intra_peer}) {
    if (peer < 0) continue;
    const std::string where = peer == inter_peer ? "inter" : "intra";
    std::vector<double> xs, ys;
    for (std::size_t bytes : sizes) {
      const bench::Stats s = pingpong(0, peer, bytes, rank);
      const std::string label = bytes < 1024 ? std::to_string(bytes) + "B"
                                : bytes < (1 << 20) ? std::to_string(bytes >> 10) + "KB"
                                                    : std::to_string(bytes >> 20) + "MB";
      line("hosts.pingpong." + where + "." + label, s, "");
      xs.push_back(static_cast<double>(bytes));
      ys.push_back(s.median_ms);
    }
    (peer == inter_peer ? inter : intra) = fit(xs, ys);
  }

  for (double mb : {1.0, 16.0}) {
    const std::int64_t n = static_cast<std::int64_t>(mb * (1 << 20) / 4);
    Generator generator(7 + static_cast<std::uint64_t>(rank));
    const Tensor x = rand_uniform({n}, generator);
    Tensor raw_out(Shape{n}, DType::f32);
    const int iters = bench::scaled(mb < 4 ? 20 : 8);
    const std::string label = mb < 4 ? "1MB" : "16MB";
    const bench::Stats raw = bench::timed_steps(2, iters, [&] {
      MPI_Allreduce(x.raw_data(), raw_out.raw_data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    });
    const bench::Stats f = bench::timed_steps(2, iters, [&] { flat->allreduce(x); });
    const bench::Stats h = bench::timed_steps(2, iters, [&] { hierarchical->allreduce(x); });
    const double mbytes = mb * (1 << 20) / 1e6;
    char extra[160];
    std::snprintf(extra, sizeof extra, " predicted_ms=%.3f", flat_ms(inter, intra, mbytes, hosts, k));
    line("hosts.allreduce.mpi." + label, raw, extra);
    std::snprintf(extra, sizeof extra, " ratio_to_mpi=%.3f predicted_ms=%.3f", f.median_ms / raw.median_ms,
                  flat_ms(inter, intra, mbytes, hosts, k));
    line("hosts.allreduce.flat." + label, f, extra);
    std::snprintf(extra, sizeof extra, " ratio_to_flat=%.3f predicted_ms=%.3f", h.median_ms / f.median_ms,
                  hierarchical_ms(inter, intra, mbytes, hosts, k));
    line("hosts.allreduce.hierarchical." + label, h, extra);
  }

  // The data-parallel step, flat and hierarchical.
  for (const auto& [name, comm] : {std::make_pair(std::string("flat"), flat), std::make_pair(std::string("hierarchical"), hierarchical)}) {
    manual_seed(0);
    auto model = std::make_shared<ChainList>();
    model->append(std::make_shared<Linear>(784, 1000));
    model->append(std::make_shared<Linear>(1000, 1000));
    model->append(std::make_shared<Linear>(1000, 10));
    // Buckets of 4 MiB averaged while backward runs (the default DataParallelOptions), as
    // train_mnist_data_parallel runs them.
    auto optimizer = create_multi_node_optimizer(std::make_shared<SGD>(0.01), comm, DataParallelOptions{});
    optimizer->setup(model);
    Generator generator(100 + static_cast<std::uint64_t>(rank));
    Variable x(rand_uniform({100, 784}, generator));
    Variable t(randn({100, 10}, generator));
    auto forward = [&] {
      Variable h = x;
      for (std::size_t l = 0; l < 3; ++l) {
        h = (*(*model)[l])(h);
        if (l < 2) h = F::relu(h);
      }
      return F::mean_squared_error(h, t);
    };
    const bench::Stats s = bench::timed_steps(3, bench::scaled(15), [&] { optimizer->update(forward); });
    char extra[64];
    std::snprintf(extra, sizeof extra, " samples_per_s=%.0f", 100.0 * size / (s.median_ms / 1e3));
    line("hosts.dp.train." + name, s, extra);
  }

  if (rank == 0 && hosts > 1) {
    std::printf("name=tandem.hosts.model.inter alpha_us=%.2f beta_us_per_mb=%.1f\n", inter.alpha_us, inter.beta_us_per_mb);
    if (k > 1) std::printf("name=tandem.hosts.model.intra alpha_us=%.2f beta_us_per_mb=%.1f\n", intra.alpha_us, intra.beta_us_per_mb);
    // 1,024 ranks: 128 hosts x 8, the gradients of a 100 M-parameter f32 model (400 MB), and a
    // pipeline's activation of 4 MB (a microbatch of 8 x 128 tokens x 1024 features, f32).
    std::printf("name=tandem.hosts.model.predict ranks=1024 hosts=128 per_host=8 allreduce_400MB_flat_ms=%.0f "
                "allreduce_400MB_hierarchical_ms=%.0f p2p_4MB_inter_ms=%.2f p2p_4MB_intra_ms=%.2f\n",
                flat_ms(inter, intra, 400, 128, 8), hierarchical_ms(inter, intra, 400, 128, 8),
                (inter.alpha_us + 4 * inter.beta_us_per_mb) / 1e3, (intra.alpha_us + 4 * intra.beta_us_per_mb) / 1e3);
  }
  return 0;
}
