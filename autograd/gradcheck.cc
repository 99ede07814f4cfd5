#include "autograd/gradcheck.h"

#include "core/backend.h"

#include <cmath>
#include <sstream>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/ops.h"
#include "core/random.h"

namespace tandem {

namespace {

// sum_k <weights_k, outputs_k> in f64 on the host.
double weighted_sum(const Variables& outputs, const std::vector<Tensor>& weights) {
  double total = 0;
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    if (!weights[k].defined()) continue;
    const std::vector<double> y = outputs[k].data().to_vector<double>();
    const std::vector<double> w = weights[k].to_vector<double>();
    for (std::size_t i = 0; i < y.size(); ++i) total += y[i] * w[i];
  }
  return total;
}

// Runs fn on fresh leaves and backpropagates the weights; returns each input's gradient.
std::vector<Tensor> analytic_gradients(const GradcheckFunction& fn, const std::vector<Tensor>& inputs,
                                       const std::vector<bool>& differentiable, const std::vector<Tensor>& weights) {
  Variables leaves;
  for (std::size_t i = 0; i < inputs.size(); ++i) leaves.emplace_back(inputs[i], static_cast<bool>(differentiable[i]));
  const Variables outputs = fn(leaves);
  Variables roots;
  std::vector<Tensor> seeds;
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    if (!weights[k].defined() || !outputs[k].requires_grad()) continue;
    roots.push_back(outputs[k]);
    seeds.push_back(weights[k]);
  }
  if (!roots.empty()) backward(roots, seeds);
  std::vector<Tensor> grads;
  for (const Variable& leaf : leaves) grads.push_back(leaf.grad());
  return grads;
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFunction& fn, const std::vector<Tensor>& raw_inputs,
                          const GradcheckOptions& options) {
  GradcheckResult result;
  std::ostringstream report;
  std::vector<Tensor> inputs;
  std::vector<bool> differentiable;
  for (std::size_t i = 0; i < raw_inputs.size(); ++i) {
    const bool floating = is_floating(raw_inputs[i].dtype());
    inputs.push_back(floating ? raw_inputs[i].to(DType::f64).clone() : raw_inputs[i]);
    differentiable.push_back(floating && !(i < options.no_grad.size() && options.no_grad[i]));
  }

  // Fixed random weights for every floating output.
  Variables probe;
  {
    NoGradGuard no_grad;
    Variables leaves;
    for (const Tensor& input : inputs) leaves.emplace_back(input);
    probe = fn(leaves);
  }
  Generator generator(options.seed);
  std::vector<Tensor> weights;
  for (const Variable& y : probe) {
    weights.push_back(is_floating(y.dtype()) && y.numel() > 0
                          ? rand_uniform(y.shape(), generator, -1, 1, DType::f64, y.device())
                          : Tensor());
  }

  const std::vector<Tensor> analytic = analytic_gradients(fn, inputs, differentiable, weights);

  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!differentiable[i]) continue;
    Tensor& x = inputs[i];
    const std::int64_t n = x.numel();
    std::vector<double> numeric(n);
    const std::vector<double> originals = x.to_vector<double>();
    // Element j of x becomes `value`: in place on the host, one small upload on a device.
    const auto set = [&x](std::int64_t j, double value) {
      if (x.device().is_cpu()) {
        x.data<double>()[j] = value;
      } else {
        backend_for(x.device(), "gradcheck")
            .copy_from_host(static_cast<double*>(x.raw_data()) + j, &value, sizeof(double), x.device().index());
      }
    };
    for (std::int64_t j = 0; j < n; ++j) {
      NoGradGuard no_grad;
      const double original = originals[j];
      Variables leaves;
      for (const Tensor& input : inputs) leaves.emplace_back(input);
      set(j, original + options.eps);
      const double plus = weighted_sum(fn(leaves), weights);
      set(j, original - options.eps);
      const double minus = weighted_sum(fn(leaves), weights);
      set(j, original);
      numeric[j] = (plus - minus) / (2 * options.eps);
    }
    if (!analytic[i].defined()) {
      bool all_zero = true;
      for (double v : numeric) all_zero = all_zero && std::abs(v) <= options.atol;
      if (!all_zero) {
        result.ok = false;
        report << "input " << i << ": no gradient was computed but the numerical gradient is not zero\n";
      }
      continue;
    }
    if (analytic[i].shape() != x.shape()) {
      result.ok = false;
      report << "input " << i << ": gradient " << analytic[i].description() << " for input " << x.description() << "\n";
      continue;
    }
    const std::vector<double> got = analytic[i].to_vector<double>();
    int shown = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      const double error = std::abs(got[j] - numeric[j]);
      result.max_abs_error = std::max(result.max_abs_error, error);
      if (error > options.atol + options.rtol * std::abs(numeric[j])) {
        result.ok = false;
        if (shown++ < 8)
          report << "input " << i << " element " << j << ": analytic " << got[j] << " numeric " << numeric[j] << "\n";
      }
    }
  }

  // Each input in turn as a constant: it must get no gradient, and the others the same ones.
  for (std::size_t skip = 0; skip < inputs.size() && inputs.size() > 1; ++skip) {
    if (!differentiable[skip]) continue;
    std::vector<bool> partial = differentiable;
    partial[skip] = false;
    bool any = false;
    for (bool d : partial) any = any || d;
    if (!any) continue;
    const std::vector<Tensor> grads = analytic_gradients(fn, inputs, partial, weights);
    if (grads[skip].defined()) {
      result.ok = false;
      report << "with input " << skip << " not requiring grad, it still received a gradient\n";
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (!partial[i] || !analytic[i].defined()) continue;
      const std::vector<double> a = analytic[i].to_vector<double>();
      const std::vector<double> b = grads[i].defined() ? grads[i].to_vector<double>() : std::vector<double>(a.size(), 0);
      for (std::size_t j = 0; j < a.size(); ++j) {
        if (std::abs(a[j] - b[j]) > 1e-12 + 1e-9 * std::abs(a[j])) {
          result.ok = false;
          report << "with input " << skip << " not requiring grad, input " << i << " element " << j << " got "
                 << b[j] << " instead of " << a[j] << "\n";
          break;
        }
      }
    }
  }
  result.report = report.str();
  return result;
}

}  // namespace tandem
