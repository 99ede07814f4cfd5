#include "autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/backward_observer.h"
#include "autograd/check_finite.h"
#include "autograd/function_node.h"
#include "autograd/grad_mode.h"
#include "autograd/order_free_gradients.h"
#include "autograd/tensor_observer.h"
#include "core/deterministic.h"
#include "core/ops/elementwise.h"
#include "core/timeline.h"

namespace tandem {

// Friend of FunctionNode: reads the recorded output metadata.
class BackwardEngine {
 public:
  explicit BackwardEngine(const BackwardOptions& options) : options_(options) {}

  void run(const Variables& outputs, const std::vector<Tensor>& seeds) {
    TANDEM_CHECK(outputs.size() == seeds.size(), "backward: ", outputs.size(), " outputs but ", seeds.size(), " seeds");
    for (std::size_t i = 0; i < outputs.size(); ++i) seed(outputs[i], seeds[i]);
    if (options_.notify_observers) observers_ = backward_observers();
    if (!observers_.empty()) {
      count_leaf_uses(outputs);
      for (BackwardObserver* observer : observers_) observer->backward_started();
    }
    // Gradients are plain tensors; nothing done by the functions' backward is recorded.
    NoGradGuard no_grad;
    while (!queue_.empty()) {
      std::shared_ptr<FunctionNode> function = queue_.top();
      queue_.pop();
      run_node(*function);
      if (!observers_.empty()) {
        release_final_leaves(*function);
        for (BackwardObserver* observer : observers_) observer->function_done();
      }
    }
    deliver_leaf_gradients();
    for (BackwardObserver* observer : observers_) observer->backward_finished();
  }

 private:
  struct Gradient {
    std::shared_ptr<VariableNode> node;  // keeps the key alive until delivered
    Tensor value;
  };

  struct LaterFirst {
    bool operator()(const std::shared_ptr<FunctionNode>& a, const std::shared_ptr<FunctionNode>& b) const {
      return a->sequence_number() < b->sequence_number();
    }
  };

  void seed(const Variable& output, const Tensor& given) {
    TANDEM_CHECK(output.defined(), "backward: called on an undefined variable");
    Tensor gradient = given;
    if (gradient.defined()) {
      TANDEM_CHECK(gradient.shape() == output.shape() && gradient.dtype() == output.dtype(), "backward: seed ",
                   gradient.description(), " does not match the output ", output.description());
    } else if (output.numel() == 1) {
      gradient = ones(output.shape(), output.dtype(), output.device());
    } else {
      TANDEM_CHECK(output.numel() == 0, "backward: output ", output.description(),
                   " is not a scalar; pass its gradient: backward(grad)");
      // A delegate variable: walk the graph behind it with no seed.
    }
    const std::shared_ptr<VariableNode>& node = output.node();
    if (gradient.defined() && output.requires_grad()) accumulate(node, gradient);
    if (node->creator) schedule(node->creator);
  }

  void schedule(const std::shared_ptr<FunctionNode>& function) {
    if (scheduled_.insert(function.get()).second) queue_.push(function);
  }

  void accumulate(const std::shared_ptr<VariableNode>& node, const Tensor& gradient) {
    // Deterministic mode: a parameter's terms go to its order-free sum one by one, so that terms
    // one layout computes in one backward and another in several sum alike.
    if (node->parameter && !node->creator && deterministic()) {
      Gradient term{node, gradient};
      return deliver(term);
    }
    auto [it, inserted] = gradients_.try_emplace(node.get(), Gradient{node, gradient});
    // Out of place: a function may hand the same tensor to several inputs (add does).
    if (!inserted) it->second.value = add(it->second.value, gradient);
  }

  void run_node(FunctionNode& function) {
    const std::vector<std::shared_ptr<VariableNode>> outputs = function.outputs();
    std::vector<Tensor> grad_outputs(outputs.size());
    bool any = false;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i]) continue;
      auto it = gradients_.find(outputs[i].get());
      if (it == gradients_.end()) continue;
      grad_outputs[i] = std::move(it->second.value);
      gradients_.erase(it);
      any = true;
      if (options_.retain_grad) {
        if (auto variable = outputs[i]->variable.lock()) variable->grad = grad_outputs[i];
      }
    }
    if (!any && !function.always_run_backward()) {
      // Nothing to compute here, but every node reachable from the outputs is still visited:
      // a communication node further back must run its half of the exchange all the same.
      for (const std::shared_ptr<VariableNode>& input : function.inputs())
        if (input->requires_grad && input->creator) schedule(input->creator);
      return;
    }
    if (function.zero_fill_grad_outputs()) {
      for (std::size_t i = 0; i < grad_outputs.size(); ++i) {
        if (!grad_outputs[i].defined())
          grad_outputs[i] =
              zeros(function.output_meta_[i].shape, function.output_meta_[i].dtype, function.output_meta_[i].device);
      }
    }
    function.check_not_released();
    // Parameters sharded over ranks (ZeRO-3) that this backward reads are gathered first.
    // (Also in a backward inside another, which tells the observers nothing else: the region a
    // checkpoint recomputes reads parameters that ZeRO-3 may have released since.)
    if (!observers_.empty() || !options_.notify_observers) gather_released_leaves(function.inputs());
    function.graph_retained_ = options_.retain_graph;
    std::vector<Tensor> grad_inputs;
    {
      const CallSiteScope site(function.site_);
      const timeline::SpanScope span("backward", timeline::enabled() ? function.name() : std::string());
      grad_inputs = function.backward(grad_outputs);
    }
    if (!options_.retain_graph) function.release_saved();

    if (check_finite_enabled()) check_gradients_finite(function, grad_outputs, grad_inputs);
    if (TensorObserver* observer = tensor_observer()) observer->backward_done(function, grad_inputs);

    const auto& inputs = function.inputs();
    TANDEM_CHECK(grad_inputs.size() == inputs.size(), "backward: ", function.name(), " returned ", grad_inputs.size(),
                 " gradients for ", inputs.size(), " inputs");
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const std::shared_ptr<VariableNode>& input = inputs[i];
      if (!input->requires_grad) continue;
      if (input->creator) schedule(input->creator);
      const Tensor& g = grad_inputs[i];
      if (!g.defined()) continue;
      TANDEM_CHECK(g.shape() == input->shape && g.dtype() == input->dtype, "backward: ", function.name(),
                   " returned a gradient ", g.description(), " for input ", i, " of ", dtype_name(input->dtype),
                   shape_str(input->shape));
      accumulate(input, g);
    }
  }

  // With check_finite on: the first NaN/Inf among the gradients a backward returned.
  static void check_gradients_finite(const FunctionNode& function, const std::vector<Tensor>& grad_outputs,
                                     const std::vector<Tensor>& grad_inputs) {
    for (std::size_t i = 0; i < grad_inputs.size(); ++i) {
      const std::string bad = first_nonfinite(grad_inputs[i]);
      if (bad.empty()) continue;
      std::string cause = "; the gradients it received are finite";
      for (std::size_t j = 0; j < grad_outputs.size(); ++j) {
        const std::string bad_output = first_nonfinite(grad_outputs[j]);
        if (!bad_output.empty()) {
          cause = detail::concat("; the gradient of its output ", j, " already holds ", bad_output);
          break;
        }
      }
      TANDEM_FAIL("check_finite: the backward of ", function.name(), " produced ", bad, " in the gradient of input ", i,
                  check_finite_where(), cause);
    }
  }

  // For the observers: how many of the functions this backward will run take each leaf that
  // requires a gradient (the same walk as schedule(), ahead of time), so that the leaf's
  // gradient is known final when the last of them has run.
  void count_leaf_uses(const Variables& outputs) {
    std::vector<FunctionNode*> stack;
    std::unordered_set<const FunctionNode*> seen;
    for (const Variable& output : outputs)
      if (const auto& creator = output.node()->creator; creator && seen.insert(creator.get()).second)
        stack.push_back(creator.get());
    while (!stack.empty()) {
      FunctionNode* function = stack.back();
      stack.pop_back();
      for (const std::shared_ptr<VariableNode>& input : function->inputs()) {
        if (!input->requires_grad) continue;
        if (!input->creator) {
          ++leaf_uses_[input.get()];
        } else if (seen.insert(input->creator.get()).second) {
          stack.push_back(input->creator.get());
        }
      }
      for (const std::shared_ptr<VariableNode>& leaf : function->hidden_leaves())
        if (leaf->requires_grad && !leaf->creator) ++leaf_uses_[leaf.get()];
    }
  }

  // After `function` ran: its leaves whose last user it was get their gradient now, and the
  // observers hear of it.
  void release_final_leaves(const FunctionNode& function) {
    for (const std::shared_ptr<VariableNode>& input : function.inputs()) release_if_final(input);
    for (const std::shared_ptr<VariableNode>& leaf : function.hidden_leaves()) release_if_final(leaf);
  }
  void release_if_final(const std::shared_ptr<VariableNode>& input) {
    if (!input->requires_grad || input->creator) return;
    auto uses = leaf_uses_.find(input.get());
    if (uses == leaf_uses_.end() || --uses->second > 0) return;
    leaf_uses_.erase(uses);
    auto it = gradients_.find(input.get());
    if (it != gradients_.end()) {
      deliver(it->second);
      gradients_.erase(it);
    }
    for (BackwardObserver* observer : observers_) observer->leaf_final(*input);
  }

  // Whatever remains belongs to leaves (or to variables whose creator had nothing to do).
  void deliver_leaf_gradients() {
    for (auto& entry : gradients_) {
      Gradient& g = entry.second;
      if (g.node->creator) continue;
      deliver(g);
      for (BackwardObserver* observer : observers_) observer->leaf_final(*g.node);
    }
  }

  // A leaf's gradient to its variable: added to what is there, or handed over.
  static void deliver(Gradient& g) {
    std::shared_ptr<VariableImpl> variable = g.node->variable.lock();
    if (!variable) return;
    if (deterministic()) return deliver_order_free(*variable, g.value);
    if (variable->grad.defined()) {
      // A 16-bit leaf whose gradient is held in f32 (Variable::set_grad) accumulates in f32.
      if (variable->grad.dtype() != g.value.dtype() && is_half(g.value.dtype()))
        g.value = g.value.to(variable->grad.dtype());
      // Accumulate in place when nothing else holds the gradient's memory (a user's copy of
      // grad() keeps its value): microbatches and pipeline steps accumulate into every
      // weight's gradient many times a step, and a new tensor each time cost a fresh
      // allocation and a third pass over memory.
      if (variable->grad.storage().use_count() == 1 && variable->grad.shape() == g.value.shape() &&
          variable->grad.dtype() == g.value.dtype() && variable->grad.device() == g.value.device()) {
        add_(variable->grad, g.value);
      } else {
        variable->grad = add(variable->grad, g.value);
      }
    } else {
      // The user (an optimizer) may update a gradient in place; never hand out a tensor that
      // something else still shares.
      variable->grad = g.value.storage().use_count() > 1 ? g.value.clone() : g.value;
    }
  }

  BackwardOptions options_;
  std::priority_queue<std::shared_ptr<FunctionNode>, std::vector<std::shared_ptr<FunctionNode>>, LaterFirst> queue_;
  std::unordered_set<const FunctionNode*> scheduled_;
  std::unordered_map<const VariableNode*, Gradient> gradients_;
  // With observers only: the observers, and the functions still to run per leaf.
  std::vector<BackwardObserver*> observers_;
  std::unordered_map<const VariableNode*, int> leaf_uses_;
};

void backward(const Variables& outputs, const std::vector<Tensor>& seeds, const BackwardOptions& options) {
  BackwardEngine(options).run(outputs, seeds);
}

}  // namespace tandem
