// Data parallelism on a model where communication matters: an MLP of 8 Linear(2048, 2048) with
// ReLU between (33.6 M parameters, 134 MB of f32 weights), the mean squared error against random
// targets, Adam (alpha 1e-4), batch 64 per rank, f32, 1 thread per rank. A step is
// Optimizer::update(lossfun) (clear grads + forward + loss + backward + gradient sync + update)
// with create_multi_node_optimizer(adam, comm, DataParallelOptions) in one of five modes:
//   dp.big.train.after     zero 0, every bucket's allreduce after backward (overlap = false)
//   dp.big.train.overlap   zero 0, buckets started while backward runs (the default options)
//   dp.big.train.zero1     ZeRO-1: Adam's state sharded over the ranks, with overlap
//   dp.big.train.zero2     ZeRO-2: also the gradients (reduce-scatter), with overlap
//   dp.big.train.zero3     ZeRO-3: also the parameters (each link's gathered just before use),
//                          with overlap; a library that refuses zero = 3 (before 438d47d) prints
//                          a "# dp.big.train.zero3 skipped: ..." line instead
// At 2 ranks the ids are as above; at N != 2 ranks they end in ".r<N>" (dp.big.train.zero1.r4).
// As the other MPI benches: a barrier before every step, a step's time is the slowest rank's,
// median of 3 warm-up and 20 timed steps (bench/mpi_timing.h). Besides samples_per_s and the last
// step's loss (CHECK=FAIL, and exit status 1, if it is not finite), each line carries:
//   peak_rss_mb  the largest VmHWM (/proc/self/status) of the ranks after the mode's last step
//   base_rss_mb  the largest VmRSS of the ranks when the mode began (the binary, MPI, the data;
//                no model yet): peak_rss_mb - base_rss_mb is what the mode added
//   live_mb      the largest bytes that tensors hold after the last step (live_storage_bytes):
//                what stays between steps (weights, gradients, optimizer state, 4 MB of data),
//                without a step's transient buffers or what malloc keeps
//   peak_live_mb the largest bytes tensors held at once during the mode (peak_live_storage_bytes):
//                peak_rss_mb - base_rss_mb - peak_live_mb is what the mode's memory outside
//                tensors added at most
//   cache_mb     freed tensor blocks the CPU block cache keeps after the last step
//   malloc_free_mb  free bytes tcmalloc keeps resident after the last step
//                (core/memory_stats.h; each of these the largest over the ranks)
//   theory_mb    what a rank holds by the formula: per parameter 4 B of weights, 4 B of gradient
//                and 8 B of Adam state, the sharded parts divided by the ranks (zero1 the 8 B,
//                zero2 the 4 + 8 B, zero3 all 16 B)
//   rss_of       "mode" when the process ran this mode alone (BENCH_ONLY names it), else "run":
//                VmHWM never goes down, so in a run of every mode a line carries the peak of the
//                modes before it too, and only its time means something
//   background_polls  rank 0's calls into MPI by the background progress helper during the mode
//                (comm/transport/background_progress.h; 0 where MPI runs below THREAD_MULTIPLE)
// MB are 10^6 bytes.
//
//   bazel build -c opt //bench:data_parallel_bench
//   OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1 /usr/bin/mpiexec.mpich -n 2 $BIN/bench/data_parallel_bench
//   (BIN=$(bazel info -c opt bazel-bin))
//   BENCH_ONLY=zero1 (a word among after overlap zero1 zero2 zero3): that mode alone, for its
//   memory; scripts/bench.sh (BENCH_ONLY=dp) runs every mode so, at 2 ranks and at 4.
//   BENCH_ONLY without any of these words runs every mode. BENCH_SCALE=0.3: fewer timed steps
//   (never below 3). BENCH_BATCH=512: the batch per rank. BENCH_BUCKET_MB=16: the bucket size
//   (DataParallelOptions::bucket_mb, 4 unless set; bucket_mb= in the line).
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "bench/bench_util.h"
#include "bench/mpi_timing.h"
#include "comm/data_parallel/data_parallel_options.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "comm/transport/background_progress.h"
#include "comm/transport/communicator.h"
#include "core/error.h"
#include "core/memory_stats.h"
#include "core/random.h"
#include "core/storage.h"
#include "layers/links/linear.h"
#include "layers/optimizers/adam.h"

using namespace tandem;
namespace F = tandem::functions;

namespace {

constexpr std::int64_t kDefaultBatch = 64, kWidth = 2048, kLayers = 8, kBatches = 4;

// BENCH_BATCH=512: the batch per rank (64 unless set). Across slow links the step needs more
// compute than communication before overlapping the two can pay (see docs/across-hosts.md); ids
// then end in ".b<batch>", so they never meet the batch-64 references.
std::int64_t batch() {
  static const std::int64_t b = [] {
    const char* e = std::getenv("BENCH_BATCH");
    const long long v = e ? std::atoll(e) : kDefaultBatch;
    return v > 0 ? static_cast<std::int64_t>(v) : kDefaultBatch;
  }();
  return b;
}

int warmup() { return 3; }
int iters() { return bench::scaled(20); }

class BigMLP : public Chain {
 public:
  BigMLP() {
    // Registered in the order they run: the gradient buckets follow backward's order.
    for (std::int64_t i = 0; i < kLayers; ++i)
      layers_.push_back(add_link("l" + std::to_string(i), std::make_shared<Linear>(kWidth, kWidth)));
  }
  Variable forward(const Variable& x) override {
    Variable h = x;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      h = (*layers_[i])(h);
      if (i + 1 < layers_.size()) h = F::relu(h);
    }
    return h;
  }

 private:
  std::vector<std::shared_ptr<Linear>> layers_;
};

struct Mode {
  std::string name;
  bool overlap;
  int zero;
};

const std::vector<Mode>& modes() {
  static const std::vector<Mode> all = {
      {"after", false, 0}, {"overlap", true, 0}, {"zero1", true, 1}, {"zero2", true, 2}, {"zero3", true, 3}};
  return all;
}

// The modes that BENCH_ONLY's words name; every mode when it names none.
std::vector<Mode> selected_modes(bool* alone) {
  const char* only = std::getenv("BENCH_ONLY");
  std::vector<Mode> out;
  if (only) {
    std::istringstream words(only);
    std::string w;
    while (words >> w)
      for (const Mode& m : modes())
        if (m.name == w) out.push_back(m);
  }
  *alone = out.size() == 1;
  return out.empty() ? modes() : out;
}

double max_over_ranks(double v) {
  double out = v;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

// Bytes per rank by the formula: weights 4 B, gradients 4 B, Adam's two moments 8 B per
// parameter; ZeRO stage s divides the last s of (state, gradients, weights) by the ranks.
double theory_bytes(std::int64_t params, int zero, int ranks) {
  const double n = ranks, weights = 4, grads = 4, state = 8;
  const double per_param =
      (zero >= 3 ? weights / n : weights) + (zero >= 2 ? grads / n : grads) + (zero >= 1 ? state / n : state);
  return per_param * static_cast<double>(params);
}

struct Context {
  CommunicatorPtr comm;
  int rank = 0, ranks = 1;
  std::string tags;
  bool alone = false;  // this process runs one mode: its peak RSS is that mode's
  bool failed = false;
};

void run_mode(Context& c, const Mode& mode) {
  const std::string id = "dp.big.train." + mode.name + (c.ranks == 2 ? "" : ".r" + std::to_string(c.ranks)) +
                         (batch() == kDefaultBatch ? "" : ".b" + std::to_string(batch()));
  // Different data on every rank, the same initial weights: the first update goes ahead at once.
  Generator generator(1 + static_cast<std::uint64_t>(c.rank));
  std::vector<Variable> xs, ts;
  for (std::int64_t i = 0; i < kBatches; ++i) {
    xs.emplace_back(rand_uniform({batch(), kWidth}, generator));
    ts.emplace_back(randn({batch(), kWidth}, generator));
  }
  const double base_mb = max_over_ranks(host_memory_stats().rss / 1e6);
  reset_peak_live_storage_bytes(Device::cpu());
  manual_seed(0);
  auto model = std::make_shared<BigMLP>();
  DataParallelOptions options;
  options.overlap = mode.overlap;
  options.zero = mode.zero;
  if (const char* mb = std::getenv("BENCH_BUCKET_MB")) options.bucket_mb = std::atof(mb);
  std::shared_ptr<Optimizer> optimizer;
  try {
    optimizer = create_multi_node_optimizer(std::make_shared<Adam>(1e-4), c.comm, options);
  } catch (const Error& e) {
    if (mode.zero < 3) throw;
    if (c.rank == 0) {  // every rank threw the same error: the options are checked alike everywhere
      const std::string what = e.what();
      std::printf("# %s skipped: %s\n", id.c_str(), what.substr(0, what.find('\n')).c_str());
      std::fflush(stdout);
    }
    return;
  }
  optimizer->setup(model);
  std::int64_t params = 0;
  for (const Variable& p : model->params()) params += p.data().numel();

  Variable loss;
  int step = 0;
  const std::uint64_t polls_before = background_progress_polls();
  const bench::Stats s = bench::timed_steps(warmup(), iters(), [&] {
    const std::int64_t b = step++ % kBatches;
    optimizer->update([&] { return loss = F::mean_squared_error((*model)(xs[b]), ts[b]); });
  });
  const HostMemoryStats memory = host_memory_stats();
  const double peak_mb = max_over_ranks(memory.peak_rss / 1e6), live_mb = max_over_ranks(memory.live_tensors / 1e6);
  const double peak_live_mb = max_over_ranks(memory.peak_live_tensors / 1e6);
  const double cache_mb = max_over_ranks(memory.block_cache / 1e6), free_mb = max_over_ranks(memory.malloc_free / 1e6);
  if (c.rank != 0) return;
  const double value = loss.data().item();
  const bool finite = std::isfinite(value);
  c.failed |= !finite;
  char option_tags[64];
  std::snprintf(option_tags, sizeof option_tags, " overlap=%d zero=%d bucket_mb=%g", mode.overlap ? 1 : 0, mode.zero,
                options.bucket_mb);
  bench::print_stats(id, c.tags + option_tags, s);
  std::printf(
      " samples_per_s=%.0f loss=%.4f peak_rss_mb=%.1f base_rss_mb=%.1f live_mb=%.1f peak_live_mb=%.1f cache_mb=%.1f "
      "malloc_free_mb=%.1f theory_mb=%.1f params=%lld rss_of=%s background_polls=%llu%s\n",
      double(batch()) * c.ranks / (s.median_ms * 1e-3), value, peak_mb, base_mb, live_mb, peak_live_mb, cache_mb,
      free_mb, theory_bytes(params, mode.zero, c.ranks) / 1e6, static_cast<long long>(params), c.alone ? "mode" : "run",
      static_cast<unsigned long long>(background_progress_polls() - polls_before), finite ? "" : " CHECK=FAIL");
  std::fflush(stdout);
}

}  // namespace

int main() {
  Context c;
  c.comm = create_communicator("naive");  // initialises MPI (finalised at exit)
  c.rank = c.comm->rank();
  c.ranks = c.comm->size();
  if (c.ranks < 2) {
    std::fprintf(stderr,
                 "data_parallel_bench needs 2 or more ranks: OMP_NUM_THREADS=1 /usr/bin/mpiexec.mpich -n 2 "
                 "bazel-bin/bench/data_parallel_bench\n");
    return 1;
  }
  bench::set_threads(1);
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  const std::string mpi(version);
  c.tags = "mpi=" + bench::kv(mpi.substr(0, mpi.find('\n'))) + " comm=" + c.comm->name() +
           " ranks=" + std::to_string(c.ranks) + " " + bench::threads_tag(1) + " batch_per_rank=" + std::to_string(batch()) + " layers=8 width=2048";
  const std::vector<Mode> selected = selected_modes(&c.alone);

  MPI_Barrier(MPI_COMM_WORLD);
  if (c.rank == 0) {
    std::printf("# start\n");  // start-up is over: ../shared/bench/runq restarts its noise window here
    std::fflush(stdout);
  }
  for (const Mode& mode : selected) run_mode(c, mode);
  MPI_Barrier(MPI_COMM_WORLD);
  int failed = c.failed ? 1 : 0;
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return failed;
}
