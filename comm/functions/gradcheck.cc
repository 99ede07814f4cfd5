#include "comm/functions/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/random.h"

namespace tandem {

namespace {

// sum over floating, non-empty outputs of <w, y>, in f64.
double objective(const Variables& ys, const std::vector<Tensor>& weights) {
  double total = 0;
  for (std::size_t i = 0; i < ys.size(); ++i) {
    if (!weights[i].defined()) continue;
    const Tensor y = ys[i].data().to(DType::f64);
    const double* a = y.data<double>();
    const double* w = weights[i].data<double>();
    for (std::int64_t k = 0; k < y.numel(); ++k) total += a[k] * w[k];
  }
  return total;
}

Variables as_variables(const std::vector<Tensor>& xs, bool requires_grad) {
  Variables vs;
  for (const Tensor& x : xs) vs.emplace_back(x, requires_grad && is_floating(x.dtype()));
  return vs;
}

}  // namespace

GradcheckResult distributed_gradcheck(Communicator& comm, const GradcheckFunction& fn,
                                      const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  // f64 copies: the perturbations below write into them.
  std::vector<Tensor> xs;
  for (const Tensor& x : inputs) xs.push_back(is_floating(x.dtype()) ? x.to(DType::f64).clone() : x);

  // Analytic gradients: one backward with the weights as seeds.
  Variables vars = as_variables(xs, true);
  Variables ys = fn(vars);
  Generator generator(options.seed + 7919 * static_cast<std::uint64_t>(comm.rank()) + 1);
  std::vector<Tensor> weights(ys.size()), seeds(ys.size());
  for (std::size_t i = 0; i < ys.size(); ++i) {
    if (!is_floating(ys[i].dtype()) || ys[i].numel() == 0) continue;
    weights[i] = randn(ys[i].shape(), generator, 0, 1, DType::f64);
    seeds[i] = weights[i].to(ys[i].dtype());
  }
  backward(ys, seeds);
  ys.clear();

  // How many elements each rank will perturb.
  std::int64_t mine = 0;
  for (const Tensor& x : xs)
    if (is_floating(x.dtype())) mine += x.numel();
  const std::vector<Tensor> counts = comm.allgather(full({}, static_cast<double>(mine), DType::i64));

  auto global_objective = [&]() {
    NoGradGuard no_grad;
    const double local = objective(fn(as_variables(xs, false)), weights);
    return comm.allreduce(full({}, local, DType::f64)).item();
  };

  GradcheckResult result;
  std::ostringstream report;
  for (int q = 0; q < comm.size(); ++q) {
    const std::int64_t count = static_cast<std::int64_t>(counts[q].item());
    std::size_t input = 0;
    std::int64_t offset = 0;
    for (std::int64_t k = 0; k < count; ++k) {
      double* element = nullptr;
      if (q == comm.rank()) {
        while (!is_floating(xs[input].dtype()) || offset >= xs[input].numel()) {
          ++input;
          offset = 0;
        }
        element = xs[input].data<double>() + offset;
      }
      const double saved = element ? *element : 0;
      if (element) *element = saved + options.eps;
      const double plus = global_objective();
      if (element) *element = saved - options.eps;
      const double minus = global_objective();
      if (!element) continue;
      *element = saved;
      const double numeric = (plus - minus) / (2 * options.eps);
      const Tensor& grad = vars[input].grad();
      const double analytic = grad.defined() ? grad.to(DType::f64).data<double>()[offset] : 0.0;
      const double error = std::abs(analytic - numeric);
      result.max_abs_error = std::max(result.max_abs_error, error);
      if (error > options.atol + options.rtol * std::abs(numeric)) {
        result.ok = false;
        report << "rank " << comm.rank() << " input " << input << " element " << offset << ": analytic " << analytic
               << ", numeric " << numeric << "\n";
      }
      ++offset;
    }
  }
  // One verdict for all ranks.
  const double failures = comm.allreduce(full({}, result.ok ? 0.0 : 1.0, DType::f64)).item();
  if (failures > 0) {
    result.ok = false;
    if (report.str().empty())
      report << "rank " << comm.rank() << ": no failures here; " << failures << " rank(s) failed\n";
  }
  result.report = report.str();
  return result;
}

}  // namespace tandem
