// Weights packed once (core/cpu/packed_weights.h) inside real training: an MLP with gradient
// accumulation and evaluation between updates, and an LSTM whose recurrent weights serve every
// time step, computed with packing off and with packing from the second product of every weight
// version on. The two runs must agree to f32 rounding: a copy served stale after an update, or a
// product wired to the wrong operand, would move them apart by far more.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "core/cpu/gemm_kernels.h"
#include "core/cpu/packed_weights.h"
#include "core/ops.h"
#include "layers/links/linear.h"
#include "layers/links/n_step_lstm.h"
#include "layers/optimizers/sgd.h"

using namespace tandem;

namespace {

bool can_pack() { return cpu::gemm_backend_supports<float>(cpu::GemmBackend::kOneDnn); }

class MLP : public Chain {
 public:
  MLP() {
    l1_ = add_link("l1", std::make_shared<Linear>(64, 128));
    l2_ = add_link("l2", std::make_shared<Linear>(128, 128));
    l3_ = add_link("l3", std::make_shared<Linear>(128, 10));
  }
  std::string type_name() const override { return "MLP"; }
  Variable forward(const Variable& x) override { return (*l3_)(F::relu((*l2_)(F::relu((*l1_)(x))))); }

 private:
  std::shared_ptr<Linear> l1_, l2_, l3_;
};

// Runs `train` once with packing off and once with it on (always), from the same seed; returns the
// two results and how many products ran on packed copies in the second run.
std::vector<std::vector<float>> off_and_on(const std::function<std::vector<float>()>& train, std::int64_t* packed) {
  std::vector<std::vector<float>> out;
  for (const char* mode : {"off", "always"}) {
    ::setenv("TANDEM_PACKED_WEIGHTS", mode, 1);
    cpu::clear_packed_weights();
    out.push_back(train());
  }
  *packed = cpu::packed_weight_stats().packed_products;
  ::unsetenv("TANDEM_PACKED_WEIGHTS");
  return out;
}

void require_close(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("value " << i);
    REQUIRE(a[i] == Approx(b[i]).margin(1e-5).epsilon(1e-4));
  }
}

}  // namespace

TEST_CASE("an MLP trained with accumulated microbatches and evaluations equals itself without packed weights",
          "[packed]") {
  auto train = [] {
    manual_seed(3);
    auto model = std::make_shared<MLP>();
    SGD optimizer(0.1);
    optimizer.setup(model);
    Generator gen(4);
    std::vector<float> record;
    for (int step = 0; step < 4; ++step) {
      model->cleargrads();
      for (int micro = 0; micro < 3; ++micro) {  // the same weights serve three forwards and backwards
        const Variable x(randn({16, 64}, gen));
        std::vector<std::int32_t> labels(16);
        for (auto& l : labels) l = static_cast<std::int32_t>(gen.next() % 10);
        F::softmax_cross_entropy((*model)(x), Variable(from_vector(labels, {16}))).backward();
      }
      optimizer.update();
      NoGradGuard no_grad;  // an evaluation between updates: the weights serve every batch
      for (int batch = 0; batch < 3; ++batch) {
        const std::vector<float> y = (*model)(Variable(randn({16, 64}, gen))).data().to_vector<float>();
        record.insert(record.end(), y.begin(), y.end());
      }
    }
    for (auto& [name, p] : model->namedparams()) {
      const std::vector<float> v = p.data().to_vector<float>();
      record.insert(record.end(), v.begin(), v.end());
    }
    return record;
  };
  std::int64_t packed = 0;
  const auto runs = off_and_on(train, &packed);
  require_close(runs[0], runs[1]);
  if (can_pack()) REQUIRE(packed > 0);
}

TEST_CASE("an LSTM's outputs and gradients equal themselves without packed recurrent weights", "[packed]") {
  auto run = [] {
    manual_seed(5);
    NStepLSTM lstm(2, 32, 64);
    Generator gen(6);
    Variables xs;
    for (std::int64_t length : {12, 9, 12, 5, 7, 12, 3, 10}) xs.push_back(Variable(randn({length, 32}, gen)));
    auto result = lstm.forward(Variable(), Variable(), xs);
    Variable loss = F::sum(result.hy);
    for (const Variable& y : result.ys) loss = loss + F::sum(F::mul(y, y));
    loss.backward();
    std::vector<float> record = result.hy.data().to_vector<float>();
    for (auto& [name, p] : lstm.namedparams()) {
      const std::vector<float> g = p.grad().to_vector<float>();
      record.insert(record.end(), g.begin(), g.end());
    }
    return record;
  };
  std::int64_t packed = 0;
  const auto runs = off_and_on(run, &packed);
  require_close(runs[0], runs[1]);
  if (can_pack()) REQUIRE(packed > 0);
}

// By default only weights get packed copies (core/storage.h: Storage::mark_weight): autograd marks
// a model's parameters when a function reads them, and the LSTM its recurrent matrix; inputs and
// activations are never followed, however often a loop uses them again.
TEST_CASE("autograd marks parameters as weights, not inputs or activations", "[packed]") {
  ::unsetenv("TANDEM_PACKED_WEIGHTS");
  manual_seed(7);
  MLP model;
  Generator gen(8);
  const Variable x(randn({16, 64}, gen));
  for (auto& [name, p] : model.namedparams()) REQUIRE_FALSE(p.data().storage()->weight());
  Variable y;
  {
    NoGradGuard no_grad;  // inference reads the parameters too
    y = model(x);
  }
  for (auto& [name, p] : model.namedparams()) {
    INFO(name);
    REQUIRE(p.data().storage()->weight());
  }
  REQUIRE_FALSE(x.data().storage()->weight());
  REQUIRE_FALSE(y.data().storage()->weight());
  REQUIRE_FALSE(model(x).data().storage()->weight());

  // The LSTM's recurrent matrix is the four gates' matrices joined at every forward: marked there.
  cpu::clear_packed_weights();
  NStepLSTM lstm(1, 32, 64);
  Variables xs;
  for (std::int64_t length : {6, 4}) xs.push_back(Variable(randn({length, 32}, gen)));
  {
    NoGradGuard no_grad;
    lstm.forward(Variable(), Variable(), xs);
  }
  if (can_pack()) REQUIRE(cpu::packed_weight_stats().followed == 1);
}
