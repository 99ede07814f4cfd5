#include "autograd/function_node.h"

#include <atomic>

#include "autograd/autocast.h"
#include "autograd/backward_observer.h"
#include "autograd/check_finite.h"
#include "autograd/grad_mode.h"
#include "autograd/tensor_observer.h"
#include "core/deterministic.h"
#include "core/timeline.h"

namespace tandem {

namespace {

std::atomic<std::int64_t> next_sequence_number{0};

// With check_finite on: the first NaN/Inf among the outputs is an error that says whether the
// function made it or was handed it (a leaf: data or a parameter).
void check_outputs_finite(const std::string& function, const std::vector<Tensor>& inputs,
                          const std::vector<Tensor>& outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const std::string bad = first_nonfinite(outputs[i]);
    if (bad.empty()) continue;
    std::string cause = "; its inputs are finite";
    for (std::size_t j = 0; j < inputs.size(); ++j) {
      const std::string bad_input = first_nonfinite(inputs[j]);
      if (!bad_input.empty()) {
        cause = detail::concat("; its input ", j, " already holds ", bad_input);
        break;
      }
    }
    TANDEM_FAIL("check_finite: ", function, " produced ", bad, " in output ", i, " in forward", check_finite_where(),
                cause);
  }
}

}  // namespace

namespace autograd_detail {

namespace {
thread_local LeafRecorder* g_leaf_recorder = nullptr;
}  // namespace

LeafRecorder::LeafRecorder() : previous_(g_leaf_recorder) { g_leaf_recorder = this; }
LeafRecorder::~LeafRecorder() {
  g_leaf_recorder = previous_;
  // An enclosing region reads what this one read.
  if (previous_)
    for (const auto& leaf : leaves_) previous_->add(leaf);
}
void LeafRecorder::add(const std::shared_ptr<VariableNode>& leaf) {
  for (const auto& known : leaves_)
    if (known == leaf) return;
  leaves_.push_back(leaf);
}
LeafRecorder* active_leaf_recorder() { return g_leaf_recorder; }

}  // namespace autograd_detail

Variables FunctionNode::apply(const Variables& given) {
  // Under an AutocastScope the inputs arrive cast to the precision of this function's policy.
  const Variables autocast = autocast_dtype() ? autograd_detail::autocast_inputs(name(), given) : Variables();
  const Variables& inputs = autocast.empty() ? given : autocast;
  std::vector<Tensor> input_data;
  input_data.reserve(inputs.size());
  bool any_requires_grad = false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    TANDEM_CHECK(inputs[i].defined(), name(), ": input ", i, " is an undefined variable");
    // A parameter sharded over ranks (ZeRO-3) is gathered just before a function reads it.
    if (inputs[i].data().defined() && inputs[i].data().storage()->released() && inputs[i].is_leaf())
      gather_released_leaves({inputs[i].node()});
    input_data.push_back(inputs[i].data());
    any_requires_grad = any_requires_grad || inputs[i].requires_grad();
    // A leaf that requires a gradient is a parameter (or an input the user differentiates by):
    // its products may run on a packed copy while it stays unchanged (core/storage.h).
    if (inputs[i].requires_grad() && inputs[i].is_leaf() && input_data.back().defined())
      input_data.back().storage()->mark_weight();
    if (inputs[i].requires_grad() && inputs[i].is_leaf())
      if (autograd_detail::LeafRecorder* recorder = autograd_detail::active_leaf_recorder())
        recorder->add(inputs[i].node());
  }
  recording_ = grad_enabled() && (any_requires_grad || always_record());
  // The sequence number is taken before forward runs, so a function that communicates in its
  // forward is ordered on the tape exactly where its messages were sent.
  sequence_number_ = next_sequence_number.fetch_add(1);
  site_ = CallSiteScope::user_site(CallSite{});
  if (recording_) {
    needs_input_grad_.resize(inputs.size());
    inputs_.reserve(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      needs_input_grad_[i] = inputs[i].requires_grad();
      inputs_.push_back(inputs[i].node());
    }
  }

  std::vector<Tensor> output_data;
  {
    const timeline::SpanScope span("forward", timeline::enabled() ? name() : std::string());
    output_data = forward(input_data);
  }
  if (check_finite_enabled()) check_outputs_finite(name(), input_data, output_data);
  if (TensorObserver* observer = tensor_observer()) observer->forward_done(*this, inputs, output_data);

  Variables outputs;
  outputs.reserve(output_data.size());
  if (recording_) {
    outputs_.reserve(outputs_.size() + output_data.size());
    output_meta_.reserve(output_meta_.size() + output_data.size());
  }
  for (std::size_t i = 0; i < output_data.size(); ++i) {
    TANDEM_CHECK(output_data[i].defined(), name(), ": forward returned an undefined output ", i);
    const bool differentiable = recording_ && is_floating(output_data[i].dtype());
    Variable output(std::move(output_data[i]), differentiable);
    if (recording_) {
      output.node()->creator = shared_from_this();
      outputs_.push_back(output.node());
      output_meta_.push_back(OutputMeta{output.shape(), output.dtype(), output.device()});
    }
    outputs.push_back(std::move(output));
  }
  if (!recording_) saved_.clear();  // nothing will ever read them
  return outputs;
}

std::vector<std::shared_ptr<VariableNode>> FunctionNode::outputs() const {
  std::vector<std::shared_ptr<VariableNode>> alive;
  alive.reserve(outputs_.size());
  for (const auto& output : outputs_) alive.push_back(output.lock());
  return alive;
}

void FunctionNode::release_saved() {
  saved_.clear();
  saved_.shrink_to_fit();
  released_ = true;
}

void FunctionNode::save_for_backward(std::vector<Tensor> tensors) {
  // Nothing is kept when no graph is recorded (inference, no_grad).
  if (recording_) saved_ = std::move(tensors);
}

void FunctionNode::check_not_released() const {
  TANDEM_CHECK(!released_, "backward: the graph through ", name(), " (node #", sequence_number_,
               ") was already freed by an earlier backward(); set BackwardOptions::retain_graph in "
               "the first backward to run backward through it again");
}

const std::vector<Tensor>& FunctionNode::saved() const {
  check_not_released();
  return saved_;
}

Tensor* FunctionNode::leaf_gradient_to_accumulate(std::size_t i) const {
  // Deterministic mode: every gradient goes through the engine to the leaf's order-free sum.
  if (i >= inputs_.size() || check_finite_enabled() || deterministic()) return nullptr;
  const std::shared_ptr<VariableNode>& node = inputs_[i];
  if (node->creator || !node->requires_grad) return nullptr;
  const std::shared_ptr<VariableImpl> variable = node->variable.lock();
  if (!variable) return nullptr;
  Tensor& grad = variable->grad;
  if (!grad.defined() || grad.storage().use_count() != 1 || grad.shape() != node->shape ||
      grad.dtype() != node->dtype || grad.device() != node->device)
    return nullptr;
  return &grad;
}

}  // namespace tandem
