#include "layers/optimizers/optimizer.h"

#include <cmath>

#include "autograd/engine.h"
#include "autograd/order_free_gradients.h"
#include "core/deterministic.h"
#include "core/ops.h"

namespace tandem {

namespace {
// state_dict's entries of the loss scaler: "loss_scaler/scale", ... (no parameter has this name).
constexpr const char* kLossScalerPrefix = "loss_scaler/";
}  // namespace

void Optimizer::setup(LinkPtr target) {
  TANDEM_CHECK(target != nullptr, type_name(), "::setup: the target link is null");
  target_ = std::move(target);
  if (sync_) sync_->attach(*target_);
}

void Optimizer::set_gradient_sync(std::shared_ptr<GradientSync> sync) {
  sync_ = std::move(sync);
  if (sync_ && target_) sync_->attach(*target_);
}

const LinkPtr& Optimizer::target() const {
  TANDEM_CHECK(target_ != nullptr, type_name(), ": setup(link) has not been called");
  return target_;
}

void Optimizer::add_hook(std::shared_ptr<OptimizerHook> hook) {
  TANDEM_CHECK(hook != nullptr, type_name(), "::add_hook: null hook");
  hooks_.push_back(std::move(hook));
}

void Optimizer::update() {
  const LinkPtr& link = target();
  // Deterministic mode: the gradient groups of this update are counted from here on.
  struct GroupsReset {
    ~GroupsReset() { reset_gradient_groups(); }
  } reset_groups;
  if (sync_ && !sync_->before_update(*link)) return;
  if (!sync_ && deterministic() && gradient_groups() > 1) {
    // The mean over the groups (a sync divides by those of all its ranks).
    const double scale = 1.0 / static_cast<double>(gradient_groups());
    for (auto& [name, param] : link->namedparams())
      if (param.grad().defined()) round_order_free_gradient(param, scale);
  }
  if (scaler_) {
    std::vector<std::pair<std::string, Variable>> params = update_params();
    double nonfinite = scaler_->unscale(params);
    // Sharded (ZeRO): each rank has looked at its slices only.
    if (sync_) nonfinite = sync_->total_over_shards(nonfinite);
    scaler_->update(nonfinite);
    if (nonfinite > 0) {  // skipped: the parameters and t() stay as they are
      if (sync_) sync_->after_update(*link);
      return;
    }
  }
  ++t_;
  for (const auto& hook : hooks_) (*hook)(*this);
  for (auto& [name, param] : update_params()) {
    if (!param.grad().defined()) continue;
    // A 16-bit parameter's gradient may be f32 (unscaled by a loss scaler, or kept in f32).
    const bool wide_grad = is_half(param.dtype()) && param.grad().dtype() == DType::f32;
    TANDEM_CHECK(param.grad().shape() == param.shape() && (param.grad().dtype() == param.dtype() || wide_grad),
                 type_name(), ": gradient ", param.grad().description(), " of parameter '", name, "' does not match ",
                 param.description());
    auto [it, created] = states_.try_emplace(name);
    const auto bracket = name.rfind('[');
    updating_ = bracket != std::string::npos && name.back() == ']' ? name.substr(0, bracket) : name;
    if (is_half(param.dtype())) {
      update_with_master(param, it->second, created);
      continue;
    }
    if (created) init_state(param, it->second);
    // State made (or loaded) before the link moved to another device follows its parameter.
    for (auto& [key, tensor] : it->second)
      if (tensor.device() != param.data().device()) tensor = tensor.to(param.data().device());
    update_one(param, it->second);
  }
  if (sync_) sync_->after_update(*link);
}

void Optimizer::update_with_master(Variable& param, State& state, bool created) {
  if (created) {
    state["master"] = param.data().to(DType::f32).clone();
    init_state(Variable(state.at("master")), state);  // f32 state beside it
  }
  for (auto& [key, tensor] : state)
    if (tensor.device() != param.data().device()) tensor = tensor.to(param.data().device());
  Variable master(state.at("master"));  // shares the master's memory: the rule updates it in place
  master.set_grad(param.grad().to(DType::f32));
  update_one(master, state);
  Tensor data = param.data();
  data.copy_(state.at("master").to(param.dtype()));
}

std::vector<std::pair<std::string, Variable>> Optimizer::update_params() const {
  return sync_ ? sync_->update_params(*target()) : target()->namedparams();
}

void Optimizer::update(const std::function<Variable()>& lossfun) {
  target()->cleargrads();
  const Variable loss = lossfun();
  (scaler_ ? scaler_->scale(loss) : loss).backward();
  update();
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("t", full({}, static_cast<double>(t_), DType::i64));
  out.emplace_back("epoch", full({}, static_cast<double>(epoch_), DType::i64));
  for (const auto& [param, state] : states_)
    for (const auto& [key, tensor] : state) out.emplace_back(param + "/" + key, tensor);
  if (scaler_)
    for (auto& [key, tensor] : scaler_->state_dict()) out.emplace_back(kLossScalerPrefix + key, tensor);
  return out;
}

bool Optimizer::load_whole_into_slices(const std::string& param_name, const std::string& state_key,
                                       const Tensor& whole, std::map<std::string, State>& states) {
  if (!has_target()) return false;
  Variable param;
  for (auto& [name, p] : target()->namedparams()) {
    if (name == param_name) param = p;
  }
  if (!param.defined()) return false;  // not the model's: the caller's error
  TANDEM_CHECK(whole.shape() == param.shape() && whole.dtype() == param.dtype(), type_name(), ": state '", param_name,
               "/", state_key, "' is ", whole.description(), " but the parameter is ", param.description());
  const Tensor flat = whole.reshape({-1});
  // This rank's slices (none: other ranks hold all of this parameter's state).
  for (const GradientSync::Slice& slice : sync_->slices_of(*target(), param_name)) {
    TANDEM_CHECK(0 <= slice.begin && slice.begin < slice.end && slice.end <= flat.numel(), type_name(), ": slice '",
                 slice.name, "' does not fit '", param_name, "' of ", flat.numel(), " elements");
    states[slice.name][state_key] = flat.slice_rows(slice.begin, slice.end).to(param.data().device()).clone();
  }
  return true;
}

void Optimizer::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& entries) {
  std::map<std::string, Variable> params;
  for (auto& [name, param] : update_params()) params[name] = param;
  std::map<std::string, State> states;
  std::int64_t t = -1, epoch = -1;
  // The counters as integers (a float such as NaN or 1e300 does not convert to one), below 2^53
  // (they are reported as doubles, and the next update must not overflow them).
  const auto counter = [this](const std::string& key, const Tensor& tensor) {
    TANDEM_CHECK(tensor.numel() == 1 && (tensor.dtype() == DType::i64 || tensor.dtype() == DType::i32), type_name(),
                 ": state '", key, "' must be an integer scalar, got ", tensor.description());
    const std::int64_t value = tensor.to_vector<std::int64_t>()[0];
    TANDEM_CHECK(value < (std::int64_t(1) << 53), type_name(), ": state '", key, "' is implausibly large: ", value);
    return value;
  };
  std::vector<std::pair<std::string, Tensor>> scaler_state;
  for (const auto& [key, tensor] : entries) {
    if (key.rfind(kLossScalerPrefix, 0) == 0) {
      scaler_state.emplace_back(key.substr(std::string(kLossScalerPrefix).size()), tensor);
      continue;
    }
    if (key == "t") { t = counter(key, tensor); continue; }
    if (key == "epoch") { epoch = counter(key, tensor); continue; }
    const auto slash = key.rfind('/');
    TANDEM_CHECK(slash != std::string::npos, type_name(), ": unexpected optimizer state entry '", key, "'");
    const std::string param_name = key.substr(0, slash);
    auto param = params.find(param_name);
    if (param == params.end() && sync_ && load_whole_into_slices(param_name, key.substr(slash + 1), tensor, states)) {
      continue;
    }
    TANDEM_CHECK(param != params.end(), type_name(), ": state for '", param_name, "', which the model does not have");
    // A 16-bit parameter's state (its master copy included) is f32.
    const DType state_dtype = is_half(param->second.dtype()) ? DType::f32 : param->second.dtype();
    TANDEM_CHECK(tensor.shape() == param->second.shape() && tensor.dtype() == state_dtype, type_name(), ": state '",
                 key, "' is ", tensor.description(), " but the parameter is ", param->second.description(),
                 state_dtype != param->second.dtype() ? " (its state is f32)" : "");
    // A copy of its own, on the parameter's device (a snapshot is read on the host).
    const Tensor placed = tensor.to(param->second.data().device());
    states[param_name][key.substr(slash + 1)] = placed.shares_storage_with(tensor) ? placed.clone() : placed;
  }
  TANDEM_CHECK(t >= 0 && epoch >= 0, type_name(), ": the saved state has no 't'/'epoch' entries");
  // A parameter's state is all or nothing: update_one reads every entry that init_state makes.
  for (const auto& [param_name, state] : states) {
    State expected;
    init_state(params.at(param_name), expected);
    if (is_half(params.at(param_name).dtype())) expected["master"] = Tensor();
    for (const auto& [key, tensor] : expected)
      TANDEM_CHECK(state.count(key), type_name(), ": the saved state of '", param_name, "' has no '", key, "'");
  }
  // The loss scale is state like any other: it is not dropped, nor made up.
  TANDEM_CHECK(scaler_state.empty() || scaler_, type_name(), ": the saved state has a loss scaler's (",
               kLossScalerPrefix, "...) but this optimizer has none: set_loss_scaler first (mixed_f16)");
  TANDEM_CHECK(!scaler_state.empty() || !scaler_, type_name(), ": this optimizer scales the loss but the saved ",
               "state has no loss scaler (it was saved without one)");
  if (scaler_) scaler_->load_state_dict(scaler_state);
  t_ = t;
  epoch_ = epoch;
  states_ = std::move(states);
}

void WeightDecay::operator()(Optimizer& optimizer) {
  for (auto& [name, p] : optimizer.update_params())
    if (p.grad().defined()) p.set_grad(add(p.grad(), mul(p.data().to(p.grad().dtype()), rate_)));
}

GradientClipping::GradientClipping(double threshold, std::function<double(const std::string&)> counts,
                                   std::function<double(double)> total)
    : threshold_(threshold), counts_(std::move(counts)), total_(std::move(total)) {
  TANDEM_CHECK(threshold > 0, "GradientClipping: threshold must be positive, got ", threshold);
}

void GradientClipping::operator()(Optimizer& optimizer) {
  double squares = 0;
  const auto params = optimizer.update_params();
  for (const auto& [name, p] : params) {
    if (!p.grad().defined()) continue;
    const double weight = counts_ ? counts_(name) : 1.0;
    if (weight != 0) squares += weight * sum_of_squares(p.grad());
  }
  if (optimizer.gradient_sync()) squares = optimizer.gradient_sync()->total_over_shards(squares);
  if (total_) squares = total_(squares);
  const double norm = std::sqrt(squares);
  last_norm_ = norm;
  if (norm <= threshold_) return;
  const double rate = threshold_ / norm;
  for (auto [name, p] : params)
    if (p.grad().defined()) p.set_grad(mul(p.grad(), rate));
}

}  // namespace tandem
