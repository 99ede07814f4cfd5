// Multi-process training of the MNIST MLP (784-1000-1000-10, ReLU, softmax cross-entropy) on 2
// ranks x 1 thread, the workloads of ../shared/bench/libtorch_mpi_mp.cpp, written as a tandem
// user writes them:
//   mp.mlp.train.{sgd,adam}      model parallel, as examples/mnist/train_mnist_model_parallel.cc
//                                (--form chainlist): a MultiNodeChainList per rank; rank 0 holds
//                                Linear(784, 1000) + ReLU, sends to rank 1, gets the logits back and
//                                computes the loss; rank 1 holds Linear(1000, 1000) + ReLU and
//                                Linear(1000, 10) and backpropagates from its delegate variable.
//   mp.mlp.train.{sgd,adam}.fn   the same split with F::send / F::recv written out (the trainer's
//                                --form explicit), for the cost of MultiNodeChainList itself.
//   dp.mlp.train.{sgd,adam}      data parallel, as examples/mnist/train_mnist_data_parallel.cc: the
//                                whole MLP on every rank, its own batch of 100 per rank, and
//                                create_multi_node_optimizer(optimizer, comm, DataParallelOptions())
//                                with its defaults: buckets of 4 MiB whose allreduce starts while
//                                backward runs (overlap), no sharding.
//   dp.mlp.train.{sgd,adam}.after   the same options with overlap = false: every bucket's
//                                allreduce after backward, at update.
//   dp.mlp.train.{sgd,adam}.packed  the old overload create_multi_node_optimizer(optimizer, comm):
//                                one packed allreduce of every gradient per update.
// SGD lr 0.01 / Adam lr 1e-3; batch 100 per rank, 20 random batches cycled (inputs uniform in
// [0, 1), labels uniform in 0..9; the same on both ranks for mp, seeded per rank for dp). A step
// is Optimizer::update(lossfun): clear grads + forward + loss + backward (+ allreduce) + update.
// The reference's methodology: a barrier before every step, the step's time is the max over the
// ranks, 10 warm-up and 50 timed steps, median. Rank 0 prints the lines, with samples_per_s (100
// per step for mp, 100 x ranks for dp) and the last step's loss (CHECK=FAIL if it is not finite).
// The three dp lines of a kind run one after the other in the same process, to be compared.
//
//   bazel build -c opt //bench:mlp_parallel_bench
//   OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1 /usr/bin/mpiexec.mpich -n 2 $BIN/bench/mlp_parallel_bench
//   (BIN=$(bazel info -c opt bazel-bin))
//   BENCH_ONLY=mp (or dp): one of the two.  BENCH_SCALE=0.3: fewer timed steps (never below 3).
//   BENCH_STEPS=1: also every timed step's time (the slowest rank's), one comment line per id.
//   BENCH_ONLY=trace: mp.mlp.train.sgd.{recorder,recorder_off,timeline,recorder_again}, the cost of
//   the flight recorder and of the timeline (comm/trace, core/timeline.h).
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "bench/bench_util.h"
#include "comm/trace/flight_recorder.h"
#include "comm/transport/communicator.h"
#include "comm/data_parallel/data_parallel_options.h"
#include "comm/functions.h"
#include "comm/multi_node_links/multi_node_chain_list.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "core/timeline.h"
#include "core/ops.h"
#include "layers/links/identity.h"
#include "layers/links/linear.h"
#include "layers/optimizers/adam.h"
#include "layers/optimizers/sgd.h"

using namespace tandem;

namespace {

constexpr int B = 100, IN = 784, U = 1000, OUT = 10, NB = 20;

// --- the models (examples/mnist/mnist_common.h's split, with the sizes spelled out) -------------

class MLP : public Chain {
 public:
  MLP() {
    l1_ = add_link("l1", std::make_shared<Linear>(IN, U));
    l2_ = add_link("l2", std::make_shared<Linear>(U, U));
    l3_ = add_link("l3", std::make_shared<Linear>(U, OUT));
  }
  Variable forward(const Variable& x) override { return (*l3_)(F::relu((*l2_)(F::relu((*l1_)(x))))); }

 private:
  std::shared_ptr<Linear> l1_, l2_, l3_;
};

class FirstLayer : public Chain {  // rank 0: Linear(784, 1000) + ReLU
 public:
  FirstLayer() { l1_ = add_link("l1", std::make_shared<Linear>(IN, U)); }
  Variable forward(const Variable& x) override { return F::relu((*l1_)(x)); }

 private:
  std::shared_ptr<Linear> l1_;
};

class LastLayers : public Chain {  // rank 1: Linear(1000, 1000) + ReLU, Linear(1000, 10)
 public:
  LastLayers() {
    l2_ = add_link("l2", std::make_shared<Linear>(U, U));
    l3_ = add_link("l3", std::make_shared<Linear>(U, OUT));
  }
  Variable forward(const Variable& h) override { return (*l3_)(F::relu((*l2_)(h))); }

 private:
  std::shared_ptr<Linear> l2_, l3_;
};

// The explicit form (train_mnist_model_parallel --form explicit).
class ExplicitRank0 : public Chain {
 public:
  explicit ExplicitRank0(CommunicatorPtr comm) : comm_(std::move(comm)) {
    first_ = add_link("0", std::make_shared<FirstLayer>());
  }
  Variable forward(const Variable& x) override {
    Variable phi = F::send((*first_)(x), *comm_, 1);  // phi: the delegate variable
    return F::recv(*comm_, 1, phi);                   // keeps the send in this rank's graph
  }

 private:
  CommunicatorPtr comm_;
  std::shared_ptr<FirstLayer> first_;
};

class ExplicitRank1 : public Chain {
 public:
  explicit ExplicitRank1(CommunicatorPtr comm) : comm_(std::move(comm)) {
    last_ = add_link("0", std::make_shared<LastLayers>());
  }
  Variables forward_many(const Variables&) override {
    Variable h = F::recv(*comm_, 0);
    return {F::send((*last_)(h), *comm_, 0)};  // a delegate: backward() on it runs the exchange
  }

 private:
  CommunicatorPtr comm_;
  std::shared_ptr<LastLayers> last_;
};

// --- measurement ------------------------------------------------------------------------------

struct Context {
  CommunicatorPtr comm;
  int rank = 0, np = 1;
  std::string tags;  // after "lib=tandem"
  int warmup = 10, iters = 50;
  bool failed = false;
};

std::shared_ptr<Optimizer> make_optimizer(const std::string& kind) {
  if (kind == "sgd") return std::make_shared<SGD>(0.01);
  return std::make_shared<Adam>(1e-3);
}

struct Batches {
  std::vector<Variable> xs, ts;
};

Batches make_batches(std::uint64_t seed) {
  Generator gen(seed);
  Batches out;
  for (int i = 0; i < NB; ++i) {
    out.xs.emplace_back(rand_uniform({B, IN}, gen));
    std::vector<std::int64_t> labels(B);
    for (auto& l : labels) l = static_cast<std::int64_t>(gen.next() % OUT);
    out.ts.emplace_back(from_vector(labels, {B}));
  }
  return out;
}

// warmup + iters steps, each after a barrier; rank 0 prints the median of the per-step maxima.
// step(i) returns the loss on ranks that have one (undefined elsewhere).
void run_steps(Context& c, const std::string& id, double samples_per_step, const std::function<Variable(int)>& step) {
  std::vector<double> t;
  Variable loss;
  for (int i = 0; i < c.warmup + c.iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    loss = step(i);
    const double dt = (MPI_Wtime() - t0) * 1e3;
    if (i >= c.warmup) t.push_back(dt);
  }
  std::vector<double> tmax(t.size());
  MPI_Reduce(t.data(), tmax.data(), static_cast<int>(t.size()), MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (c.rank != 0) return;
  if (std::getenv("BENCH_STEPS")) {  // every timed step's time, for warm-up effects
    std::printf("# %s steps_ms:", id.c_str());
    for (double v : tmax) std::printf(" %.2f", v);
    std::printf("\n");
  }
  const bench::Stats s = bench::summarize(std::move(tmax));
  const double value = loss.defined() ? loss.data().item() : NAN;
  const bool finite = std::isfinite(value);
  c.failed |= !finite;
  bench::print_stats(id, c.tags, s);
  std::printf(" samples_per_s=%.0f loss=%.4f%s\n", samples_per_step / (s.median_ms * 1e-3), value,
              finite ? "" : " CHECK=FAIL");
  std::fflush(stdout);
}

// Model parallel through MultiNodeChainList (explicit = false) or F::send / F::recv by hand.
// suffix: appended to the line's id (the observability variants below).
void model_parallel(Context& c, const std::string& kind, bool explicit_form, const std::string& suffix = "") {
  manual_seed(0);
  const Batches data = make_batches(0);  // rank 1 draws them too, and ignores them
  LinkPtr model;
  if (c.rank == 0) {
    if (explicit_form) {
      model = std::make_shared<ExplicitRank0>(c.comm);
    } else {
      auto chain = std::make_shared<MultiNodeChainList>(c.comm);
      chain->add_link(std::make_shared<FirstLayer>(), {}, 1);
      chain->add_link(std::make_shared<Identity>(), 1, {});  // rank 0: where the logits arrive
      model = chain;
    }
  } else if (c.rank == 1) {
    if (explicit_form) {
      model = std::make_shared<ExplicitRank1>(c.comm);
    } else {
      auto chain = std::make_shared<MultiNodeChainList>(c.comm);
      chain->add_link(std::make_shared<LastLayers>(), 0, 0);
      model = chain;
    }
  } else {
    model = std::make_shared<Identity>();  // ranks beyond 2 only join the barriers
  }
  auto optimizer = make_optimizer(kind);
  optimizer->setup(model);
  run_steps(c, "mp.mlp.train." + kind + (explicit_form ? ".fn" : "") + suffix, B, [&](int i) {
    Variable loss;
    if (c.rank == 0) {
      optimizer->update([&] { return loss = F::softmax_cross_entropy((*model)(data.xs[i % NB]), data.ts[i % NB]); });
    } else if (c.rank == 1) {
      optimizer->update([&] { return model->forward_many({})[0]; });  // backward from the delegate
    }
    return loss;
  });
}

// How the data-parallel lines sync gradients: the id's suffix after dp.mlp.train.<kind>.
enum class DataParallelForm { kOverlap, kAfter, kPacked };

// Data parallel through create_multi_node_optimizer.
void data_parallel(Context& c, const std::string& kind, DataParallelForm form) {
  manual_seed(0);  // the same initial weights on every rank: the first update goes ahead at once
  auto model = std::make_shared<MLP>();
  const Batches data = make_batches(1 + static_cast<std::uint64_t>(c.rank));  // different data per rank
  std::shared_ptr<Optimizer> optimizer;
  std::string suffix;
  if (form == DataParallelForm::kPacked) {
    optimizer = create_multi_node_optimizer(make_optimizer(kind), c.comm);
    suffix = ".packed";
  } else {
    DataParallelOptions options;  // the defaults: overlap, buckets of 4 MiB, zero = 0
    options.overlap = form == DataParallelForm::kOverlap;
    optimizer = create_multi_node_optimizer(make_optimizer(kind), c.comm, options);
    if (!options.overlap) suffix = ".after";
  }
  optimizer->setup(model);
  run_steps(c, "dp.mlp.train." + kind + suffix, double(B) * c.np, [&](int i) {
    Variable loss;
    optimizer->update([&] { return loss = F::softmax_cross_entropy((*model)(data.xs[i % NB]), data.ts[i % NB]); });
    return loss;
  });
}

}  // namespace

int main() {
  Context c;
  c.comm = create_communicator("naive");  // initialises MPI (finalised at exit)
  c.rank = c.comm->rank();
  c.np = c.comm->size();
  if (c.np < 2) {
    std::fprintf(stderr,
                 "mlp_parallel_bench needs 2 ranks: OMP_NUM_THREADS=1 /usr/bin/mpiexec.mpich -n 2 "
                 "bazel-bin/bench/mlp_parallel_bench\n");
    return 1;
  }
  // One thread per rank on 2 cores, as the reference (ANCHOR_RANK_THREADS; BENCH_RANK_THREADS here).
  const char* rt = std::getenv("BENCH_RANK_THREADS");
  const int threads = rt && std::atoi(rt) > 0 ? std::atoi(rt) : 1;
  bench::set_threads(threads);
  char ver[MPI_MAX_LIBRARY_VERSION_STRING];
  int verlen = 0;
  MPI_Get_library_version(ver, &verlen);
  c.tags = "mpi=" + bench::kv(std::string(ver).substr(0, std::string(ver).find('\n'))) + " comm=" + c.comm->name() +
           " ranks=" + std::to_string(c.np) + " " + bench::threads_tag(threads) + " batch_per_rank=100";
  c.iters = bench::scaled(50);

  const char* only = std::getenv("BENCH_ONLY");
  const bool want_mp_only = only && std::strstr(only, "mp") != nullptr;
  const bool want_dp_only = only && std::strstr(only, "dp") != nullptr;
  const bool mp = want_mp_only || !want_dp_only, dp = want_dp_only || !want_mp_only;

  MPI_Barrier(MPI_COMM_WORLD);
  if (c.rank == 0) {
    std::printf("# start\n");  // start-up is over: ../shared/bench/runq restarts its noise window here
    std::fflush(stdout);
  }
  // BENCH_ONLY=trace: what observing a run costs, on the model-parallel SGD step, in one process:
  // the flight recorder on (the default), off (TANDEM_TRACE_BUFFER_SIZE=0), and the timeline
  // recording every function and message (TANDEM_TIMELINE), then the default again.
  if (only && std::strstr(only, "trace")) {
    model_parallel(c, "sgd", false, ".recorder");
    trace::FlightRecorder::instance().reset(0);
    model_parallel(c, "sgd", false, ".recorder_off");
    trace::FlightRecorder::instance().reset(2000);
    timeline::set_enabled(true);
    model_parallel(c, "sgd", false, ".timeline");
    timeline::set_enabled(false);
    timeline::clear();
    model_parallel(c, "sgd", false, ".recorder_again");
    return 0;
  }
  for (const std::string kind : {"sgd", "adam"}) {  // the reference's order
    if (mp) model_parallel(c, kind, false);
    if (dp)
      for (DataParallelForm form : {DataParallelForm::kOverlap, DataParallelForm::kAfter, DataParallelForm::kPacked})
        data_parallel(c, kind, form);
    if (mp) model_parallel(c, kind, true);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  int failed = c.failed ? 1 : 0;
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return failed;
}
