#include "core/ops/optimizer_update.h"

#include "core/ops/checks.h"

namespace tandem {

namespace {

bool share_memory(const Tensor& a, const Tensor& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0 || !a.shares_storage_with(b)) return false;
  const char* a0 = static_cast<const char*>(a.raw_data());
  const char* b0 = static_cast<const char*>(b.raw_data());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// The fused kernels read and write every tensor element by element, and the CPU's are
// vectorised on the promise that no two of them overlap: a gradient or a state that is a view
// of the parameter would give an answer that depends on the vector width.
void check_state(const Tensor& param, std::initializer_list<const Tensor*> others, const char* op) {
  ops_detail::check_floating(param, op);
  ops_detail::check_compatible(others, op);
  for (const Tensor* t : others)
    TANDEM_CHECK(t->shape() == param.shape() && t->dtype() == param.dtype() && t->device() == param.device(), op,
                 ": parameter ", param.description(), " and state/gradient ", t->description(), " differ");
  const Tensor* const* list = others.begin();
  for (std::size_t i = 0; i < others.size(); ++i)
    for (std::size_t j = i + 1; j < others.size(); ++j)
      TANDEM_CHECK(!share_memory(*list[i], *list[j]), op, ": the parameter, its gradient and its state must be "
                   "separate tensors, but operands ", i, " and ", j, " (", list[i]->description(), ", ",
                   list[j]->description(), ") share memory");
}

}  // namespace

void sgd_update_(Tensor& param, const Tensor& grad, double lr) {
  check_state(param, {&param, &grad}, "sgd_update_");
  backend_for(param.device(), "sgd_update_").sgd_update(param, grad, lr);
}

void momentum_sgd_update_(Tensor& param, const Tensor& grad, Tensor& velocity, double lr, double momentum) {
  check_state(param, {&param, &grad, &velocity}, "momentum_sgd_update_");
  backend_for(param.device(), "momentum_sgd_update_").momentum_sgd_update(param, grad, velocity, lr, momentum);
}

void adam_update_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor& vhat, const AdamStep& step) {
  if (step.amsgrad) check_state(param, {&param, &grad, &m, &v, &vhat}, "adam_update_");
  else check_state(param, {&param, &grad, &m, &v}, "adam_update_");
  backend_for(param.device(), "adam_update_").adam_update(param, grad, m, v, vhat, step);
}

double sum_of_squares(const Tensor& x) {
  if (x.defined() && is_half(x.dtype())) return sum_of_squares(x.to(DType::f32));  // accumulated in f32
  ops_detail::check_floating(x, "sum_of_squares");
  return backend_for(x.device(), "sum_of_squares").sum_of_squares(x);
}

}  // namespace tandem
