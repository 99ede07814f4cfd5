// Fused optimizer updates: each reads and writes every element of its state once, instead of
// the five or six temporaries the same formulas cost as separate tensor operations.
#include <cmath>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/parallel.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tandem {

void CpuBackend::sgd_update(Tensor& param, const Tensor& grad, double lr) {
  TANDEM_DISPATCH_FLOAT(param.dtype(), "sgd_update", [&] {
    scalar_t* p = param.data<scalar_t>();
    const scalar_t* g = grad.data<scalar_t>();
    const auto rate = static_cast<scalar_t>(lr);
    cpu::parallel_for(param.numel(), 1, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) p[i] -= rate * g[i];
    });
  });
}

void CpuBackend::momentum_sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, double lr,
                                     double momentum) {
  TANDEM_DISPATCH_FLOAT(param.dtype(), "momentum_sgd_update", [&] {
    scalar_t* p = param.data<scalar_t>();
    scalar_t* v = velocity.data<scalar_t>();
    const scalar_t* g = grad.data<scalar_t>();
    const auto rate = static_cast<scalar_t>(lr), mu = static_cast<scalar_t>(momentum);
    cpu::parallel_for(param.numel(), 2, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        v[i] = mu * v[i] - rate * g[i];
        p[i] += v[i];
      }
    });
  });
}

namespace {

// One Adam step over [0, n). The pointers never alias (a parameter, its gradient and its state
// are separate tensors, which adam_update_ checks), and saying so lets GCC vectorise the loop: with
// the sqrt and the division it was scalar and cost as much as the MLP's whole backward pass.
// AMSGrad is a template parameter so that neither loop tests it per element.
template <bool kAmsgrad, typename T>
void adam_elements(T* __restrict p, T* __restrict m, T* __restrict v, T* __restrict vhat, const T* __restrict g,
                   std::int64_t n, T one_minus_beta1, T one_minus_beta2, T alpha_t, T eps, T eta, T decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T mi = m[i] + one_minus_beta1 * (g[i] - m[i]);
    const T vi = v[i] + one_minus_beta2 * (g[i] * g[i] - v[i]);
    m[i] = mi;
    v[i] = vi;
    T denominator = vi;
    if constexpr (kAmsgrad) {  // the running maximum of v
      denominator = vhat[i] > vi ? vhat[i] : vi;
      vhat[i] = denominator;
    }
    p[i] -= eta * (alpha_t * mi / (std::sqrt(denominator) + eps) + decay * p[i]);
  }
}

}  // namespace

void CpuBackend::adam_update(Tensor& param, const Tensor& grad, Tensor& m_state, Tensor& v_state, Tensor& vhat_state,
                             const AdamStep& step) {
  TANDEM_DISPATCH_FLOAT(param.dtype(), "adam_update", [&] {
    scalar_t* p = param.data<scalar_t>();
    scalar_t* m = m_state.data<scalar_t>();
    scalar_t* v = v_state.data<scalar_t>();
    scalar_t* vhat = step.amsgrad ? vhat_state.data<scalar_t>() : nullptr;
    const scalar_t* g = grad.data<scalar_t>();
    const auto one_minus_beta1 = static_cast<scalar_t>(1 - step.beta1);
    const auto one_minus_beta2 = static_cast<scalar_t>(1 - step.beta2);
    const auto alpha_t = static_cast<scalar_t>(step.alpha_t), eps = static_cast<scalar_t>(step.eps);
    const auto eta = static_cast<scalar_t>(step.eta), decay = static_cast<scalar_t>(step.weight_decay_rate);
    cpu::parallel_for(param.numel(), 8, cpu::kElementwiseGrain, [&](std::int64_t b, std::int64_t e) {
      auto* const run = vhat ? adam_elements<true, scalar_t> : adam_elements<false, scalar_t>;
      run(p + b, m + b, v + b, vhat ? vhat + b : nullptr, g + b, e - b, one_minus_beta1, one_minus_beta2, alpha_t,
          eps, eta, decay);
    });
  });
}

double CpuBackend::sum_of_squares(const Tensor& x) {
  double total = 0;
  TANDEM_DISPATCH_FLOAT(x.dtype(), "sum_of_squares", [&] {
    const scalar_t* values = x.data<scalar_t>();
    for (std::int64_t i = 0; i < x.numel(); ++i) total += static_cast<double>(values[i]) * values[i];
  });
  return total;
}

}  // namespace tandem
