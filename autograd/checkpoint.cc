#include "autograd/checkpoint.h"

#include <optional>
#include <string>
#include <utility>

#include "autograd/autocast.h"
#include "autograd/engine.h"
#include "autograd/function_node.h"
#include "autograd/grad_mode.h"
#include "core/error.h"

namespace tandem {

namespace {

class Checkpoint : public FunctionNode {
 public:
  Checkpoint(CheckpointFunction fn, std::vector<Generator*> generators) : fn_(std::move(fn)) {
    generators_.push_back(&global_generator());
    for (Generator* g : generators) {
      TANDEM_CHECK(g != nullptr, "checkpoint: a generator is null");
      if (g != &global_generator()) generators_.push_back(g);
    }
  }
  std::string name() const override { return "checkpoint"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    for (Generator* g : generators_) forward_states_.push_back(g->state());
    train_ = train_mode();
    autocast_ = autocast_dtype();
    Variables xs;
    for (const Tensor& x : in) xs.push_back(Variable(x));
    Variables outs;
    {
      // The parameters the region reads: backward gives them gradients (hidden_leaves).
      autograd_detail::LeafRecorder leaves;
      NoGradGuard no_grad;
      outs = fn_(xs);
      set_hidden_leaves(leaves.leaves());
    }
    std::vector<Tensor> out;
    for (const Variable& y : outs) {
      TANDEM_CHECK(y.defined(), "checkpoint: the region returned an undefined variable");
      out.push_back(y.data());
    }
    save_for_backward(in);
    return out;
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    // The forward again, recorded, from the saved inputs, with the streams where the forward
    // found them; then the streams back where this backward found them.
    std::vector<std::string> backward_states;
    for (Generator* g : generators_) backward_states.push_back(g->state());
    for (std::size_t i = 0; i < generators_.size(); ++i) generators_[i]->set_state(forward_states_[i]);
    Variables xs;
    const std::vector<Tensor>& in = saved();
    for (std::size_t i = 0; i < in.size(); ++i)
      xs.push_back(Variable(in[i], needs_input_grad(i) && is_floating(in[i].dtype())));
    Variables outs;
    try {
      EnableGradGuard record;
      TrainModeGuard train(train_);
      AutocastScope autocast(autocast_);
      outs = fn_(xs);
    } catch (...) {
      for (std::size_t i = 0; i < generators_.size(); ++i) generators_[i]->set_state(backward_states[i]);
      throw;
    }
    for (std::size_t i = 0; i < generators_.size(); ++i) generators_[i]->set_state(backward_states[i]);
    TANDEM_CHECK(outs.size() == gy.size(), "checkpoint: the recomputed region returned ", outs.size(),
                 " outputs, the forward ", gy.size());
    Variables roots;
    std::vector<Tensor> seeds;
    for (std::size_t i = 0; i < outs.size(); ++i) {
      TANDEM_CHECK(outs[i].defined() && outs[i].shape() == gy[i].shape(), "checkpoint: the recomputed output ", i,
                   " is ", outs[i].defined() ? outs[i].description() : std::string("undefined"),
                   ", the forward's had the shape of its gradient ", gy[i].description(),
                   ": the region must compute the same thing twice");
      if (!outs[i].requires_grad() || !gy[i].defined()) continue;
      roots.push_back(outs[i]);
      seeds.push_back(gy[i]);
    }
    if (!roots.empty()) {
      BackwardOptions options;
      options.notify_observers = false;
      tandem::backward(roots, seeds, options);
    }
    std::vector<Tensor> grads;
    for (const Variable& x : xs) grads.push_back(x.requires_grad() ? x.grad() : Tensor());
    return grads;
  }

 private:
  CheckpointFunction fn_;
  std::vector<Generator*> generators_;
  std::vector<std::string> forward_states_;
  bool train_ = true;
  std::optional<DType> autocast_;
};

}  // namespace

Variables checkpoint(const CheckpointFunction& fn, const Variables& inputs, const std::vector<Generator*>& generators) {
  TANDEM_CHECK(fn != nullptr, "checkpoint: the region is empty");
  TANDEM_CHECK(!inputs.empty(), "checkpoint: the region needs at least one input");
  // Recording off, or no input needs a gradient: run it plainly (a node with no such input is not
  // recorded, and the parameters inside would get no gradient).
  bool any = false;
  for (const Variable& x : inputs) any = any || (x.defined() && x.requires_grad());
  if (!grad_enabled() || !any) return fn(inputs);
  return call<Checkpoint>(inputs, fn, generators);
}

Variable checkpoint(const std::function<Variable(const Variable&)>& fn, const Variable& input,
                    const std::vector<Generator*>& generators) {
  return checkpoint([fn](const Variables& xs) { return Variables{fn(xs[0])}; }, Variables{input}, generators)[0];
}

}  // namespace tandem
