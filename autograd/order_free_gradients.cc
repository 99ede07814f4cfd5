#include "autograd/order_free_gradients.h"

#include "core/error.h"
#include "core/ops.h"

namespace tandem {

namespace {

void check_supported(const Tensor& t, const char* what) {
  TANDEM_CHECK(t.device().is_cpu() && (t.dtype() == DType::f32 || t.dtype() == DType::f64),
               "deterministic mode (TANDEM_DETERMINISTIC=1): ", what, " ", t.description(),
               " is not supported; its order-free sums take f32 and f64 gradients on the CPU");
}

void add_term(OrderFreeSum& sum, const Tensor& t) {
  if (t.dtype() == DType::f32) sum.add(t.data<float>());  // tensors are contiguous
  else sum.add(t.data<double>());
}

Tensor rounded(const OrderFreeSum& sum, const Tensor& like, double scale) {
  Tensor out = empty(like.shape(), like.dtype(), like.device());
  if (out.dtype() == DType::f32) sum.round_to(out.data<float>(), scale);
  else sum.round_to(out.data<double>(), scale);
  return out;
}

// The variable's sum, current with its grad: started again where the grad is gone or was set
// by someone else.
OrderFreeSum& current_sum(VariableImpl& v) {
  const std::int64_t n = v.data.numel();
  if (!v.grad_sum || v.grad_sum->size() != n) v.grad_sum = std::make_shared<OrderFreeSum>(n);
  const bool ours = v.grad.defined() && v.grad_sum_storage.lock() == v.grad.storage();
  if (!ours) {
    v.grad_sum->clear();
    if (v.grad.defined()) {
      check_supported(v.grad, "the gradient");
      add_term(*v.grad_sum, v.grad);
      v.grad_sum_storage = v.grad.storage();  // the sum is now this grad's
    }
  }
  return *v.grad_sum;
}

}  // namespace

void deliver_order_free(VariableImpl& v, const Tensor& gradient) {
  check_supported(gradient, "a gradient");
  OrderFreeSum& sum = current_sum(v);
  add_term(sum, gradient);
  v.grad = rounded(sum, gradient, 1.0);
  v.grad_sum_storage = v.grad.storage();
}

OrderFreeSum& order_free_gradient(Variable& param) {
  VariableImpl& v = param.impl();
  TANDEM_CHECK(v.grad.defined(), "order_free_gradient: ", param.description(), " has no gradient");
  return current_sum(v);
}

void round_order_free_gradient(Variable& param, double scale) {
  VariableImpl& v = param.impl();
  OrderFreeSum& sum = current_sum(v);
  v.grad = rounded(sum, v.grad.defined() ? v.grad : v.data, scale);
  v.grad_sum_storage.reset();
  sum.clear();
}

}  // namespace tandem
