// Optimizers and hooks: exact update values against the formulas, skipped parameters,
// state save/restore, and convergence on a small regression problem.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "autograd/functions.h"
#include "core/ops.h"
#include "layers/links/linear.h"
#include "layers/optimizers/adam.h"
#include "layers/optimizers/sgd.h"

using namespace tandem;

namespace {

// A link with one f64 parameter p whose gradient we set by hand.
class Single : public Link {
 public:
  explicit Single(std::vector<double> value) {
    add_param("p", from_vector<double>(value, {static_cast<std::int64_t>(value.size())}));
  }
  Variable& p() { return param("p"); }
};

std::vector<double> values(const Variable& v) { return v.data().to_vector<double>(); }

}  // namespace

TEST_CASE("SGD: p -= lr g, and parameters without a gradient are skipped", "[optimizer]") {
  auto link = std::make_shared<Single>(std::vector<double>{1, 2});
  SGD sgd(0.1);
  sgd.setup(link);
  link->p().set_grad(from_vector<double>({10, -20}));
  sgd.update();
  const std::vector<double> after = values(link->p());
  REQUIRE(after[0] == Approx(0).margin(1e-15));
  REQUIRE(after[1] == Approx(4));
  REQUIRE(sgd.t() == 1);
  link->cleargrads();
  sgd.update();
  REQUIRE(values(link->p()) == after);
}

TEST_CASE("MomentumSGD follows v = mu v - lr g; p += v", "[optimizer]") {
  auto link = std::make_shared<Single>(std::vector<double>{1});
  MomentumSGD opt(0.1, 0.9);
  opt.setup(link);
  double p = 1, v = 0;
  for (double g : {1.0, 2.0, -3.0}) {
    link->p().set_grad(from_vector<double>({g}));
    opt.update();
    v = 0.9 * v - 0.1 * g;
    p += v;
    REQUIRE(values(link->p())[0] == Approx(p).epsilon(1e-12));
  }
}

TEST_CASE("Adam matches Chainer's formulas, with amsgrad and weight decay", "[optimizer]") {
  for (bool amsgrad : {false, true}) {
    for (double decay : {0.0, 0.01}) {
      auto link = std::make_shared<Single>(std::vector<double>{0.5, -1.5});
      Adam adam(0.01, 0.9, 0.999, 1e-8, decay, amsgrad);
      adam.setup(link);
      std::vector<double> p = {0.5, -1.5}, m = {0, 0}, v = {0, 0}, vhat = {0, 0};
      const std::vector<std::vector<double>> grads = {{1.0, -2.0}, {0.1, 3.0}, {-0.5, 0.01}, {2.0, -0.2}};
      for (std::size_t step = 0; step < grads.size(); ++step) {
        link->p().set_grad(from_vector<double>(grads[step]));
        adam.update();
        const double t = static_cast<double>(step + 1);
        const double alpha_t = 0.01 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
        REQUIRE(adam.alpha_t() == Approx(alpha_t));
        for (int i = 0; i < 2; ++i) {
          const double g = grads[step][i];
          m[i] += 0.1 * (g - m[i]);
          v[i] += 0.001 * (g * g - v[i]);
          vhat[i] = std::max(vhat[i], v[i]);
          const double denom = std::sqrt(amsgrad ? vhat[i] : v[i]) + 1e-8;
          p[i] -= alpha_t * m[i] / denom + decay * p[i];
        }
        const auto got = values(link->p());
        REQUIRE(got[0] == Approx(p[0]).epsilon(1e-12));
        REQUIRE(got[1] == Approx(p[1]).epsilon(1e-12));
      }
    }
  }
}

// The fused update over enough elements to run the CPU's vectorised loop and its tail (1003 is
// no multiple of any vector width), in both precisions, against the formula in double.
TEMPLATE_TEST_CASE("adam_update_ matches the formula element by element over a long vector", "[optimizer]", float,
                   double) {
  const std::int64_t n = 1003;
  const DType dtype = std::is_same_v<TestType, float> ? DType::f32 : DType::f64;
  const double tolerance = std::is_same_v<TestType, float> ? 1e-6 : 1e-14;
  for (bool amsgrad : {false, true}) {
    Generator gen(7);
    Tensor p = rand_uniform({n}, gen).to(dtype), g = rand_uniform({n}, gen).to(dtype);
    Tensor m = rand_uniform({n}, gen).to(dtype), v = rand_uniform({n}, gen).to(dtype);
    Tensor vhat = rand_uniform({n}, gen).to(dtype);
    const auto p0 = p.to(DType::f64).to_vector<double>(), g0 = g.to(DType::f64).to_vector<double>();
    const auto m0 = m.to(DType::f64).to_vector<double>(), v0 = v.to(DType::f64).to_vector<double>();
    const auto h0 = vhat.to(DType::f64).to_vector<double>();
    AdamStep step;
    step.alpha_t = 0.003;
    step.eta = 0.5;
    step.weight_decay_rate = 0.01;
    step.amsgrad = amsgrad;
    adam_update_(p, g, m, v, vhat, step);
    const auto p1 = p.to(DType::f64).to_vector<double>(), m1 = m.to(DType::f64).to_vector<double>();
    const auto v1 = v.to(DType::f64).to_vector<double>(), h1 = vhat.to(DType::f64).to_vector<double>();
    for (std::int64_t i = 0; i < n; ++i) {
      const double mi = m0[i] + 0.1 * (g0[i] - m0[i]);
      const double vi = v0[i] + 0.001 * (g0[i] * g0[i] - v0[i]);
      const double hi = amsgrad ? std::max(h0[i], vi) : h0[i];
      const double pi = p0[i] - 0.5 * (0.003 * mi / (std::sqrt(amsgrad ? hi : vi) + 1e-8) + 0.01 * p0[i]);
      INFO("element " << i << ", amsgrad " << amsgrad);
      REQUIRE(m1[i] == Approx(mi).epsilon(tolerance));
      REQUIRE(v1[i] == Approx(vi).epsilon(tolerance));
      REQUIRE(h1[i] == Approx(hi).epsilon(tolerance));
      REQUIRE(p1[i] == Approx(pi).epsilon(tolerance));
    }
  }
}

TEST_CASE("fused updates refuse a gradient or state that shares memory with another operand", "[optimizer]") {
  Tensor both = zeros({8});
  Tensor p = both.slice_rows(0, 4), overlapping = both.slice_rows(2, 6), apart = both.slice_rows(4, 8);
  Tensor m = zeros({4}), v = zeros({4}), vhat;
  AdamStep step;
  step.alpha_t = 0.001;
  REQUIRE_THROWS_WITH(sgd_update_(p, p, 0.1), Catch::Contains("sgd_update_") && Catch::Contains("share memory"));
  REQUIRE_THROWS_WITH(momentum_sgd_update_(p, apart, overlapping, 0.1, 0.9),
                      Catch::Contains("operands 0 and 2") && Catch::Contains("share memory"));
  REQUIRE_THROWS_WITH(adam_update_(p, apart, m, m, vhat, step),
                      Catch::Contains("adam_update_") && Catch::Contains("operands 2 and 3"));
  // Neighbouring slices of one tensor are separate: fine.
  sgd_update_(p, apart, 0.1);
}

TEST_CASE("WeightDecay adds rate * p to the gradient before the update", "[optimizer]") {
  auto link = std::make_shared<Single>(std::vector<double>{2});
  SGD sgd(0.5);
  sgd.setup(link);
  sgd.add_hook(std::make_shared<WeightDecay>(0.1));
  link->p().set_grad(from_vector<double>({1}));
  sgd.update();
  REQUIRE(values(link->p())[0] == Approx(2 - 0.5 * (1 + 0.2)));
}

TEST_CASE("GradientClipping rescales to the threshold only when the global norm exceeds it", "[optimizer]") {
  auto link = std::make_shared<Single>(std::vector<double>{0, 0});
  SGD sgd(1.0);
  sgd.setup(link);
  sgd.add_hook(std::make_shared<GradientClipping>(1.0));
  link->p().set_grad(from_vector<double>({3, 4}));  // norm 5 -> scaled by 1/5
  sgd.update();
  REQUIRE(values(link->p())[0] == Approx(-0.6));
  REQUIRE(values(link->p())[1] == Approx(-0.8));
  link->p().set_grad(from_vector<double>({0.3, 0.4}));  // norm 0.5: untouched
  sgd.update();
  REQUIRE(values(link->p())[0] == Approx(-0.9));
  REQUIRE_THROWS_AS(GradientClipping(0), Error);
}

TEST_CASE("update(lossfun) clears, backpropagates and updates", "[optimizer]") {
  auto link = std::make_shared<Single>(std::vector<double>{3});
  SGD sgd(0.25);
  sgd.setup(link);
  link->p().set_grad(from_vector<double>({100}));  // stale: must be cleared
  sgd.update([&] { return F::sum(F::square(link->p())); });  // grad 2p = 6
  REQUIRE(values(link->p())[0] == Approx(1.5));
}

TEST_CASE("optimizer state round-trips through state_dict", "[optimizer]") {
  auto a = std::make_shared<Single>(std::vector<double>{1, 2});
  auto b = std::make_shared<Single>(std::vector<double>{1, 2});
  Adam adam_a(0.1), adam_b(0.1);
  adam_a.setup(a);
  adam_b.setup(b);
  a->p().set_grad(from_vector<double>({1, -1}));
  adam_a.update();
  b->p().set_data(a->p().data().clone());
  adam_b.load_state_dict(adam_a.state_dict());
  REQUIRE(adam_b.t() == 1);
  a->p().set_grad(from_vector<double>({0.5, 2}));
  b->p().set_grad(from_vector<double>({0.5, 2}));
  adam_a.update();
  adam_b.update();
  REQUIRE(values(a->p()) == values(b->p()));
  auto bad = adam_a.state_dict();
  bad.emplace_back("nope/m", zeros({2}, DType::f64));
  REQUIRE_THROWS_WITH(adam_b.load_state_dict(bad), Catch::Contains("nope"));
}

TEST_CASE("each optimizer fits a linear regression", "[optimizer]") {
  Generator gen(7);
  const Tensor x = randn({64, 3}, gen);
  const Tensor y = add(matmul(x, from_vector<float>({1.5f, -2, 0.5f}, {3, 1})), 0.3);
  std::vector<std::shared_ptr<Optimizer>> optimizers = {std::make_shared<SGD>(0.1),
                                                        std::make_shared<MomentumSGD>(0.05, 0.9),
                                                        std::make_shared<Adam>(0.05)};
  for (auto& opt : optimizers) {
    auto model = std::make_shared<Linear>(3, 1);
    opt->setup(model);
    double loss = 0;
    for (int i = 0; i < 300; ++i) {
      opt->update([&] { return F::mean_squared_error((*model)(Variable(x)), Variable(y)); });
      loss = F::mean_squared_error((*model)(Variable(x)), Variable(y)).data().item();
    }
    INFO(opt->type_name());
    REQUIRE(loss < 1e-4);
    REQUIRE(model->b().data().item() == Approx(0.3).margin(0.01));
  }
}

namespace {

// A link with one 16-bit parameter p.
class HalfSingle : public Link {
 public:
  HalfSingle(std::vector<double> value, DType dtype) {
    add_param("p", from_vector<double>(value, {static_cast<std::int64_t>(value.size())}).to(dtype));
  }
  Variable& p() { return param("p"); }
};

}  // namespace

TEST_CASE("16-bit parameters: the rule updates an f32 master copy, the parameter is it rounded once",
          "[optimizer][half]") {
  for (DType dtype : {DType::bf16, DType::f16}) {
    INFO(dtype_name(dtype));
    // 1 + 100 steps of 1e-4: each step is far below the last place of 1 in either format (2^-7,
    // 2^-10), so a 16-bit parameter updated in place would never move; the master reaches 0.99.
    auto link = std::make_shared<HalfSingle>(std::vector<double>{1, -2}, dtype);
    SGD sgd(1e-4);
    sgd.setup(link);
    for (int i = 0; i < 100; ++i) {
      link->p().set_grad(from_vector<double>({1, -1}).to(dtype));
      sgd.update();
    }
    std::map<std::string, Tensor> state;
    for (const auto& [key, tensor] : sgd.state_dict()) state[key] = tensor;
    REQUIRE(state.count("p/master"));
    const Tensor master = state.at("p/master");
    REQUIRE(master.dtype() == DType::f32);
    // The f32 sums of 100 steps, step by step, as the master holds them.
    float want0 = 1.0f, want1 = -2.0f;
    for (int i = 0; i < 100; ++i) {
      want0 -= static_cast<float>(1e-4) * 1.0f;
      want1 -= static_cast<float>(1e-4) * -1.0f;
    }
    REQUIRE(master.to_vector<float>() == std::vector<float>{want0, want1});
    REQUIRE(link->p().dtype() == dtype);
    REQUIRE(values(link->p()) == master.to(dtype).to_vector<double>());
    REQUIRE(values(link->p())[0] < 1.0);  // it moved: 0.99 rounds below 1 in both formats
    // Adam keeps f32 moments beside the master, and the state round-trips through state_dict.
    auto a = std::make_shared<HalfSingle>(std::vector<double>{0.5, 0.25}, dtype);
    auto b = std::make_shared<HalfSingle>(std::vector<double>{0.5, 0.25}, dtype);
    Adam adam_a(0.01), adam_b(0.01);
    adam_a.setup(a);
    adam_b.setup(b);
    a->p().set_grad(from_vector<double>({1, -3}).to(dtype));
    adam_a.update();
    for (const auto& [key, tensor] : adam_a.state_dict())
      if (key != "t" && key != "epoch") REQUIRE(tensor.dtype() == DType::f32);
    b->p().set_data(a->p().data().clone());
    adam_b.load_state_dict(adam_a.state_dict());
    a->p().set_grad(from_vector<double>({0.5, 2}).to(dtype));
    b->p().set_grad(from_vector<double>({0.5, 2}).to(dtype));
    adam_a.update();
    adam_b.update();
    REQUIRE(values(a->p()) == values(b->p()));
    // A saved state without the master copy is refused, naming it.
    auto no_master = adam_a.state_dict();
    no_master.erase(std::remove_if(no_master.begin(), no_master.end(), [](const auto& e) { return e.first == "p/master"; }),
                    no_master.end());
    REQUIRE_THROWS_WITH(adam_b.load_state_dict(no_master), Catch::Contains("has no 'master'"));
  }
}
