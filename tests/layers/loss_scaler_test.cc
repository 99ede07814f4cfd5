// Dynamic loss scaling: the scale follows PyTorch GradScaler's rules on an injected sequence of
// overflows, skipped steps leave the parameters and t() alone, and scaling keeps f16 gradients
// that would otherwise flush to zero.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "autograd/functions.h"
#include "core/ops.h"
#include "layers/optimizers/loss_scaler.h"
#include "layers/optimizers/sgd.h"

using namespace tandem;

namespace {

class Single : public Link {
 public:
  Single(std::vector<double> value, DType dtype) {
    add_param("p", from_vector<double>(value, {static_cast<std::int64_t>(value.size())}).to(dtype));
  }
  Variable& p() { return param("p"); }
};

}  // namespace

TEST_CASE("LossScaler follows GradScaler's rules on an injected sequence of overflows", "[loss_scaler]") {
  // The trace, worked out by hand from GradScaler's documented rules (torch.amp.GradScaler.update
  // and the _amp_update_scale_ kernel): an overflow halves the scale and resets the tracker; a
  // clean step counts, and the growth_interval-th clean step in a row doubles the scale and resets.
  // init_scale 2^16, growth 2, backoff 0.5, growth_interval 3.
  const std::vector<int> overflow{0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0};
  const std::vector<double> scale{65536, 65536, 131072, 131072, 65536, 65536, 65536, 32768, 16384, 16384, 16384, 32768};
  const std::vector<std::int64_t> tracker{1, 2, 0, 1, 0, 1, 2, 0, 0, 1, 2, 0};
  LossScalerOptions options;
  options.growth_interval = 3;
  auto scaler = std::make_shared<LossScaler>(options);
  auto link = std::make_shared<Single>(std::vector<double>{0, 0}, DType::f32);
  SGD sgd(1.0);
  sgd.setup(link);
  sgd.set_loss_scaler(scaler);
  double expected_p = 0;
  std::int64_t expected_t = 0;
  for (std::size_t step = 0; step < overflow.size(); ++step) {
    INFO("step " << step + 1);
    // The gradient a scaled loss gives: 1 * scale (exact, a power of two), or an overflow.
    const double g = overflow[step] ? std::numeric_limits<double>::infinity() : 1.0;
    link->p().set_grad(from_vector<double>({g * scaler->scale(), 0.5 * scaler->scale()}).to(DType::f32));
    sgd.update();
    if (!overflow[step]) {
      expected_p -= 1.0;  // unscaled before the rule
      ++expected_t;
    }
    REQUIRE(scaler->scale() == scale[step]);
    REQUIRE(scaler->growth_tracker() == tracker[step]);
    REQUIRE(link->p().data().to_vector<double>()[0] == expected_p);
    REQUIRE(sgd.t() == expected_t);
  }
  REQUIRE(scaler->skipped() == 3);
  // NaN counts as an overflow too.
  link->p().set_grad(from_vector<double>({std::nan(""), 0}).to(DType::f32));
  sgd.update();
  REQUIRE(scaler->scale() == 16384);
  REQUIRE(sgd.t() == expected_t);
  // The state round-trips, and a restored scaler makes the same decisions.
  LossScaler restored(options);
  restored.load_state_dict(scaler->state_dict());
  REQUIRE(restored.scale() == scaler->scale());
  REQUIRE(restored.growth_tracker() == scaler->growth_tracker());
  REQUIRE(restored.skipped() == 4);
  auto bad = scaler->state_dict();
  bad[0].second = full({}, -1.0, DType::f64);
  REQUIRE_THROWS_WITH(restored.load_state_dict(bad), Catch::Contains("positive finite 'scale'"));
}

TEST_CASE("LossScaler: a growth that would overflow is not taken; options are checked", "[loss_scaler]") {
  LossScalerOptions options;
  options.init_scale = std::ldexp(1.0, 1023);
  options.growth_interval = 1;
  LossScaler scaler(options);
  scaler.update(0);
  REQUIRE(scaler.scale() == std::ldexp(1.0, 1023));
  REQUIRE(scaler.growth_tracker() == 0);
  options.backoff_factor = 1.5;
  REQUIRE_THROWS_WITH(LossScaler(options), Catch::Contains("backoff_factor"));
}

TEST_CASE("LossScaler keeps f16 gradients that would flush to zero, and skips with every rank", "[loss_scaler]") {
  // d(loss)/dp = 2e-8, below half of f16's smallest subnormal (2^-24 = 6e-8): unscaled it is 0
  // in f16.
  const auto lossfun = [](Variable& p) { return [&p] { return F::sum(F::mul(p, 2e-8)); }; };
  auto plain = std::make_shared<Single>(std::vector<double>{1}, DType::f16);
  SGD sgd_plain(1e4);
  sgd_plain.setup(plain);
  sgd_plain.update(lossfun(plain->p()));
  auto scaled = std::make_shared<Single>(std::vector<double>{1}, DType::f16);
  SGD sgd_scaled(1e4);
  sgd_scaled.setup(scaled);
  // A scale of 2^10: the loss's gradient, the scale itself, must fit f16 (2^16 would not).
  LossScalerOptions small;
  small.init_scale = 1024;
  sgd_scaled.set_loss_scaler(std::make_shared<LossScaler>(small));
  sgd_scaled.update(lossfun(scaled->p()));
  std::map<std::string, Tensor> plain_state, scaled_state;
  for (const auto& [key, tensor] : sgd_plain.state_dict()) plain_state[key] = tensor;
  for (const auto& [key, tensor] : sgd_scaled.state_dict()) scaled_state[key] = tensor;
  REQUIRE(plain_state.at("p/master").item() == 1.0);  // the gradient was 0
  // 1 - 1e4 * 2e-8 (2e-8 * 2^10, an f16 subnormal with 9 bits, unscaled in f32).
  REQUIRE(sgd_scaled.t() == 1);
  REQUIRE(1 - scaled_state.at("p/master").item() == Approx(2e-4).epsilon(4e-3));
  // With the default 2^16 the f16 loss's own gradient overflows: the first step is skipped and
  // the scale halves, as GradScaler's first steps do.
  auto calibrating = std::make_shared<Single>(std::vector<double>{1}, DType::f16);
  SGD sgd_calibrating(1e4);
  sgd_calibrating.setup(calibrating);
  sgd_calibrating.set_loss_scaler(std::make_shared<LossScaler>());
  sgd_calibrating.update(lossfun(calibrating->p()));
  REQUIRE(sgd_calibrating.t() == 0);
  REQUIRE(sgd_calibrating.loss_scaler()->scale() == 32768);
  sgd_calibrating.update(lossfun(calibrating->p()));
  REQUIRE(sgd_calibrating.t() == 1);
  // Another rank's overflow (agree counts it) skips this rank's step too.
  LossScalerOptions options;
  options.agree = [](double local) { return local + 1; };
  auto agreed = std::make_shared<Single>(std::vector<double>{1}, DType::f32);
  SGD sgd_agreed(1.0);
  sgd_agreed.setup(agreed);
  sgd_agreed.set_loss_scaler(std::make_shared<LossScaler>(options));
  sgd_agreed.update(lossfun(agreed->p()));
  REQUIRE(sgd_agreed.t() == 0);
  REQUIRE(agreed->p().data().item() == 1.0);
  REQUIRE(sgd_agreed.loss_scaler()->scale() == 32768);
}

TEST_CASE("the optimizer's state holds the loss scaler's, and refuses to drop or invent it", "[loss_scaler]") {
  auto link = std::make_shared<Single>(std::vector<double>{1, 2}, DType::f32);
  SGD a(0.1);
  a.setup(link);
  LossScalerOptions options;
  options.growth_interval = 2;
  a.set_loss_scaler(std::make_shared<LossScaler>(options));
  for (int i = 0; i < 3; ++i) {
    link->p().set_grad(full({2}, a.loss_scaler()->scale(), DType::f32));
    a.update();
  }
  REQUIRE(a.loss_scaler()->scale() == 131072);
  SGD b(0.1);
  b.setup(link);
  b.set_loss_scaler(std::make_shared<LossScaler>(options));
  b.load_state_dict(a.state_dict());
  REQUIRE(b.loss_scaler()->scale() == 131072);
  REQUIRE(b.loss_scaler()->growth_tracker() == 1);
  SGD plain(0.1);
  plain.setup(link);
  REQUIRE_THROWS_WITH(plain.load_state_dict(a.state_dict()), Catch::Contains("has none"));
  REQUIRE_THROWS_WITH(b.load_state_dict(plain.state_dict()), Catch::Contains("has no loss scaler"));
}
