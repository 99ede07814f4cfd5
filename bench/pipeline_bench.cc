// Pipeline parallelism on the deep MLP of examples/pipeline (784 - 8 hidden layers of 1000 - 10,
// ReLU, softmax cross-entropy; SGD), batch 256 (PP_BATCH) of random inputs:
//   pp.mlp.train.<schedule>.m<M>  2 ranks x 1 thread, the pipeline runtime (comm/pipeline) with
//                                 gpipe and 1f1b (2 stages, 4 layers each) and interleaved (4
//                                 stages of 2 layers, 2 per rank), M = 1, 2, 4, 8 microbatches.
//                                 M = 1 is the unpipelined split (the ranks take turns, as
//                                 ChainerMN's model parallelism).
//   pp.mlp.train.<zb>.m8          2 ranks x 1 thread, the zero-bubble schedules (comm/pipeline/
//                                 zero_bubble.h) zb-h1 and zb-h2 (2 stages) and zbv (4 stages in a
//                                 V: rank 0 holds stages 0 and 3), M = 8, beside 1f1b.m8 above.
//   pp.mlp.train.p4.<s>.m8        4 ranks x 1 thread (run with mpiexec -n 4): s = 1f1b, zb-h1,
//                                 zb-h2 (4 stages), zbv (8 stages), M = 8. Any other count of
//                                 ranks P > 2 runs these as pp.mlp.train.p<P>.<s>.m8.
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
// (peak_mb_r<r>, and their max peak_mb_max): 1F1B keeps fewer microbatches than GPipe.
// Against the step as it ran, each timed step is also simulated with its own per-action compute
// times (MeasuredStep::action_seconds) on a free link (LinkModel{}), medians over the timed steps:
//   sim_own_ms            the simulated step (to the last action's end; no final exchange)
//   efficiency            measured Pipeline::step (slowest rank, final exchange included) / sim_own
//   actions_ms            the measured step to the last action's end (measured_result), and
//   efficiency_actions    it / sim_own: the same without the final exchange
//   bubble_measured       1 - sum of the ranks' compute / (ranks x actions_ms) (measured_result)
//   bubble_measured_step  the same over the whole Pipeline::step (its final exchange idle)
//   bubble_sim, bubble_rate_sim, span_bubble_rate_sim   the own-times simulation's
//   sim_median_ms         = predicted_ms; sim_median_err_pct its error against pipeline_ms
//   gaps_ms               max over ranks: the time between a rank's actions (and before its first)
//   tail_ms               min over ranks: the time after its last action (the final exchange)
//   skew_ms               how far apart the ranks started their steps
//   busy_own_vs_median    the ranks' compute in the own-times simulation over sim_median's (the
//                         median-cost simulation's compute: M x per-stage medians)
//   efficiency_link       efficiency against the own-times simulation on the measured link
// Every step's profile is gathered, measured and simulated outside its timing.
//
//   bazel build -c opt //bench:pipeline_bench
//   OMP_NUM_THREADS=1 /usr/bin/mpiexec.mpich -n 2 bazel-bin/bench/pipeline_bench   (pipelines)
//   bazel-bin/bench/pipeline_bench                                                 (one process)
//   OMP_NUM_THREADS=1 /usr/bin/mpiexec.mpich -n 4 bazel-bin/bench/pipeline_bench   (p4 lines)
//   PP_ONLY=gpipe.m8: only that configuration (for /usr/bin/time -v per rank); a list separated by
//   commas or spaces: those (PP_ONLY=1f1b.m8,zb-h1.m8).  BENCH_SCALE: fewer steps.
//   PP_BATCH=1024: another batch size (ids get .b1024).
#include <mpi.h>

#include <algorithm>
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
  bench::print_stats("pp.mlp.train.single.t" + std::to_string(threads) + batch_suffix(),
                     bench::threads_tag(threads) + " batch=" + std::to_string(B), s);
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
  bench::print_stats(
      "pp.mlp.train.single.t1.m" + std::to_string(microbatches) + (deferred ? ".dw" : "") + batch_suffix(),
      bench::threads_tag(1) + " batch=" + std::to_string(B), s);
  std::printf("\n");
  std::fflush(stdout);
}

// The median of `values` (any unit).
double median_of(const std::vector<double>& values) { return bench::summarize(values).median_ms; }

void pipelined(const CommunicatorPtr& comm, const std::string& name, int microbatches, const Data& data) {
  const int ranks = comm->size();
  const int v = name.rfind("interleaved", 0) == 0 || name == "zbv" ? 2 : 1;
  const pipeline::Schedule schedule = pipeline::schedule_by_name(name, ranks, v, microbatches);
  const int stages = schedule.stages;
  // Stage s holds layers [s * 9 / stages, (s + 1) * 9 / stages) of the 9 (the last has the loss),
  // on the rank the schedule places it (round-robin; zbv's V: rank r holds r and 2P - 1 - r).
  std::vector<LinkPtr> mine;
  for (int s : schedule.stages_of_rank(comm->rank()))
    mine.push_back(std::make_shared<Layers>(s * (HIDDEN + 1) / stages, (s + 1) * (HIDDEN + 1) / stages));
  auto pipe = std::make_shared<pipeline::Pipeline>(comm, schedule, mine);
  SGD opt(0.01);
  opt.setup(pipe);
  std::vector<double> times, pipe_times;      // the whole step; Pipeline::step alone
  std::vector<pipeline::MeasuredStep> costs;  // every timed step's (outside the timing)
  // Per timed step (outside the timing, the same on every rank): the step as it ran and the
  // simulator replaying it with its own compute times on a free link.
  std::vector<double> own_ms, efficiency, actions_ms, efficiency_actions, bubble_measured, bubble_measured_step,
      bubble_sim, bubble_rate_sim, span_bubble_rate_sim, gaps_ms, tail_ms, skew_ms, busy_own;
  pipeline::SimulationResult last_real, last_own;  // the last timed step's
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
      const pipeline::MeasuredStep& step = costs.back();
      const pipeline::SimulationResult real = pipeline::measured_result(*pipe);
      pipeline::SimulationOptions own = step.options;
      own.link = pipeline::LinkModel{};
      own.action_seconds = step.action_seconds;
      const pipeline::SimulationResult sim = pipeline::simulate(schedule, own);
      last_real = real;
      last_own = sim;
      // Where a rank's step goes besides its actions, max over ranks: the time between its actions
      // (the runtime's bookkeeping), min over ranks: after the last one (the final exchange: the
      // last rank to finish waits least in it), and how far apart the ranks started.
      const pipeline::StepProfile& p = pipe->last_profile();
      double gaps = p.actions.empty() ? 0 : p.actions.front().start_s;
      for (std::size_t a = 1; a < p.actions.size(); ++a) gaps += p.actions[a].start_s - p.actions[a - 1].end_s;
      double local[4] = {gaps, -(p.step_s - (p.actions.empty() ? 0 : p.actions.back().end_s)), p.start_clock_s,
                         -p.start_clock_s};
      double most[4];
      MPI_Allreduce(local, most, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      gaps_ms.push_back(most[0] * 1e3);
      tail_ms.push_back(-most[1] * 1e3);
      double own_busy = 0;
      for (const pipeline::RankResult& r : sim.ranks) own_busy += r.busy_s;
      busy_own.push_back(own_busy);
      skew_ms.push_back((most[2] + most[3]) * 1e3);
      double busy = 0;
      for (const pipeline::RankResult& r : real.ranks) busy += r.busy_s;
      // step.step_s: the slowest rank's Pipeline::step, its final exchange included; real.step_s:
      // the last action's end, from the earliest rank's start.
      own_ms.push_back(sim.step_s * 1e3);
      efficiency.push_back(step.step_s / sim.step_s);
      actions_ms.push_back(real.step_s * 1e3);
      efficiency_actions.push_back(real.step_s / sim.step_s);
      bubble_measured.push_back(real.bubble_fraction);
      bubble_measured_step.push_back(1 - busy / (ranks * step.step_s));
      bubble_sim.push_back(sim.bubble_fraction);
      bubble_rate_sim.push_back(sim.bubble_rate);
      span_bubble_rate_sim.push_back(sim.span_bubble_rate);
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
  const std::int64_t most =
      static_cast<std::int64_t>(comm->allreduce(full({}, double(activation), DType::f64), AllreduceOp::sum).item());
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
  // Each timed step's own times again, on the measured link instead of a free one.
  std::vector<double> efficiency_link;
  for (const pipeline::MeasuredStep& c : costs) {
    pipeline::SimulationOptions own = c.options;
    own.link = link;
    own.action_seconds = c.action_seconds;
    efficiency_link.push_back(c.step_s / pipeline::simulate(schedule, own).step_s);
  }
  if (comm->rank() != 0) return;
  // PP_VERBOSE=1: the simulator's command line with these costs (to plan other schedules).
  if (std::getenv("PP_VERBOSE") != nullptr)
    std::printf("%s\n", pipeline::simulate_command(pipe->schedule(), measured.options).c_str());
  // PP_VERBOSE=2: the last timed step's actions per rank, label@start+compute in ms as it ran,
  // then [start] in the own-times simulation.
  if (std::getenv("PP_VERBOSE") != nullptr && std::string(std::getenv("PP_VERBOSE")) == "2") {
    for (std::size_t r = 0; r < last_real.ranks.size(); ++r) {
      std::printf("# rank %zu:", r);
      const auto& acts = last_real.ranks[r].actions;
      for (std::size_t i = 0; i < acts.size(); ++i)
        std::printf(" %s@%.1f+%.2f[%.1f]", acts[i].action.label(stages > ranks).c_str(), acts[i].start_s * 1e3,
                    (acts[i].end_s - acts[i].start_s) * 1e3, last_own.ranks[r].actions[i].start_s * 1e3);
      std::printf("\n");
    }
  }
  const bench::Stats s = bench::summarize(std::move(tmax));
  const std::string id = "pp.mlp.train." + std::string(ranks == 2 ? "" : "p" + std::to_string(ranks) + ".") + name +
                         ".m" + std::to_string(microbatches) + batch_suffix();
  bench::print_stats(id, bench::threads_tag(1) + " ranks=" + std::to_string(ranks) + " batch=" + std::to_string(B), s);
  // The simulator models the schedule's actions: compare it with Pipeline::step (pipeline_ms);
  // the whole step adds the optimizer's update.
  const double pipeline_ms = median_of(pipe_max);
  std::printf(" pipeline_ms=%.3f predicted_ms=%.3f predicted_bubble=%.3f", pipeline_ms, predicted.step_s * 1e3,
              predicted.bubble_fraction);
  std::int64_t peak_max = 0, predicted_peak_max = 0;
  double predicted_busy = 0;
  for (const pipeline::RankResult& r : predicted.ranks) predicted_busy += r.busy_s;
  for (std::size_t r = 0; r < measured.peak_bytes.size(); ++r) {
    std::printf(" peak_mb_r%zu=%.1f predicted_peak_mb_r%zu=%.1f", r, measured.peak_bytes[r] / 1e6, r,
                predicted.ranks[r].peak_stored_bytes / 1e6);
    peak_max = std::max(peak_max, measured.peak_bytes[r]);
    predicted_peak_max = std::max(predicted_peak_max, predicted.ranks[r].peak_stored_bytes);
  }
  std::printf(" link_latency_us=%.1f link_gb_s=%.2f loss=%.4f%s", link.latency_s * 1e6,
              link.bandwidth_bytes_per_s / 1e9, loss, std::isfinite(loss) ? "" : " CHECK=FAIL");
  // Against the simulator fed with each timed step's own compute times on a free link (medians
  // over the timed steps): efficiency = measured Pipeline::step / simulated step (the measured
  // step includes the final exchange, which the simulation does not model); efficiency_actions
  // the same to the last action's end (no exchange). bubble_measured: the ranks' time not
  // computing up to the last action's end (measured_result); bubble_measured_step: up to the end
  // of Pipeline::step. sim_median_ms = predicted_ms (median stage costs, measured link), and its
  // error against pipeline_ms.
  std::printf(
      " sim_own_ms=%.3f efficiency=%.3f actions_ms=%.3f efficiency_actions=%.3f bubble_measured=%.3f"
      " bubble_measured_step=%.3f bubble_sim=%.3f bubble_rate_sim=%.3f span_bubble_rate_sim=%.3f"
      " sim_median_ms=%.3f sim_median_err_pct=%.1f peak_mb_max=%.1f predicted_peak_mb_max=%.1f gaps_ms=%.3f"
      " tail_ms=%.3f skew_ms=%.3f busy_own_vs_median=%.3f efficiency_link=%.3f\n",
      median_of(own_ms), median_of(efficiency), median_of(actions_ms), median_of(efficiency_actions),
      median_of(bubble_measured), median_of(bubble_measured_step), median_of(bubble_sim), median_of(bubble_rate_sim),
      median_of(span_bubble_rate_sim), predicted.step_s * 1e3, (predicted.step_s * 1e3 / pipeline_ms - 1) * 100,
      peak_max / 1e6, predicted_peak_max / 1e6, median_of(gaps_ms), median_of(tail_ms), median_of(skew_ms),
      median_of(busy_own) / predicted_busy, median_of(efficiency_link));
  std::fflush(stdout);
}

// PP_ONLY: the configurations to run, "<schedule>.m<M>" separated by commas or spaces; empty: all.
std::vector<std::string> only_list() {
  const char* e = std::getenv("PP_ONLY");
  std::vector<std::string> out;
  std::string word;
  for (const char* p = e ? e : "";; ++p) {
    if (*p == '\0' || *p == ',' || *p == ' ') {
      if (!word.empty()) out.push_back(word);
      word.clear();
      if (*p == '\0') break;
    } else {
      word += *p;
    }
  }
  return out;
}

}  // namespace

int main() {
  CommunicatorPtr comm = create_communicator("naive");
  const Data data = make_data();
  const std::vector<std::string> only = only_list();
  const auto wanted = [&](const std::string& name, int m) {
    return only.empty() || std::find(only.begin(), only.end(), name + ".m" + std::to_string(m)) != only.end();
  };
  if (comm->size() == 1) {
    for (int threads : bench::thread_list()) single(threads, data);
    for (int m : {2, 8})
      for (bool deferred : {false, true}) accumulated(comm, m, deferred, data);
    return 0;
  }
  bench::set_threads(1);
  if (comm->size() == 2) {
    for (const std::string name : {"gpipe", "1f1b", "interleaved", "gpipe-dw", "1f1b-dw", "interleaved-dw"}) {
      for (int m : {1, 2, 4, 8}) {
        if (name.rfind("interleaved", 0) == 0 && m % comm->size() != 0) continue;
        if (wanted(name, m)) pipelined(comm, name, m, data);
      }
    }
  }
  // The zero-bubble schedules beside 1F1B at M = 8 (at 2 ranks after the lines above; at any
  // other count of ranks, ids pp.mlp.train.p<P>.<schedule>.m8, only these).
  for (const std::string name : {"1f1b", "zb-h1", "zb-h2", "zbv"}) {
    if (comm->size() == 2 && name == "1f1b") continue;
    if (wanted(name, 8)) pipelined(comm, name, 8, data);
  }
  return 0;
}
