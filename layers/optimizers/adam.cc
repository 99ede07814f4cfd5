#include "layers/optimizers/adam.h"

#include <cmath>

#include "core/ops.h"

namespace tandem {

namespace {

AdamOptions checked(AdamOptions o) {
  TANDEM_CHECK(o.alpha > 0 && o.eps >= 0 && o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "Adam: bad "
               "hyperparameters alpha=", o.alpha, " beta1=", o.beta1, " beta2=", o.beta2, " eps=", o.eps);
  return o;
}

}  // namespace

Adam::Adam(AdamOptions options) : hyperparam(checked(options)) {}

Adam::Adam(double alpha, double beta1, double beta2, double eps, double weight_decay_rate, bool amsgrad)
    : Adam(AdamOptions{alpha, beta1, beta2, eps, 1.0, weight_decay_rate, amsgrad}) {}

double Adam::alpha_t() const {
  const double step = static_cast<double>(std::max<std::int64_t>(t(), 1));
  const double fix1 = 1.0 - std::pow(hyperparam.beta1, step);
  const double fix2 = 1.0 - std::pow(hyperparam.beta2, step);
  return hyperparam.alpha * std::sqrt(fix2) / fix1;
}

void Adam::init_state(const Variable& param, State& state) {
  state["m"] = zeros_like(param.data());
  state["v"] = zeros_like(param.data());
  if (hyperparam.amsgrad) state["vhat"] = zeros_like(param.data());
}

void Adam::update_one(Variable& param, State& state) {
  AdamStep step;
  step.alpha_t = alpha_t();
  step.beta1 = hyperparam.beta1;
  step.beta2 = hyperparam.beta2;
  step.eps = hyperparam.eps;
  if (hyperparam.eps_on_corrected_v)
    step.eps *= std::sqrt(1.0 - std::pow(hyperparam.beta2, static_cast<double>(std::max<std::int64_t>(t(), 1))));
  step.eta = hyperparam.eta;
  step.weight_decay_rate = !hyperparam.decays || hyperparam.decays(updating()) ? hyperparam.weight_decay_rate : 0.0;
  step.amsgrad = hyperparam.amsgrad;
  Tensor data = param.data();
  Tensor none;
  if (step.amsgrad && !state.count("vhat")) state["vhat"] = zeros_like(param.data());
  adam_update_(data, param.grad(), state.at("m"), state.at("v"), step.amsgrad ? state.at("vhat") : none, step);
}

}  // namespace tandem
