// Optimizers, with Chainer's semantics: setup(link), then update() after backward (or
// update(lossfun), which clears the gradients, computes the loss, backpropagates and updates).
// Each update runs the hooks (weight decay, gradient clipping), then the update rule on every
// parameter that has a gradient; parameters without one are skipped. State is kept per
// parameter name, so lazily initialised parameters join when they appear.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "layers/link.h"
#include "layers/optimizers/loss_scaler.h"

namespace tandem {

class Optimizer;

// Runs before the update rules, on the whole set of gradients.
class OptimizerHook {
 public:
  virtual ~OptimizerHook() = default;
  virtual std::string name() const = 0;
  virtual void operator()(Optimizer& optimizer) = 0;
};

// Runs at the start of every update, before the hooks: a data-parallel optimizer averages the
// gradients over processes here (comm/data_parallel/multi_node_optimizer.h). Returns false to skip this update (the
// first update of a multi-node optimizer broadcasts the parameters instead).
class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual bool before_update(Link& target) = 0;
  // The parameters the hooks and update rules run on, by name: the target's own, or, for an
  // optimizer whose state is sharded over ranks (ZeRO), this rank's slices of them (views of
  // their memory, with their gradients).
  virtual std::vector<std::pair<std::string, Variable>> update_params(Link& target) { return target.namedparams(); }
  // Runs after the update rules (a sharded optimizer gathers the updated slices here).
  virtual void after_update(Link& target) { (void)target; }
  // A sum whose terms are spread over the ranks that share the parameters (a hook's sum of
  // squared gradients, when each rank holds a slice): the total. Unsharded: the local sum.
  virtual double total_over_shards(double local) { return local; }
  // Called by Optimizer::setup (and set_gradient_sync after it): a sync that shards the
  // parameters themselves (ZeRO-3) takes them over here.
  virtual void attach(Link& target) { (void)target; }
  // While the returned handle lives, every parameter of the target is whole and readable (a
  // snapshot saves or loads them); when it goes, a sharded sync takes them back from their
  // values then. Collective where the sync is. Null: they always are.
  virtual std::shared_ptr<void> gather_parameters(Link& target) {
    (void)target;
    return nullptr;
  }
  // The slices of a whole parameter that update_params names on this rank (a sharded sync:
  // elements [begin, end) of the flattened parameter, possibly none), so that the state a
  // one-process run saved for that parameter loads into a sharded run. Unsharded: none.
  struct Slice {
    std::string name;
    std::int64_t begin = 0, end = 0;
  };
  virtual std::vector<Slice> slices_of(Link& target, const std::string& param) {
    (void)target, (void)param;
    return {};
  }
};

class Optimizer {
 public:
  // The named state tensors of one parameter ("m", "v", "velocity", ...).
  using State = std::map<std::string, Tensor>;

  virtual ~Optimizer() = default;
  virtual std::string type_name() const = 0;

  void setup(LinkPtr target);
  const LinkPtr& target() const;
  bool has_target() const { return target_ != nullptr; }

  void update();
  void update(const std::function<Variable()>& lossfun);
  void add_hook(std::shared_ptr<OptimizerHook> hook);
  void set_gradient_sync(std::shared_ptr<GradientSync> sync);
  const std::shared_ptr<GradientSync>& gradient_sync() const { return sync_; }
  // Dynamic loss scaling (f16 training; layers/optimizers/loss_scaler.h): update(lossfun) then
  // scales the loss, and update() unscales the gradients after the sync and before the hooks,
  // and skips the update when one is not finite. Null switches it off.
  void set_loss_scaler(std::shared_ptr<LossScaler> scaler) { scaler_ = std::move(scaler); }
  const std::shared_ptr<LossScaler>& loss_scaler() const { return scaler_; }

  // The parameters the update rules and hooks run on (GradientSync::update_params): the target's,
  // or this rank's slices of them under a sharded data-parallel optimizer.
  std::vector<std::pair<std::string, Variable>> update_params() const;

  // Number of updates done so far.
  std::int64_t t() const { return t_; }
  // Epoch counter for schedules; new_epoch() advances it (the trainer calls it).
  std::int64_t epoch() const { return epoch_; }
  void new_epoch() { ++epoch_; }

  // All state as named tensors ("<param>/<state>", plus "t" and "epoch", and the loss scaler's as
  // "loss_scaler/<state>"), for serialization.
  std::vector<std::pair<std::string, Tensor>> state_dict() const;
  // Restores what state_dict() returned; names, shapes and dtypes must match the parameters.
  // Under a sharded data-parallel sync it also takes a whole parameter's state (what one process,
  // or consolidate_snapshot, saved) and keeps this rank's slices of it: a run can change its
  // number of ranks by consolidating its snapshots and loading the result.
  void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& entries);

 protected:
  // Creates the state of a parameter on its first update.
  virtual void init_state(const Variable& param, State& state) = 0;
  // Updates one parameter from its gradient; t() already counts this update.
  virtual void update_one(Variable& param, State& state) = 0;
  // While update_one runs: the name of the parameter it updates, as the model names it (a ZeRO
  // slice "p[...]" of parameter p is named p).
  const std::string& updating() const { return updating_; }

 private:
  // A bf16 or f16 parameter: the rule updates an f32 master copy (state "master", f32 state beside
  // it) with the gradient widened (or f32 already: a loss scaler unscales into f32), and the
  // parameter becomes the master rounded once, so updates smaller than the parameter's last place
  // add up instead of vanishing.
  void update_with_master(Variable& param, State& state, bool created);
  // load_state_dict's entry for a parameter of the model that update_params names only in slices.
  bool load_whole_into_slices(const std::string& param_name, const std::string& state_key, const Tensor& whole,
                              std::map<std::string, State>& states);

  LinkPtr target_;
  std::vector<std::shared_ptr<OptimizerHook>> hooks_;
  std::shared_ptr<GradientSync> sync_;
  std::shared_ptr<LossScaler> scaler_;
  std::map<std::string, State> states_;
  std::int64_t t_ = 0;
  std::int64_t epoch_ = 0;
  std::string updating_;
};

// grad += rate * param, for every parameter with a gradient (Chainer's WeightDecay).
class WeightDecay : public OptimizerHook {
 public:
  explicit WeightDecay(double rate) : rate_(rate) {}
  std::string name() const override { return "WeightDecay"; }
  void operator()(Optimizer& optimizer) override;

 private:
  double rate_;
};

// Rescales all gradients together so that their global L2 norm is at most `threshold`.
// A model split over ranks (tensor and pipeline parallelism) has one norm over all of its
// parts: `counts` says how much a parameter's squares count on this rank (by its name in
// update_params(): 0 for a replica that another rank counts), and `total` sums the counted
// squares over the ranks holding the other parts (comm/model_parallel/gradient_norm.h builds
// both). Without them every parameter counts once, on every rank alike.
class GradientClipping : public OptimizerHook {
 public:
  explicit GradientClipping(double threshold, std::function<double(const std::string& name)> counts = nullptr,
                            std::function<double(double)> total = nullptr);
  std::string name() const override { return "GradientClipping"; }
  void operator()(Optimizer& optimizer) override;
  // The global norm the last call found (before clipping).
  double last_norm() const { return last_norm_; }

 private:
  double threshold_;
  std::function<double(const std::string&)> counts_;
  std::function<double(double)> total_;
  double last_norm_ = 0;
};

}  // namespace tandem
