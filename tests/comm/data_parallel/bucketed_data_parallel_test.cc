// The data-parallel optimizer with DataParallelOptions on 2 and 3 ranks, in f64: after 3 Adam
// steps the parameters equal one process's trained on the ranks' batches together (1e-10), for
// every mode: buckets after backward, overlapped with backward at bucket sizes that group the
// parameters differently, accumulation over 3 microbatches, ZeRO 1, 2 and 3, and their mixes; a
// model whose ranks use different branches and run a link different numbers of times; double
// buffering's one-step-stale rule; the error of a rank that skips a backward; and the buckets'
// order fixed at the first update from the order backward finished the gradients; on 2 ranks,
// unsharded buckets (divided before the sum) equal ZeRO 1 (divided after it) bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "autograd/functions.h"
#include "comm/data_parallel/data_parallel_optimizer.h"
#include "comm/data_parallel/gradient_buckets.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "layers/links/linear.h"
#include "layers/optimizers/adam.h"
#include "layers/optimizers/sgd.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;
using test_util::uniform;
using test_util::values;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

constexpr std::int64_t kBatch = 6;  // rows per rank per step

// An MLP with a branch chosen by the data: h = tanh(l1(x)); a and/or b on h; then l3.
class Net : public Chain {
 public:
  explicit Net(DType dtype = DType::f64) {
    manual_seed(7);  // the same weights on every rank and in the reference
    LinearOptions options;
    options.dtype = dtype;
    l1 = add_link("l1", std::make_shared<Linear>(4, 16, options));
    a = add_link("a", std::make_shared<Linear>(16, 16, options));
    b = add_link("b", std::make_shared<Linear>(16, 16, options));
    l3 = add_link("l3", std::make_shared<Linear>(16, 3, options));
  }
  // use_a / use_b: which branches run; repeat: how many times b runs (a link run several times).
  Variable loss(const Tensor& x, const Tensor& t, bool use_a, bool use_b, int repeat = 1) {
    Variable h = F::tanh((*l1)(Variable(x)));
    Variable sum = h;
    if (use_a) sum = F::add(sum, F::tanh((*a)(h)));
    if (use_b)
      for (int i = 0; i < repeat; ++i) sum = F::add(sum, F::tanh((*b)(sum)));
    return F::mean_squared_error((*l3)(sum), Variable(t));
  }
  std::shared_ptr<Linear> l1, a, b, l3;
};

Tensor batch_x(int step, int rank) { return uniform({kBatch, 4}, 1000 + 10 * step + rank, -1, 1, DType::f64); }
Tensor batch_t(int step, int rank) { return uniform({kBatch, 3}, 2000 + 10 * step + rank, -1, 1, DType::f64); }

// Which branches rank r uses at a step (the conditional-computation case): step 0 rank 0 uses
// a only, the others b only; then every rank uses both, and rank 0 runs b three times.
struct Route {
  bool a = true, b = true;
  int repeat = 1;
};
Route route(bool conditional, int step, int rank) {
  if (!conditional) return {true, false, 1};
  if (step == 0) return rank == 0 ? Route{true, false, 1} : Route{false, true, 1};
  return Route{true, true, rank == 0 ? 3 : 1};
}

// One process over every rank's batch: the mean of the ranks' losses is the loss of their
// batches together (equal batch sizes).
std::vector<std::vector<double>> reference(int ranks, int steps, bool conditional) {
  auto model = std::make_shared<Net>();
  auto adam = std::make_shared<Adam>(0.01);
  adam->setup(model);
  for (int step = 0; step < steps; ++step) {
    model->cleargrads();
    Variable total;
    for (int r = 0; r < ranks; ++r) {
      const Route go = route(conditional, step, r);
      Variable l = F::mul(model->loss(batch_x(step, r), batch_t(step, r), go.a, go.b, go.repeat), 1.0 / ranks);
      total = total.defined() ? F::add(total, l) : l;
    }
    total.backward();
    adam->update();
  }
  std::vector<std::vector<double>> out;
  for (const auto& [name, p] : model->namedparams()) out.push_back(values(p.data()));
  return out;
}

// The same steps data-parallel. accumulate: each rank's batch as that many microbatches.
std::vector<std::vector<double>> data_parallel(const DataParallelOptions& options, int steps, bool conditional,
                                               int accumulate = 1) {
  auto comm = world();
  auto model = std::make_shared<Net>();
  auto adam = create_multi_node_optimizer(std::make_shared<Adam>(0.01), comm, options);
  adam->setup(model);
  for (int step = 0; step < steps; ++step) {
    model->cleargrads();
    const Route go = route(conditional, step, comm->rank());
    const Tensor x = batch_x(step, comm->rank()), t = batch_t(step, comm->rank());
    const std::int64_t rows = kBatch / accumulate;
    for (int k = 0; k < accumulate; ++k) {
      const Tensor xk = x.slice_rows(k * rows, (k + 1) * rows), tk = t.slice_rows(k * rows, (k + 1) * rows);
      Variable l = F::mul(model->loss(xk, tk, go.a, go.b, go.repeat), 1.0 / accumulate);
      if (k + 1 < accumulate) {
        NoGradientSync accumulating;
        l.backward();
      } else {
        l.backward();
      }
    }
    adam->update();
    REQUIRE(adam->t() == step + 1);
  }
  const auto whole = gather_parameters(*adam);  // zero = 3: the parameters are sharded
  std::vector<std::vector<double>> out;
  for (const auto& [name, p] : model->namedparams()) out.push_back(values(p.data()));
  return out;
}

void require_close(const std::vector<std::vector<double>>& got, const std::vector<std::vector<double>>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    REQUIRE(got[i].size() == want[i].size());
    for (std::size_t j = 0; j < got[i].size(); ++j) {
      INFO("parameter " << i << " element " << j);
      REQUIRE(got[i][j] == Approx(want[i][j]).epsilon(0).margin(1e-10));
    }
  }
}

DataParallelOptions make(bool overlap, double bucket_mb, int zero, bool prefetch = false) {
  DataParallelOptions o;
  o.overlap = overlap;
  o.bucket_mb = bucket_mb;
  o.zero = zero;
  o.prefetch = prefetch;
  return o;
}

// 3 Adam steps of a model of `dtype` (bf16: f32 master weights and state) whose gradients travel
// in `wire`: with `options`, or through the packed allreduce after backward
// (create_multi_node_optimizer without options).
std::vector<std::vector<double>> half_run(const DataParallelOptions* options, DType dtype = DType::bf16,
                                          std::optional<DType> wire = std::nullopt) {
  auto comm = world();
  auto model = std::make_shared<Net>(dtype);
  auto adam = options ? create_multi_node_optimizer(std::make_shared<Adam>(0.01), comm, *options)
                      : create_multi_node_optimizer(std::make_shared<Adam>(0.01), comm, false, wire);
  adam->setup(model);
  for (int step = 0; step < 3; ++step) {
    model->cleargrads();
    const Tensor x = batch_x(step, comm->rank()).to(dtype), t = batch_t(step, comm->rank()).to(dtype);
    model->loss(x, t, true, false).backward();
    adam->update();
  }
  // Every rank's state is f32 beside its (slices of the) bf16 parameters, the master included.
  bool master = false;
  for (const auto& [key, tensor] : adam->state_dict()) {
    if (key == "t" || key == "epoch") continue;
    REQUIRE(tensor.dtype() == DType::f32);
    master = master || key.find("/master") != std::string::npos;
  }
  REQUIRE(master == is_half(dtype));
  const auto whole = gather_parameters(*adam);
  std::vector<std::vector<double>> out;
  for (const auto& [name, p] : model->namedparams()) {
    REQUIRE(p.dtype() == dtype);
    out.push_back(values(p.data()));
  }
  return out;
}

}  // namespace

TEST_CASE(
    "data-parallel in 16 bits: bf16 parameters, or f32 ones averaged in bf16 (allreduce_grad_dtype), in "
    "buckets, overlapped and under ZeRO 1-3 as through the packed allreduce") {
  const int n = world()->size();
  for (const bool wire_only : {false, true}) {
    INFO((wire_only ? "f32 parameters, bf16 gradients on the wire" : "bf16 parameters"));
    const DType dtype = wire_only ? DType::f32 : DType::bf16;
    const std::optional<DType> wire = wire_only ? std::optional<DType>(DType::bf16) : std::nullopt;
    const auto want = half_run(nullptr, dtype, wire);
    for (int zero : {0, 1, 2, 3}) {
      for (bool overlap : {false, true}) {
        INFO("zero " << zero << " overlap " << overlap);
        DataParallelOptions options = make(overlap, zero == 3 ? 0.0 : 0.0005, zero);
        options.allreduce_grad_dtype = wire;
        const auto got = half_run(&options, dtype, wire);
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          for (std::size_t j = 0; j < got[i].size(); ++j) {
            INFO("parameter " << i << " element " << j);
            // Two ranks: every sum is of two terms, in any order the same bits. Three: the order
            // of the 16-bit partial sums may differ, and the parameters by a unit of bf16's last place.
            if (n == 2) REQUIRE(got[i][j] == want[i][j]);
            else REQUIRE(got[i][j] == Approx(want[i][j]).epsilon(std::ldexp(1.0, -7)).margin(1e-3));
          }
        }
      }
    }
  }
}

TEST_CASE("gradient buckets: a 16-bit bucket's census stays exact (its counts, indices and steps)") {
  // bf16 holds the integers up to 256 only: a bucket of 300 parameters would name the 300th's
  // NaN as the 300th or 298th, and steps 300 and 301 would both read as 300.
  NamedParams params;
  for (int i = 0; i < 300; ++i) params.emplace_back("p" + std::to_string(i), Variable(zeros({1}, DType::bf16), true));
  const GradientPlan plan(params, 0, false, 2);
  REQUIRE(plan.buckets().size() == 2);
  for (const GradientBucket& bucket : plan.buckets()) REQUIRE(bucket.params.size() < 256);
  REQUIRE(census_step_modulus(DType::bf16) == 255);
  REQUIRE(census_step_modulus(DType::f16) == 2047);
  REQUIRE(census_step_modulus(DType::f32) == (1 << 20));
  REQUIRE_THROWS_WITH(GradientPlan(params, 0, false, 300), Contains("counts exactly up to 256 ranks"));
}

TEST_CASE("data-parallel modes equal one process after 3 Adam steps (f64)") {
  const int n = world()->size();
  const auto want = reference(n, 3, false);
  // 0.0005 MiB: about one parameter per bucket; 0.003: a few; 0: one bucket.
  for (int zero : {0, 1, 2, 3}) {
    for (bool overlap : {false, true}) {
      for (double mb : {0.0005, 0.003, 0.0}) {
        if (zero == 3 && mb != 0.0) continue;  // zero = 3 buckets by link
        INFO("zero " << zero << " overlap " << overlap << " bucket_mb " << mb);
        require_close(data_parallel(make(overlap, mb, zero), 3, false), want);
      }
    }
    INFO("zero " << zero << ", accumulation over 3 microbatches");
    require_close(data_parallel(make(true, 0.0005, zero), 3, false, 3), want);
  }
  // zero = 3 with the next link's gather started early.
  for (bool overlap : {false, true}) {
    INFO("zero 3 prefetch, overlap " << overlap);
    require_close(data_parallel(make(overlap, 0.0, 3, true), 3, false), want);
  }
  INFO("zero 3 prefetch, accumulation over 3 microbatches");
  require_close(data_parallel(make(true, 0.0, 3, true), 3, false, 3), want);
}

TEST_CASE("data-parallel: dividing before the sum (zero = 0, 2 ranks) gives the bits of dividing after it") {
  // Unsharded buckets with a power of two of ranks divide each gradient as it is copied in; ZeRO 1
  // divides the sum. Two ranks add two numbers in either order alike, so any difference would be
  // the division's: the parameters must agree bit for bit.
  if (world()->size() != 2) return;
  for (bool overlap : {false, true}) {
    INFO("overlap " << overlap);
    REQUIRE(data_parallel(make(overlap, 0.003, 0), 3, false) == data_parallel(make(overlap, 0.003, 1), 3, false));
  }
}

TEST_CASE("data-parallel: ranks that use different branches and run a link different numbers of times") {
  const int n = world()->size();
  const auto want = reference(n, 3, true);
  for (int zero : {0, 2, 3}) {
    for (bool overlap : {false, true}) {
      INFO("zero " << zero << " overlap " << overlap);
      require_close(data_parallel(make(overlap, 0.0005, zero), 3, true), want);
    }
  }
  INFO("zero 3 prefetch");
  require_close(data_parallel(make(true, 0.0, 3, true), 3, true), want);
}

TEST_CASE("data-parallel: a second backward without NoGradientSync still averages everything") {
  // Accumulation without the scope: the first backward's buckets are dropped and started again.
  const int n = world()->size();
  const auto want = reference(n, 3, false);
  for (int zero : {0, 1, 2, 3}) {
    INFO("zero " << zero);
    auto comm = world();
    auto model = std::make_shared<Net>();
    auto adam = create_multi_node_optimizer(std::make_shared<Adam>(0.01), comm, make(true, 0.0005, zero));
    adam->setup(model);
    for (int step = 0; step < 3; ++step) {
      model->cleargrads();
      const Tensor x = batch_x(step, comm->rank()), t = batch_t(step, comm->rank());
      for (int k = 0; k < 2; ++k)
        F::mul(model->loss(x.slice_rows(3 * k, 3 * k + 3), t.slice_rows(3 * k, 3 * k + 3), true, false), 0.5)
            .backward();
      adam->update();
    }
    const auto whole = gather_parameters(*adam);
    std::vector<std::vector<double>> got;
    for (const auto& [name, p] : model->namedparams()) got.push_back(values(p.data()));
    require_close(got, want);
  }
}

TEST_CASE("data-parallel: double buffering applies each step's average one step later") {
  auto comm = world();
  const int n = comm->size();
  // The reference: SGD, where step s applies the average of step s - 1's gradients, taken at the
  // weights of step s - 1 (ChainerMN's rule); the first update applies nothing.
  auto ref = std::make_shared<Net>();
  auto sgd = std::make_shared<SGD>(0.1);
  sgd->setup(ref);
  std::vector<Tensor> pending;
  for (int step = 0; step < 3; ++step) {
    ref->cleargrads();
    Variable total;
    for (int r = 0; r < n; ++r) {
      Variable l = F::mul(ref->loss(batch_x(step, r), batch_t(step, r), true, false), 1.0 / n);
      total = total.defined() ? F::add(total, l) : l;
    }
    total.backward();
    std::vector<Tensor> now;
    for (Variable p : ref->params()) now.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
    if (!pending.empty()) {
      std::size_t i = 0;
      for (Variable p : ref->params()) {
        const Tensor& g = pending[i++];
        if (g.defined()) p.set_grad(g); else p.cleargrad();
      }
      sgd->update();
    }
    pending = now;
  }
  DataParallelOptions o;
  o.double_buffering = true;
  auto model = std::make_shared<Net>();
  auto opt = create_multi_node_optimizer(std::make_shared<SGD>(0.1), comm, o);
  opt->setup(model);
  for (int step = 0; step < 3; ++step) {
    model->cleargrads();
    model->loss(batch_x(step, comm->rank()), batch_t(step, comm->rank()), true, false).backward();
    opt->update();
  }
  REQUIRE(opt->t() == 2);
  std::vector<std::vector<double>> got, want;
  for (const auto& [name, p] : model->namedparams()) got.push_back(values(p.data()));
  for (const auto& [name, p] : ref->namedparams()) want.push_back(values(p.data()));
  require_close(got, want);
}

TEST_CASE("data-parallel: replicas that differ are broadcast from rank 0 at the first update") {
  auto comm = world();
  auto model = std::make_shared<Net>();
  if (comm->rank() > 0) model->l1->W().set_data(full({16, 4}, 0.5, DType::f64));
  const std::vector<double> w0 = values(Net().l1->W().data());
  auto adam = create_multi_node_optimizer(std::make_shared<Adam>(0.01), comm, make(true, 0.0005, 1));
  adam->setup(model);
  model->loss(batch_x(0, comm->rank()), batch_t(0, comm->rank()), true, false).backward();
  adam->update();
  REQUIRE(adam->t() == 0);
  REQUIRE(values(model->l1->W().data()) == w0);
}

TEST_CASE("data-parallel: a rank that skips a backward is an error on every rank, naming it") {
  auto comm = world();
  const int last = comm->size() - 1;
  for (bool overlap : {false, true}) {
    INFO("overlap " << overlap);
    auto model = std::make_shared<Net>();
    auto adam = create_multi_node_optimizer(std::make_shared<Adam>(0.01), comm, make(overlap, 0.0005, 0));
    adam->setup(model);
    model->loss(batch_x(0, comm->rank()), batch_t(0, comm->rank()), true, false).backward();
    adam->update();
    model->cleargrads();
    if (comm->rank() != last) model->loss(batch_x(1, comm->rank()), batch_t(1, comm->rank()), true, false).backward();
    REQUIRE_THROWS_WITH(adam->update(), Contains(detail::concat("rank ", last, " ran no backward since the last update")));
  }
}

TEST_CASE("data-parallel: one process's snapshot (whole optimizer state) resumes at every ZeRO stage") {
  // One process trains 2 steps and saves its model and Adam state whole; each stage loads them
  // (every rank the same entries: each keeps its slices) and trains step 3, which must equal
  // the one process's step 3. This is how a run changes its number of ranks: consolidate its
  // snapshots (consolidate_snapshot), then load the result.
  auto comm = world();
  const int n = comm->size();
  std::vector<std::pair<std::string, Tensor>> saved_model, saved_state;
  std::vector<std::vector<double>> want;
  {
    auto model = std::make_shared<Net>();
    auto adam = std::make_shared<Adam>(0.01);
    adam->setup(model);
    for (int step = 0; step < 3; ++step) {
      if (step == 2) {
        for (const auto& [name, p] : model->namedparams()) saved_model.emplace_back(name, p.data().clone());
        // Copies: the optimizer updates its state in place.
        for (const auto& [key, value] : adam->state_dict()) saved_state.emplace_back(key, value.clone());
      }
      model->cleargrads();
      Variable total;
      for (int r = 0; r < n; ++r) {
        Variable l = F::mul(model->loss(batch_x(step, r), batch_t(step, r), true, false), 1.0 / n);
        total = total.defined() ? F::add(total, l) : l;
      }
      total.backward();
      adam->update();
    }
    for (const auto& [name, p] : model->namedparams()) want.push_back(values(p.data()));
  }
  for (int zero : {1, 2, 3}) {
    INFO("zero " << zero);
    auto model = std::make_shared<Net>();
    for (auto& [name, p] : model->namedparams())
      for (const auto& [saved_name, value] : saved_model)
        if (saved_name == name) {
          Tensor data = p.data();
          data.copy_(value);
        }
    auto adam = create_multi_node_optimizer(std::make_shared<Adam>(0.01), comm, make(true, 0.0005, zero));
    adam->setup(model);
    adam->load_state_dict(saved_state);
    REQUIRE(adam->t() == 2);
    model->cleargrads();
    model->loss(batch_x(2, comm->rank()), batch_t(2, comm->rank()), true, false).backward();
    adam->update();
    const auto whole = gather_parameters(*adam);
    std::vector<std::vector<double>> got;
    for (const auto& [name, p] : model->namedparams()) got.push_back(values(p.data()));
    require_close(got, want);
  }
  // A state for a parameter the model does not have is still an error, sharded or not.
  auto model = std::make_shared<Net>();
  auto adam = create_multi_node_optimizer(std::make_shared<Adam>(0.01), comm, make(true, 0.0005, 1));
  adam->setup(model);
  auto wrong = saved_state;
  wrong.emplace_back("l9/W/m", zeros({3}, DType::f64));
  REQUIRE_THROWS_WITH(adam->load_state_dict(wrong), Contains("state for 'l9/W', which the model does not have"));
}

namespace {
// Registers its links in another order than it runs them: in, mid, out run in that order.
class Shuffled : public Chain {
 public:
  Shuffled() {
    manual_seed(11);
    LinearOptions f64;
    f64.dtype = DType::f64;
    out = add_link("out", std::make_shared<Linear>(16, 3, f64));
    in = add_link("in", std::make_shared<Linear>(4, 16, f64));
    mid = add_link("mid", std::make_shared<Linear>(16, 16, f64));
  }
  Variable loss(const Tensor& x, const Tensor& t) {
    return F::mean_squared_error((*out)(F::tanh((*mid)(F::tanh((*in)(Variable(x)))))), Variable(t));
  }
  std::shared_ptr<Linear> out, in, mid;
};

// The links of the buckets' parameters, in the order the buckets start (each link once).
std::vector<std::string> bucket_links(Optimizer& optimizer) {
  std::vector<std::string> links;
  for (const auto& bucket : data_parallel_buckets(optimizer))
    for (const std::string& name : bucket) {
      const std::string link = name.substr(0, name.rfind('/'));
      if (std::find(links.begin(), links.end(), link) == links.end()) links.push_back(link);
    }
  return links;
}
}  // namespace

TEST_CASE("data-parallel: the first update fixes the buckets in the order backward finished the gradients") {
  auto comm = world();
  for (int zero : {0, 1}) {
    INFO("zero " << zero);
    auto model = std::make_shared<Shuffled>();
    auto adam = create_multi_node_optimizer(std::make_shared<Adam>(0.01), comm, make(true, 0.0005, zero));
    adam->setup(model);
    // Before any step: the reverse of registration order.
    REQUIRE(bucket_links(*adam) == std::vector<std::string>{"mid", "in", "out"});
    for (int step = 0; step < 2; ++step) {
      model->cleargrads();
      model->loss(batch_x(step, comm->rank()), batch_t(step, comm->rank())).backward();
      adam->update();
    }
    // Unsharded: the order the backward finished them (out first), the same on every rank.
    // Sharded: the optimizer state is laid out by the first order, which stays.
    const std::vector<std::string> want =
        zero == 0 ? std::vector<std::string>{"out", "mid", "in"} : std::vector<std::string>{"mid", "in", "out"};
    REQUIRE(bucket_links(*adam) == want);
    // And the steps computed what one process computes on the ranks' batches together.
    auto ref = std::make_shared<Shuffled>();
    auto ref_adam = std::make_shared<Adam>(0.01);
    ref_adam->setup(ref);
    for (int step = 0; step < 2; ++step) {
      ref->cleargrads();
      Variable total;
      for (int r = 0; r < comm->size(); ++r) {
        Variable l = F::mul(ref->loss(batch_x(step, r), batch_t(step, r)), 1.0 / comm->size());
        total = total.defined() ? F::add(total, l) : l;
      }
      total.backward();
      ref_adam->update();
    }
    std::vector<std::vector<double>> got, expected;
    for (const auto& [name, p] : model->namedparams()) got.push_back(values(p.data()));
    for (const auto& [name, p] : ref->namedparams()) expected.push_back(values(p.data()));
    require_close(got, expected);
  }
}
