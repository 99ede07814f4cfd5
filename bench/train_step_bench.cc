// Training-step and inference benchmarks for the workloads of ../shared/bench/README.md:
//   mlp.train.{sgd,adam}.t{1,2}, mlp.infer.t{1,2}: 784-1000-1000-10 ReLU MLP, batch 100,
//   softmax cross-entropy, SGD lr 0.01 / Adam lr 1e-3, 20 random batches cycled.
// A training step is clear grads + forward + loss + backward + update, as in the anchors.
//
//   OMP_WAIT_POLICY=PASSIVE bazel run //bench:train_step_bench
//   BENCH_ONLY=mlp BENCH_THREADS=1 bazel run //bench:train_step_bench
#include <cstring>
#include <memory>

#include "autograd/functions.h"
#include "bench/bench_util.h"
#include "core/ops.h"
#include "layers/links/linear.h"
#include "layers/optimizers/adam.h"
#include "layers/optimizers/sgd.h"

using namespace tandem;

namespace {

bool selected(const char* family) {
  const char* only = std::getenv("BENCH_ONLY");
  return only == nullptr || std::strstr(only, family) != nullptr;
}

class MLP : public Chain {
 public:
  MLP(std::int64_t in, std::int64_t units, std::int64_t out) {
    l1_ = add_link("l1", std::make_shared<Linear>(in, units));
    l2_ = add_link("l2", std::make_shared<Linear>(units, units));
    l3_ = add_link("l3", std::make_shared<Linear>(units, out));
  }
  Variable forward(const Variable& x) override { return (*l3_)(F::relu((*l2_)(F::relu((*l1_)(x))))); }

 private:
  std::shared_ptr<Linear> l1_, l2_, l3_;
};

void mlp_benchmarks(int threads) {
  const int B = 100, IN = 784, U = 1000, OUT = 10, NB = 20;
  const double forward_flops = 2.0 * B * (double(IN) * U + double(U) * U + double(U) * OUT);
  Generator gen(0);
  std::vector<Variable> xs, ts;
  for (int i = 0; i < NB; ++i) {
    xs.emplace_back(rand_uniform({B, IN}, gen));
    std::vector<std::int64_t> labels(B);
    for (auto& l : labels) l = static_cast<std::int64_t>(gen.next() % OUT);
    ts.emplace_back(from_vector(labels, {B}));
  }
  for (const char* name : {"sgd", "adam"}) {
    manual_seed(0);
    auto model = std::make_shared<MLP>(IN, U, OUT);
    std::shared_ptr<Optimizer> optimizer;
    if (std::strcmp(name, "sgd") == 0) optimizer = std::make_shared<SGD>(0.01);
    else optimizer = std::make_shared<Adam>(1e-3);
    optimizer->setup(model);
    int it = 0;
    double loss = 0;
    const bench::Stats s = bench::measure(10, bench::scaled(60), [&] {
      const int i = it++ % NB;
      Variable step_loss;
      optimizer->update([&] { return step_loss = F::softmax_cross_entropy((*model)(xs[i]), ts[i]); });
      loss = step_loss.data().item();  // the anchors read the loss back every step too
    });
    bench::print_stats(std::string("mlp.train.") + name + ".t" + std::to_string(threads),
                       bench::threads_tag(threads) + " batch=100", s);
    std::printf(" gflops=%.1f samples_per_s=%.0f loss=%.3f\n", 3 * forward_flops / (s.median_ms * 1e6),
                B / (s.median_ms * 1e-3), loss);
    std::fflush(stdout);
  }
  manual_seed(0);
  MLP model(IN, U, OUT);
  NoGradGuard no_grad;
  int it = 0;
  const bench::Stats s = bench::measure(10, bench::scaled(100), [&] { model(xs[it++ % NB]); });
  bench::print_stats("mlp.infer.t" + std::to_string(threads), bench::threads_tag(threads) + " batch=100", s);
  std::printf(" gflops=%.1f samples_per_s=%.0f\n", forward_flops / (s.median_ms * 1e6), B / (s.median_ms * 1e-3));
  std::fflush(stdout);
}

}  // namespace

int main() {
  for (int threads : bench::thread_list()) {
    bench::set_threads(threads);
    if (selected("mlp")) mlp_benchmarks(threads);
  }
  return 0;
}
