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

// The variable's sum, current with its grad. A grad that is not the rounding of the sum (the
// first term, kept as it came, or one set by someone else) is the sum of one term: the sum
// starts from it here, when a second term or a data-parallel sync needs it.
OrderFreeSum& current_sum(VariableImpl& v) {
  const std::int64_t n = v.data.numel();
  if (!v.grad_sum || v.grad_sum->size() != n) v.grad_sum = std::make_shared<OrderFreeSum>(n);
  const bool ours = v.grad.defined() && v.grad_sum_storage.lock() == v.grad.storage();
  if (!ours) {
    if (v.grad.defined()) {
      check_supported(v.grad, "the gradient");
      if (v.grad.dtype() == DType::f32) v.grad_sum->assign(v.grad.data<float>());
      else v.grad_sum->assign(v.grad.data<double>());
      v.grad_sum_storage = v.grad.storage();  // the sum is now this grad's
    } else {
      v.grad_sum->clear();
    }
  }
  return *v.grad_sum;
}

}  // namespace

void deliver_order_free(VariableImpl& v, const Tensor& gradient) {
  check_supported(gradient, "a gradient");
  if (!v.grad.defined() && gradient.dtype() == DType::f32) {
    // The first term: the sum of one float is the float itself (it has no bits below the sum's
    // lowest level), zero's sign aside: -0 + 0 makes it +0, as the sum has it. The grad is that,
    // and is sliced only when more terms come (or a data-parallel sync needs the sum).
    v.grad = gradient.storage().use_count() > 1 ? gradient.clone() : gradient;
    float* g = v.grad.data<float>();
    for (std::int64_t i = 0, n = v.grad.numel(); i < n; ++i) g[i] += 0.0f;
    v.grad_sum_storage.reset();
    return;
  }
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
