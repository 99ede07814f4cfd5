#include "autograd/weight_gradient_queue.h"

#include "autograd/backward_observer.h"
#include "autograd/check_finite.h"
#include "autograd/order_free_gradients.h"
#include "core/deterministic.h"
#include "core/error.h"
#include "core/ops.h"

namespace tandem {

namespace {
thread_local WeightGradientQueue* current_queue = nullptr;
}

WeightGradientQueue::Scope::Scope(WeightGradientQueue& queue) : previous_(current_queue) { current_queue = &queue; }
WeightGradientQueue::Scope::~Scope() { current_queue = previous_; }

WeightGradientQueue* WeightGradientQueue::active() {
  if (current_queue == nullptr || check_finite_enabled() || !backward_observers().empty()) return nullptr;
  return current_queue;
}

void WeightGradientQueue::push(const std::shared_ptr<VariableNode>& weight, Tensor grad_output, Tensor input) {
  TANDEM_CHECK(
      weight != nullptr && grad_output.dim() == 2 && input.dim() == 2 && grad_output.size(0) == input.size(0) &&
          grad_output.dtype() == input.dtype(),
      "WeightGradientQueue: expected a weight, grad_output [rows, out] and input [rows, in] of one dtype; got ",
      grad_output.description(), " and ", input.description());
  auto [it, added] = index_.emplace(weight.get(), entries_.size());
  if (added) entries_.push_back(Entry{weight, {}, {}});
  Entry& entry = entries_[it->second];
  entry.grad_outputs.push_back(std::move(grad_output));
  entry.inputs.push_back(std::move(input));
}

// Deterministic mode: each queued microbatch's product is a term of the weight's order-free sum,
// as it would have been without the queue.
std::int64_t WeightGradientQueue::flush_order_free(Entry& entry) {
  std::int64_t rows = 0;
  std::shared_ptr<VariableImpl> variable = entry.weight->variable.lock();
  for (std::size_t i = 0; i < entry.grad_outputs.size(); ++i) {
    rows += entry.grad_outputs[i].size(0);
    if (variable)
      deliver_order_free(*variable,
                         matmul(entry.grad_outputs[i], entry.inputs[i], true, false).reshape(entry.weight->shape));
  }
  entry.grad_outputs.clear();
  entry.inputs.clear();
  return rows;
}

std::int64_t WeightGradientQueue::flush() {
  std::int64_t rows = 0;
  for (Entry& entry : entries_) {
    if (deterministic()) {
      rows += flush_order_free(entry);
      continue;
    }
    // One product over every queued row: concatenating costs one pass over the activations,
    // far less than a pass over the weight's gradient per microbatch.
    const Tensor dy = entry.grad_outputs.size() == 1 ? entry.grad_outputs[0] : concat(entry.grad_outputs, 0);
    const Tensor x = entry.inputs.size() == 1 ? entry.inputs[0] : concat(entry.inputs, 0);
    rows += dy.size(0);
    entry.grad_outputs.clear();
    entry.inputs.clear();
    std::shared_ptr<VariableImpl> variable = entry.weight->variable.lock();
    if (!variable) continue;  // the weight is gone: nobody can read its gradient
    Tensor& grad = variable->grad;
    const Shape& shape = entry.weight->shape;
    if (grad.defined() && grad.storage().use_count() == 1 && grad.shape() == shape && grad.dtype() == dy.dtype() &&
        grad.device() == dy.device()) {
      matmul_accumulate_(grad, dy, x, true, false);
    } else {
      Tensor dw = matmul(dy, x, true, false).reshape(shape);
      grad = grad.defined() ? add(grad, dw) : dw;
    }
  }
  entries_.clear();
  index_.clear();
  return rows;
}

void WeightGradientQueue::absorb(WeightGradientQueue&& other) {
  for (Entry& entry : other.entries_)
    for (std::size_t i = 0; i < entry.inputs.size(); ++i)
      push(entry.weight, std::move(entry.grad_outputs[i]), std::move(entry.inputs[i]));
  other.clear();
}

void WeightGradientQueue::clear() {
  entries_.clear();
  index_.clear();
}

std::int64_t WeightGradientQueue::queued_bytes() const {
  std::int64_t bytes = 0;
  for (const Entry& entry : entries_) {
    for (const Tensor& t : entry.grad_outputs) bytes += static_cast<std::int64_t>(t.nbytes());
    for (const Tensor& t : entry.inputs) bytes += static_cast<std::int64_t>(t.nbytes());
  }
  return bytes;
}

}  // namespace tandem
