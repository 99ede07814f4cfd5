#include "comm/functions/pseudo_connect.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "autograd/function_node.h"
#include "comm/functions/point_to_point.h"
#include "core/error.h"

namespace tandem::functions {

namespace {

class PseudoConnect final : public FunctionNode {
 public:
  std::string name() const override { return "pseudo_connect"; }
  bool always_run_backward() const override { return true; }

  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override {
    delegate_shape_ = inputs[0].shape();
    delegate_dtype_ = inputs[0].dtype();
    delegate_device_ = inputs[0].device();
    return std::vector<Tensor>(inputs.begin() + 1, inputs.end());
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    std::vector<Tensor> grads{zeros(delegate_shape_, delegate_dtype_, delegate_device_)};
    grads.insert(grads.end(), grad_outputs.begin(), grad_outputs.end());
    return grads;
  }

 private:
  Shape delegate_shape_;
  DType delegate_dtype_ = DType::f32;
  Device delegate_device_;
};

std::atomic<bool>& send_order_check() {
  static std::atomic<bool> on{[] {
    const char* value = std::getenv("TANDEM_CHECK_SEND_ORDER");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }()};
  return on;
}

// The sends behind a delegate: its creator when that is a send, or the sends behind every input
// of a pseudo_connect whose inputs are all delegates. Anything else (a variable with data, a
// pseudo_connect onto one) has none: only delegates joined to delegates are compared, so that
// a delegate attached to a received or computed value is never mistaken for a swap.
std::vector<comm_detail::SendRecord> sends_behind(const Variable& v) {
  std::vector<comm_detail::SendRecord> sends;
  if (!v.defined()) return sends;
  std::vector<const FunctionNode*> stack{v.creator().get()};  // iterative: joins can be long chains
  while (!stack.empty()) {
    const FunctionNode* node = stack.back();
    stack.pop_back();
    if (node == nullptr) return {};
    if (std::optional<comm_detail::SendRecord> send = comm_detail::send_record(*node)) {
      sends.push_back(std::move(*send));
    } else if (dynamic_cast<const PseudoConnect*>(node) != nullptr) {
      for (const auto& input : node->inputs()) stack.push_back(input->creator.get());
    } else {
      return {};
    }
  }
  return sends;
}

void check_send_order(const Variable& delegate, const Variables& actual) {
  const std::vector<comm_detail::SendRecord> first = sends_behind(delegate);
  if (first.empty()) return;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    for (const comm_detail::SendRecord& later : first) {
      for (const comm_detail::SendRecord& earlier : sends_behind(actual[i])) {
        if (later.comm != earlier.comm || later.peer != earlier.peer || later.tag != earlier.tag ||
            later.sequence <= earlier.sequence)
          continue;
        TANDEM_FAIL("pseudo_connect on rank ", later.comm->rank(), ": the ", later.what,
                    " behind its first argument ran after the ", earlier.what, " behind its ",
                    actual.size() > 1 ? detail::concat("actual variable ", i) : std::string("second argument"),
                    ", so rank ", later.peer, " receives them in the opposite order to the one written. C++ "
                    "evaluates a call's arguments in an unspecified order (GCC: the last first): send them with "
                    "F::send_each({...}) or in separate statements, and join the delegates in the order they were "
                    "sent (TANDEM_CHECK_SEND_ORDER / set_check_send_order)");
      }
    }
  }
}

}  // namespace

bool check_send_order_enabled() { return send_order_check().load(std::memory_order_relaxed); }
void set_check_send_order(bool on) { send_order_check().store(on, std::memory_order_relaxed); }

Variables pseudo_connect(const Variable& delegate, const Variables& actual) {
  TANDEM_CHECK(delegate.defined(), "pseudo_connect: the delegate variable is undefined");
  TANDEM_CHECK(!actual.empty(), "pseudo_connect: no actual variables to connect the delegate to");
  if (check_send_order_enabled()) check_send_order(delegate, actual);
  Variables inputs{delegate};
  inputs.insert(inputs.end(), actual.begin(), actual.end());
  return call<PseudoConnect>(inputs);
}

Variable pseudo_connect(const Variable& delegate, const Variable& actual) {
  return pseudo_connect(delegate, Variables{actual})[0];
}

}  // namespace tandem::functions
