// Optimizer updates on cuda:0 against the CPU: the fused update kernels (SGD, MomentumSGD,
// Adam with amsgrad and weight decay) and sum_of_squares, then the optimizers themselves with
// their hooks on a small model moved to the GPU: losses, parameters and state after several
// updates, and the state living on the parameters' device.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

#include "layers/links/linear.h"
#include "layers/optimizers/adam.h"
#include "layers/optimizers/sgd.h"
#include "tests/cuda/gpu_test_util.h"

using namespace tandem;
using namespace gpu_test;
using Catch::Matchers::Contains;

namespace {

AdamStep adam_step(std::int64_t t, bool amsgrad, double weight_decay, double eta = 1.0) {
  AdamStep s;
  const double alpha = 1e-3;
  s.alpha_t = alpha * std::sqrt(1 - std::pow(s.beta2, double(t))) / (1 - std::pow(s.beta1, double(t)));
  s.amsgrad = amsgrad;
  s.weight_decay_rate = weight_decay;
  s.eta = eta;
  return s;
}

}  // namespace

TEST_CASE("fused update kernels match the CPU over several steps", "[optimizer][kernels]") {
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{1000}, std::int64_t{1} << 20}) {
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO(n << " elements of " << dtype_name(dtype));
      // A few multiply-adds per step: FMA contraction on the GPU may round differently.
      const Tolerance tol = for_dtype(dtype, 1e-6, 1e-14);
      const Tensor p = uniform({n}, 1, -1, 1, dtype);
      std::vector<Tensor> grads;
      for (int step = 0; step < 4; ++step) grads.push_back(uniform({n}, 10 + step, -1, 1, dtype));
      {
        INFO("sgd_update_");
        check_op([&](std::vector<Tensor>& v) {
          for (int step = 0; step < 4; ++step) sgd_update_(v[0], v[1 + step], 0.05);
          return std::vector<Tensor>{};
        }, {p, grads[0], grads[1], grads[2], grads[3]}, tol);
      }
      {
        INFO("momentum_sgd_update_");
        check_op([&](std::vector<Tensor>& v) {
          for (int step = 0; step < 4; ++step) momentum_sgd_update_(v[0], v[1 + step], v[5], 0.05, 0.9);
          return std::vector<Tensor>{};
        }, {p, grads[0], grads[1], grads[2], grads[3], zeros({n}, dtype)}, tol);
      }
      for (bool amsgrad : {false, true}) {
        for (double decay : {0.0, 0.01}) {
          INFO("adam_update_ amsgrad " << amsgrad << " weight decay " << decay);
          // sqrt and a division per step.
          check_op([&](std::vector<Tensor>& v) {
            for (int step = 0; step < 4; ++step)
              adam_update_(v[0], v[1 + step], v[5], v[6], v[7], adam_step(step + 1, amsgrad, decay, 0.9));
            return std::vector<Tensor>{};
          }, {p, grads[0], grads[1], grads[2], grads[3], zeros({n}, dtype), zeros({n}, dtype), zeros({n}, dtype)},
                   for_dtype(dtype, Tolerance{1e-5, 1e-7}, near(1e-13)));
        }
      }
    }
  }
  // Without amsgrad, vhat may be undefined.
  check_op([](std::vector<Tensor>& v) {
    Tensor none;
    adam_update_(v[0], v[1], v[2], v[3], none, adam_step(1, false, 0));
    return std::vector<Tensor>{};
  }, {uniform({100}, 20), uniform({100}, 21), zeros({100}), zeros({100})}, Tolerance{1e-5, 1e-7});
  // A parameter that is a view with an offset: only its elements change.
  check_op([](std::vector<Tensor>& v) {
    Tensor rows = v[0].slice_rows(2, 5);
    sgd_update_(rows, v[1], 0.5);
    return std::vector<Tensor>{};
  }, {uniform({8, 3}, 22), uniform({3, 3}, 23)}, near(1e-7));
}

TEST_CASE("sum_of_squares accumulates in double on the GPU too", "[optimizer][kernels]") {
  for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{1000}, std::int64_t{3} << 20}) {
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO(n << " elements of " << dtype_name(dtype));
      const Tensor x = uniform({n}, 30, -1, 1, dtype);
      const double want = sum_of_squares(x);
      const double got = sum_of_squares(x.to(gpu()));
      REQUIRE(got == Approx(want).epsilon(1e-12).margin(1e-300));
    }
  }
  // A view with an offset: only the view's elements.
  const Tensor x = uniform({10, 10}, 31, -1, 1, DType::f64);
  REQUIRE(sum_of_squares(x.to(gpu()).slice_rows(3, 7)) == Approx(sum_of_squares(x.slice_rows(3, 7))).epsilon(1e-14));
}

namespace {

class TwoLayers : public Chain {
 public:
  explicit TwoLayers(DType dtype) {
    LinearOptions options;
    options.dtype = dtype;
    l1_ = add_link("l1", std::make_shared<Linear>(20, 16, options));
    l2_ = add_link("l2", std::make_shared<Linear>(16, 5, options));
  }
  Variable forward(const Variable& x) override { return (*l2_)(F::tanh((*l1_)(x))); }

 private:
  std::shared_ptr<Linear> l1_, l2_;
};

struct Run {
  std::vector<double> losses;
  std::vector<std::pair<std::string, Tensor>> params, state;
};

// `steps` updates of a fresh optimizer on a model on `device` that starts from `initial`'s
// parameters, on fixed data.
Run train(const std::function<std::shared_ptr<Optimizer>()>& make_optimizer, const TwoLayers& initial, DType dtype,
          Device device, int steps) {
  auto model = std::make_shared<TwoLayers>(dtype);
  model->copyparams(initial);
  model->to(device);
  std::shared_ptr<Optimizer> optimizer = make_optimizer();
  optimizer->setup(model);
  const Tensor x = uniform({32, 20}, 40, -1, 1, dtype).to(device);
  const Tensor t = random_ints({32}, 41, 0, 4, DType::i32).to(device);
  Run run;
  for (int step = 0; step < steps; ++step) {
    Variable loss;
    optimizer->update([&] { return loss = F::softmax_cross_entropy((*model)(Variable(x)), Variable(t)); });
    run.losses.push_back(loss.data().item());
  }
  for (const auto& [name, p] : model->namedparams()) {
    REQUIRE(p.device() == device);
    run.params.emplace_back(name, p.data());
  }
  run.state = optimizer->state_dict();
  return run;
}

void check_optimizer(const std::function<std::shared_ptr<Optimizer>()>& make_optimizer, DType dtype, Tolerance tol) {
  manual_seed(3);
  const TwoLayers initial(dtype);
  const Run want = train(make_optimizer, initial, dtype, cpu(), 6);
  const Run got = train(make_optimizer, initial, dtype, gpu(), 6);
  for (std::size_t step = 0; step < want.losses.size(); ++step) {
    INFO("loss of step " << step);
    REQUIRE(got.losses[step] == Approx(want.losses[step]).epsilon(tol.rtol).margin(tol.atol));
  }
  REQUIRE(got.params.size() == want.params.size());
  for (std::size_t i = 0; i < want.params.size(); ++i) {
    INFO("parameter " << want.params[i].first);
    REQUIRE(got.params[i].first == want.params[i].first);
    REQUIRE_GPU_MATCHES(got.params[i].second, want.params[i].second, tol);
  }
  REQUIRE(got.state.size() == want.state.size());
  for (std::size_t i = 0; i < want.state.size(); ++i) {
    const std::string& name = want.state[i].first;
    INFO("optimizer state " << name);
    REQUIRE(got.state[i].first == name);
    // Per-parameter state ("l1/W/m") is created on the parameter's device; t and epoch are counters.
    const bool per_parameter = name.find('/') != std::string::npos;
    if (per_parameter) REQUIRE(got.state[i].second.device() == gpu());
    const std::string bad = mismatch(got.state[i].second, want.state[i].second, tol, /*got_on_gpu=*/per_parameter);
    INFO(bad);
    REQUIRE(bad.empty());
  }
}

}  // namespace

TEST_CASE("optimizers on a model moved to the GPU follow the CPU step by step", "[optimizer][link]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    const Tolerance tol = for_dtype(dtype, Tolerance{1e-5, 1e-6}, near(1e-12));
    SECTION("SGD") {
      check_optimizer([] { return std::make_shared<SGD>(0.1); }, dtype, tol);
    }
    SECTION("MomentumSGD") {
      check_optimizer([] { return std::make_shared<MomentumSGD>(0.1, 0.9); }, dtype, tol);
    }
    SECTION("Adam") {
      // eps well above f32 rounding: Adam divides by sqrt(v), which magnifies the difference
      // between two gradients that are both nearly zero.
      check_optimizer([] { return std::make_shared<Adam>(1e-2, 0.9, 0.999, 1e-6); }, dtype, tol);
    }
    SECTION("Adam with amsgrad and decoupled weight decay") {
      check_optimizer([] { return std::make_shared<Adam>(1e-2, 0.9, 0.999, 1e-6, 1e-2, true); }, dtype, tol);
    }
    SECTION("hooks: WeightDecay and GradientClipping") {
      check_optimizer([] {
        auto sgd = std::make_shared<MomentumSGD>(0.1, 0.9);
        sgd->add_hook(std::make_shared<WeightDecay>(1e-2));
        sgd->add_hook(std::make_shared<GradientClipping>(0.05));  // small: it clips every step
        return sgd;
      }, dtype, tol);
    }
  }
}

TEST_CASE("optimizer kernels reject mismatched state", "[optimizer][errors]") {
  Tensor p = zeros({4}, DType::f32, gpu());
  CHECK_THROWS_WITH(sgd_update_(p, zeros({4}), 0.1), Contains("sgd_update_") && Contains("cpu") && Contains("cuda:0"));
  CHECK_THROWS_WITH(sgd_update_(p, zeros({3}, DType::f32, gpu()), 0.1), Contains("sgd_update_"));
  Tensor ints = zeros({4}, DType::i32, gpu());
  CHECK_THROWS_WITH(sgd_update_(ints, ints, 0.1), Contains("floating"));
}
