// Pipeline parallelism on the deep MLP of examples/pipeline (784 - 8 hidden layers of 1000 - 10,
// ReLU, softmax cross-entropy; SGD), batch 256 (PP_BATCH) of random inputs:
//   pp.mlp.train.<schedule>.m<M>  2 ranks x 1 thread, the pipeline runtime (comm/pipeline) with
//                                 gpipe and 1f1b (2 stages, 4 layers each) and interleaved (4
//                                 stages of 2 layers, 2 per rank), M = 1, 2, 4, 8 microbatches.
//                                 M = 1 is the unpipelined split (the ranks take turns, as
//                                 ChainerMN's model parallelism).
//   pp.mlp.train.single.t<T>      the same model and batch in one process, T = 1, 2 threads
//                                 (run with 1 rank; bench.sh runs both).
//   pp.mlp.train.single.t1.m<M>   one process, 1 thread, the batch in M = 2, 8 microbatches whose
//                                 gradients accumulate: what small microbatches cost by themselves.
// A step is cleargrads + Pipeline::step + SGD update. As mlp_parallel_bench: a barrier before
// every step, the step's time is the max over ranks, warm-up then timed steps, median. Each
// pipeline line also carries Pipeline::step's own time (pipeline_ms, the step without the
// optimizer's update) and beside it the simulator's prediction from the costs measured on its
// own timed steps (comm/pipeline/profile.h: per stage the median compute time of its forwards
// and backwards, the bytes; the link measured by a ping-pong of one activation): predicted_ms,
// the predicted bubble, and per rank the most tensor bytes alive during the step
// (peak_mb_r<r>): 1F1B keeps fewer microbatches than GPipe.
//
//   bazel build -c opt //bench:pipeline_bench
//   OMP_NUM_THREADS=1 /usr/bin/mpiexec.mpich -n 2 bazel-bin/bench/pipeline_bench   (pipelines)
//   bazel-bin/bench/pipeline_bench                                                 (one process)
//   PP_ONLY=gpipe.m8: only that configuration (for /usr/bin/time -v per rank).  BENCH_SCALE: fewer steps.
//   PP_BATCH=1024: another batch size (ids get .b1024).
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "bench/bench_util.h"
#include "comm/pipeline/pipeline.h"
#include "comm/pipeline/profile.h"
#include "comm/pipeline/simulator.h"
#include "comm/transport/communicator.h"
#include "core/ops.h"
#include "layers/links/linear.h"
#include "layers/optimizers/sgd.h"

using namespace tandem;
namespace F = tandem::functions;

namespace {

constexpr int IN = 784, U = 1000, OUT = 10, HIDDEN = 8;

// The batch: PP_BATCH (default 256). Small microbatches cost more per example than large ones
// (each product packs the whole weight matrix for few rows; see single.t1.m<M>).
int batch_size() {
  const char* e = std::getenv("PP_BATCH");
  return e && std::atoi(e) > 0 ? std::atoi(e) : 256;
}
const int B = batch_size();
std::string batch_suffix() { return B == 256 ? "" : ".b" + std::to_string(B); }

// Layers [first, last) of the deep MLP (layer 0: 784 -> 1000, layers 1..7: 1000 -> 1000, layer 8:
// 1000 -> 10 with the loss), each seeded by its index so that every split is the same model.
class Layers : public ChainList {
 public:
  Layers(int first, int last) : first_(first), last_(last) {
    for (int l = first; l < last; ++l) {
      auto linear = std::make_shared<Linear>(l == 0 ? IN : U, l == HIDDEN ? OUT : U);
      Generator gen(1000 + static_cast<std::uint64_t>(l));
      linear->W().set_data(randn(linear->W().shape(), gen, 0, 1.0 / std::sqrt(double(l == 0 ? IN : U))));
      append(linear);
    }
  }
  Variables forward_many(const Variables& xs) override {
    Variable h = xs.at(0);
    for (int l = first_; l < last_; ++l) {
      h = (*(*this)[static_cast<std::size_t>(l - first_)])(h);
      if (l < HIDDEN) h = F::relu(h);
    }
    if (last_ == HIDDEN + 1) return {F::softmax_cross_entropy(h, xs.at(1))};
    return {h};
  }

 private:
  int first_, last_;
};

struct Data {
  std::vector<Tensor> x, t;
};

Data make_data() {
  Generator gen(7);
  Data d;
  for (int i = 0; i < 4; ++i) {
    d.x.push_back(rand_uniform({B, IN}, gen));
    std::vector<std::int32_t> labels(B);
    for (auto& l : labels) l = static_cast<std::int32_t>(gen.next() % OUT);
    d.t.push_back(from_vector(labels, {B}));
  }
  return d;
}

int warmup() { return 3; }
int iters() { return bench::scaled(12); }

// The one-process step at `threads` threads.
void single(int threads, const Data& data) {
  bench::set_threads(threads);
  auto model = std::make_shared<Layers>(0, HIDDEN + 1);
  SGD opt(0.01);
  opt.setup(model);
  int i = 0;
  const bench::Stats s = bench::measure(warmup(), iters(), [&] {
    model->cleargrads();
    Variable loss = model->forward_many({Variable(data.x[i % 4]), Variable(data.t[i % 4])})[0];
    loss.backward();
    opt.update();
    ++i;
  });
  bench::print_stats("pp.mlp.train.single.t" + std::to_string(threads) + batch_suffix(), bench::threads_tag(threads) + " batch=" + std::to_string(B),
                     s);
  std::printf("\n");
  std::fflush(stdout);
}

// The one-process step with the batch in `microbatches` parts whose gradients accumulate (a
// pipeline of one rank and one stage): what small microbatches cost without any pipeline.
void accumulated(const CommunicatorPtr& comm, int microbatches, bool deferred, const Data& data) {
  bench::set_threads(1);
  pipeline::Schedule schedule = pipeline::gpipe(1, microbatches);
  if (deferred) schedule = pipeline::defer_weight_gradients(schedule);
  auto pipe = std::make_shared<pipeline::Pipeline>(comm, schedule,
                                                   std::vector<LinkPtr>{std::make_shared<Layers>(0, HIDDEN + 1)});
  SGD opt(0.01);
  opt.setup(pipe);
  int i = 0;
  const bench::Stats s = bench::measure(warmup(), iters(), [&] {
    pipe->cleargrads();
    pipe->step({data.x[i % 4], data.t[i % 4]});
    opt.update();
    ++i;
  });
  bench::print_stats("pp.mlp.train.single.t1.m" + std::to_string(microbatches) + (deferred ? ".dw" : "") + batch_suffix(), bench::threads_tag(1) + " batch=" + std::to_string(B),
                     s);
  std::printf("\n");
  std::fflush(stdout);
}

void pipelined(const CommunicatorPtr& comm, const std::string& name, int microbatches, const Data& data) {
  const int ranks = comm->size();
  const int v = name.rfind("interleaved", 0) == 0 ? 2 : 1;
  const int stages = ranks * v;
  // Stage s holds layers [s * 9 / stages, (s + 1) * 9 / stages) of the 9 (the last has the loss).
  std::vector<LinkPtr> mine;
  for (int s = comm->rank(); s < stages; s += ranks)
    mine.push_back(std::make_shared<Layers>(s * (HIDDEN + 1) / stages, (s + 1) * (HIDDEN + 1) / stages));
  auto pipe = std::make_shared<pipeline::Pipeline>(comm, pipeline::schedule_by_name(name, ranks, v, microbatches), mine);
  SGD opt(0.01);
  opt.setup(pipe);
  std::vector<double> times, pipe_times;  // the whole step; Pipeline::step alone
  std::vector<pipeline::MeasuredStep> costs;  // every timed step's (outside the timing)
  double loss = 0;
  for (int i = 0; i < warmup() + iters(); ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    pipe->cleargrads();
    loss = pipe->step({data.x[i % 4], data.t[i % 4]}).loss;
    opt.update();
    const double dt = (MPI_Wtime() - t0) * 1e3;
    if (i >= warmup()) {
      times.push_back(dt);
      pipe_times.push_back(pipe->last_profile().step_s * 1e3);
      costs.push_back(pipeline::measure_last_step(*pipe, pipeline::LinkModel{}));
    }
  }
  std::vector<double> tmax(times.size()), pipe_max(times.size());
  MPI_Reduce(times.data(), tmax.data(), static_cast<int>(times.size()), MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(pipe_times.data(), pipe_max.data(), static_cast<int>(times.size()), MPI_DOUBLE, MPI_MAX, 0,
             MPI_COMM_WORLD);
  // The simulator's prediction from this configuration's last step.
  std::int64_t activation = 0;
  const pipeline::StepProfile& profile = pipe->last_profile();
  for (const auto& [stage, bytes] : profile.output_bytes) activation = std::max(activation, bytes);
  const std::int64_t most = static_cast<std::int64_t>(comm->allreduce(full({}, double(activation), DType::f64),
                                                                      AllreduceOp::sum).item());
  const pipeline::LinkModel link = pipeline::measure_link(*comm, std::max<std::int64_t>(most / ranks, 8));
  // The simulator's inputs: each stage's median forward and backward over the timed steps (one
  // step alone varies by 20% on this shared machine), the bytes, and the link.
  pipeline::MeasuredStep measured = costs.back();
  measured.options.link = link;
  for (std::size_t s = 0; s < measured.options.stage_costs.size(); ++s) {
    std::vector<double> forwards, backwards, weights;
    for (const pipeline::MeasuredStep& c : costs) {
      forwards.push_back(c.options.stage_costs[s].forward_s);
      backwards.push_back(c.options.stage_costs[s].backward_s);
      weights.push_back(c.options.stage_costs[s].weight_s);
    }
    // (summarize takes any unit: these are seconds.)
    measured.options.stage_costs[s].forward_s = bench::summarize(forwards).median_ms;
    measured.options.stage_costs[s].backward_s = bench::summarize(backwards).median_ms;
    measured.options.stage_costs[s].weight_s =
        std::min(bench::summarize(weights).median_ms, measured.options.stage_costs[s].backward_s);
  }
  const pipeline::SimulationResult predicted = pipeline::simulate(pipe->schedule(), measured.options);
  if (comm->rank() != 0) return;
  // PP_VERBOSE=1: the simulator's command line with these costs (to plan other schedules).
  if (std::getenv("PP_VERBOSE") != nullptr) std::printf("%s\n", pipeline::simulate_command(pipe->schedule(), measured.options).c_str());
  const bench::Stats s = bench::summarize(std::move(tmax));
  const std::string id = "pp.mlp.train." + name + ".m" + std::to_string(microbatches) + batch_suffix();
  bench::print_stats(id, bench::threads_tag(1) + " ranks=" + std::to_string(ranks) + " batch=" + std::to_string(B), s);
  // The simulator models the schedule's actions: compare it with Pipeline::step (pipeline_ms);
  // the whole step adds the optimizer's update.
  std::printf(" pipeline_ms=%.3f predicted_ms=%.3f predicted_bubble=%.3f", bench::summarize(pipe_max).median_ms,
              predicted.step_s * 1e3, predicted.bubble_fraction);
  for (std::size_t r = 0; r < measured.peak_bytes.size(); ++r)
    std::printf(" peak_mb_r%zu=%.1f predicted_peak_mb_r%zu=%.1f", r, measured.peak_bytes[r] / 1e6, r,
                predicted.ranks[r].peak_stored_bytes / 1e6);
  std::printf(" link_latency_us=%.1f link_gb_s=%.2f loss=%.4f%s\n", link.latency_s * 1e6,
              link.bandwidth_bytes_per_s / 1e9, loss, std::isfinite(loss) ? "" : " CHECK=FAIL");
  std::fflush(stdout);
}

}  // namespace

int main() {
  CommunicatorPtr comm = create_communicator("naive");
  const Data data = make_data();
  const char* only_env = std::getenv("PP_ONLY");
  const std::string only = only_env ? only_env : "";
  if (comm->size() == 1) {
    for (int threads : bench::thread_list()) single(threads, data);
    for (int m : {2, 8})
      for (bool deferred : {false, true}) accumulated(comm, m, deferred, data);
    return 0;
  }
  bench::set_threads(1);
  for (const std::string name : {"gpipe", "1f1b", "interleaved", "gpipe-dw", "1f1b-dw", "interleaved-dw"}) {
    for (int m : {1, 2, 4, 8}) {
      if (name.rfind("interleaved", 0) == 0 && m % comm->size() != 0) continue;
      if (!only.empty() && only != name + ".m" + std::to_string(m)) continue;
      pipelined(comm, name, m, data);
    }
  }
  return 0;
}
