// The GPT-style character language model of examples/lm (char_lm_model.h) beside its LibTorch
// anchor bench/libtorch_lm.cpp, with the same shapes and data: vocabulary 96, context T = 64,
// d = 128, 4 heads, 4 pre-norm blocks (MLP 4d), final LayerNorm, head Linear(128, 96), softmax
// cross-entropy averaged over the B x T tokens, Adam lr 1e-3; B = 32 sequences of 20 seeded
// random batches of [32, 65] ids uniform in [0, 96), cycled (input tokens[:, 0:64], target
// tokens[:, 1:65]). The model runs as a tandem user runs it (examples/lm/train_char_lm.cc): the
// stages of make_char_lm_stages in a pipeline::Pipeline over make_parallel_layout's groups.
//   lm.train.adam.t<T>        one process, T = 1, 2 threads: a step is pipe->cleargrads() +
//                             pipe->step({x, t}) + Adam update (a 1-rank pipeline of 1 stage and
//                             1 microbatch is a plain step). 3 warm-up, 20 (t1) / 30 (t2) timed
//                             steps, as the anchor.
//   lm.infer.t<T>             pipe->evaluate({x, t}) (forward + loss, no graph); 3 + 40 / 60.
//   2 ranks x 1 thread (mpiexec -n 2), rank 0 prints; a barrier before every step, the step's
//   time is the max over the ranks, 3 warm-up and 20 timed steps, median:
//   lm.train.adam.tp2         tensor parallel (tp 2, pp 1): each block, the token embedding and
//                             the head split over the 2 ranks (Megatron's), 1 microbatch.
//   lm.train.adam.pp2.m<M>    pipeline parallel (pp 2: 2 blocks per rank), 1F1B, M = 4, 8.
//   lm.train.adam.dp2         data parallel: 2 replicas of 16 sequences each (rows [16 r,
//                             16 r + 16) of the same global batch of 32), gradients averaged by
//                             create_multi_node_optimizer over the data group.
// Keys: tokens_per_s (B x T = 2048 tokens per step, the global batch), gflops (matmul FLOPs as
// the anchor counts them), loss (the last timed step's; averaged over the replicas for dp2;
// CHECK=FAIL when not finite). The anchor has no multi-rank lines: scripts/bench.sh sets them
// against tandem's own lm.train.adam.t1.
//
//   bazel build -c opt //bench:lm_bench
//   bazel-bin/bench/lm_bench                                                     (one process)
//   OMP_NUM_THREADS=1 /usr/bin/mpiexec.mpich -n 2 bazel-bin/bench/lm_bench        (2 ranks)
//   BENCH_ONLY=lm (or unset): every line; otherwise the ids containing a word of it (tp2, pp2.m8,
//   infer, ...).  BENCH_SCALE=0.3: fewer timed steps (never below 3).  BENCH_THREADS="1": t1 only.
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "comm/pipeline/layout.h"
#include "comm/pipeline/pipeline.h"
#include "comm/pipeline/schedule.h"
#include "comm/transport/communicator.h"
#include "core/ops.h"
#include "examples/lm/char_lm_model.h"
#include "layers/optimizers/adam.h"

using namespace tandem;

namespace {

constexpr std::int64_t V = 96, T = 64, C = 128, NH = 4, NL = 4, FF = 4 * C, B = 32;
constexpr int NB = 20;

bool selected(const std::string& id) {
  const char* only = std::getenv("BENCH_ONLY");
  if (only == nullptr || *only == '\0') return true;
  const std::string words(only);
  std::size_t pos = 0;
  while (pos < words.size()) {
    const std::size_t end = std::min(words.find(' ', pos), words.size());
    const std::string w = words.substr(pos, end - pos);
    if (w == "lm") return true;  // the whole family
    if (!w.empty() && id.find(w) != std::string::npos) return true;
    pos = end + 1;
  }
  return false;
}

examples::CharLMConfig lm_config() {
  examples::CharLMConfig config;
  config.vocabulary = V;
  config.context = T;
  config.dim = C;
  config.heads = NH;
  config.layers = NL;
  config.mlp_ratio = FF / C;
  config.seed = 0;
  return config;
}

// Matmul FLOPs of one forward, as the anchor counts them (linears, attention's two batched
// matmuls in full, the head).
double forward_flops() {
  const double tokens = double(B) * T;
  return 2.0 * tokens * (double(NL) * (C * 3 * C + C * C + 2.0 * C * FF) + C * V) +
         double(NL) * 2 * (2.0 * B * NH * T * T * (C / NH));
}

// 20 batches of B rows of T + 1 ids uniform in [0, V) (seed 0): x = ids[:, 0:T], t = ids[:, 1:T+1],
// both i32 [B, T].
struct Batches {
  std::vector<Tensor> x, t;
};

Batches make_batches() {
  Generator gen(0);
  Batches d;
  for (int b = 0; b < NB; ++b) {
    std::vector<std::int32_t> seq(static_cast<std::size_t>(B * (T + 1)));
    for (auto& id : seq) id = static_cast<std::int32_t>(gen.next() % V);
    std::vector<std::int32_t> x(static_cast<std::size_t>(B * T)), t(x.size());
    for (std::int64_t r = 0; r < B; ++r)
      for (std::int64_t j = 0; j < T; ++j) {
        x[static_cast<std::size_t>(r * T + j)] = seq[static_cast<std::size_t>(r * (T + 1) + j)];
        t[static_cast<std::size_t>(r * T + j)] = seq[static_cast<std::size_t>(r * (T + 1) + j + 1)];
      }
    d.x.push_back(from_vector(x, {B, T}));
    d.t.push_back(from_vector(t, {B, T}));
  }
  return d;
}

void print_line(const std::string& id, const std::string& tags, const bench::Stats& s, double flops, double loss) {
  const bool finite = std::isfinite(loss);
  bench::print_stats(id, tags + " batch=32 seqlen=64 d=128 heads=4 layers=4 vocab=96", s);
  std::printf(" gflops=%.1f tokens=%lld tokens_per_s=%.0f loss=%.4f%s\n", flops / (s.median_ms * 1e6),
              static_cast<long long>(B * T), double(B) * T / (s.median_ms * 1e-3), loss, finite ? "" : " CHECK=FAIL");
  std::fflush(stdout);
}

// --- one process --------------------------------------------------------------------------------

std::shared_ptr<pipeline::Pipeline> single_pipeline(const CommunicatorPtr& comm) {
  return std::make_shared<pipeline::Pipeline>(comm, pipeline::schedule_by_name("1f1b", 1, 1, 1),
                                              examples::make_char_lm_stages(lm_config(), 1, 1, 0, nullptr));
}

void single_train(const CommunicatorPtr& comm, int threads, const Batches& data) {
  const std::string id = "lm.train.adam.t" + std::to_string(threads);
  if (!selected(id)) return;
  bench::set_threads(threads);
  auto pipe = single_pipeline(comm);
  Adam optimizer(1e-3);
  optimizer.setup(pipe);
  int it = 0;
  double loss = NAN;
  const bench::Stats s = bench::measure(3, bench::scaled(threads == 1 ? 20 : 30), [&] {
    pipe->cleargrads();
    loss = pipe->step({data.x[it % NB], data.t[it % NB]}).loss;
    optimizer.update();
    ++it;
  });
  print_line(id, bench::threads_tag(threads), s, 3 * forward_flops(), loss);
}

void single_infer(const CommunicatorPtr& comm, int threads, const Batches& data) {
  const std::string id = "lm.infer.t" + std::to_string(threads);
  if (!selected(id)) return;
  bench::set_threads(threads);
  auto pipe = single_pipeline(comm);
  int it = 0;
  double loss = NAN;
  const bench::Stats s = bench::measure(3, bench::scaled(threads == 1 ? 40 : 60), [&] {
    loss = pipe->evaluate({data.x[it % NB], data.t[it % NB]}).loss;
    ++it;
  });
  print_line(id, bench::threads_tag(threads), s, forward_flops(), loss);
}

// --- 2 ranks ------------------------------------------------------------------------------------

// 3 + iters calls of step (each returns its loss), each after a barrier; the max over the ranks,
// median (on rank 0).
bench::Stats timed_steps(const std::function<double(int)>& step, double* last_loss) {
  std::vector<double> times;
  const int iters = bench::scaled(20);
  for (int i = 0; i < 3 + iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    *last_loss = step(i);
    const double dt = (MPI_Wtime() - t0) * 1e3;
    if (i >= 3) times.push_back(dt);
  }
  std::vector<double> tmax(times.size());
  MPI_Reduce(times.data(), tmax.data(), static_cast<int>(times.size()), MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  return bench::summarize(std::move(tmax));
}

// tp x pp ranks of one replica (dp = world / (tp x pp) replicas, each its share of the batch's
// rows), the pipeline in 1F1B with `microbatches`.
void parallel(const CommunicatorPtr& world, const std::string& id, int tp, int pp, int microbatches,
              const Batches& data, const std::string& extra_tags) {
  if (!selected(id)) return;
  const pipeline::ParallelLayout layout = pipeline::make_parallel_layout(world, tp, pp);
  const int dp = layout.data_parallel;
  auto pipe = std::make_shared<pipeline::Pipeline>(
      layout.pipeline, pipeline::schedule_by_name("1f1b", pp, 1, microbatches),
      examples::make_char_lm_stages(lm_config(), pp, pp, layout.stage_rank, tp > 1 ? layout.tensor : nullptr));
  std::shared_ptr<Optimizer> optimizer = std::make_shared<Adam>(1e-3);
  if (dp > 1) optimizer = create_multi_node_optimizer(optimizer, layout.data);
  optimizer->setup(pipe);
  // Replica d computes rows [d B / dp, (d + 1) B / dp) of every global batch.
  const std::int64_t rows = B / dp, begin = rows * layout.data_rank;
  double loss = NAN;
  const bench::Stats s = timed_steps(
      [&](int i) {
        pipe->cleargrads();
        const double l = pipe->step({data.x[i % NB].slice_rows(begin, begin + rows),
                                     data.t[i % NB].slice_rows(begin, begin + rows)})
                             .loss;
        optimizer->update();
        return l;
      },
      &loss);
  // The whole batch's loss: the replicas' mean (equal shares), outside the timing.
  double sum = 0;
  MPI_Allreduce(&loss, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  loss = sum / world->size();  // every rank of a replica holds its replica's loss
  if (world->rank() != 0) return;
  print_line(id,
             bench::threads_tag(1) + " ranks=" + std::to_string(world->size()) + " tp=" + std::to_string(tp) +
                 " pp=" + std::to_string(pp) + " dp=" + std::to_string(dp) + " microbatches=" +
                 std::to_string(microbatches) + extra_tags,
             s, 3 * forward_flops(), loss);
}

}  // namespace

int main() {
  CommunicatorPtr comm = create_communicator("naive");  // initialises MPI (finalised at exit)
  const Batches data = make_batches();
  if (comm->size() == 1) {
    std::printf("# start\n");  // start-up is over: ../shared/bench/runq restarts its noise window here
    std::fflush(stdout);
    for (int threads : bench::thread_list()) {  // the anchor's order
      single_train(comm, threads, data);
      single_infer(comm, threads, data);
    }
    return 0;
  }
  if (comm->size() != 2) {
    if (comm->rank() == 0)
      std::fprintf(stderr, "lm_bench: 1 rank (one process) or 2 ranks: OMP_NUM_THREADS=1 /usr/bin/mpiexec.mpich -n 2 "
                           "bazel-bin/bench/lm_bench\n");
    return 1;
  }
  bench::set_threads(1);  // one thread per rank on 2 cores, as the other 2-rank benchmarks
  MPI_Barrier(MPI_COMM_WORLD);
  if (comm->rank() == 0) {
    std::printf("# start\n");
    std::fflush(stdout);
  }
  parallel(comm, "lm.train.adam.tp2", 2, 1, 1, data, "");
  parallel(comm, "lm.train.adam.pp2.m4", 1, 2, 4, data, " schedule=1f1b");
  parallel(comm, "lm.train.adam.pp2.m8", 1, 2, 8, data, " schedule=1f1b");
  parallel(comm, "lm.train.adam.dp2", 1, 1, 1, data, " batch_per_rank=16");
  return 0;
}
