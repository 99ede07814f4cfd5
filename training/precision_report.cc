#include "training/precision_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

#include "autograd/autocast.h"
#include "autograd/function_node.h"
#include "autograd/tensor_observer.h"
#include "core/error.h"
#include "core/random.h"

namespace tandem {

namespace {

// One run's tensors, in the order the functions computed them (casts left out).
struct Recorded {
  std::string phase, what;
  Tensor value;  // f64 on the host: a copy of its own (later in-place ops do not reach it)
};

class Recorder : public TensorObserver {
 public:
  explicit Recorder(Link& model) {
    for (const auto& [name, param] : model.namedparams()) names_[param.node().get()] = name;
  }

  void forward_done(const FunctionNode& function, const std::vector<Variable>& inputs,
                    const std::vector<Tensor>& outputs) override {
    if (function.name() == "cast") return;
    std::vector<const VariableNode*> nodes;
    for (const Variable& v : inputs) nodes.push_back(v.node().get());
    const std::string params = parameters_of(nodes);
    for (std::size_t i = 0; i < outputs.size(); ++i)
      add("forward", function.name() + " output " + std::to_string(i) + params, outputs[i]);
  }

  void backward_done(const FunctionNode& function, const std::vector<Tensor>& grad_inputs) override {
    if (function.name() == "cast") return;
    const auto& inputs = function.inputs();
    for (std::size_t i = 0; i < grad_inputs.size(); ++i) {
      if (!grad_inputs[i].defined()) continue;
      const std::string params = i < inputs.size() ? parameters_of({inputs[i].get()}) : "";
      add("backward", function.name() + " grad of input " + std::to_string(i) + params, grad_inputs[i]);
    }
  }

  void add(const std::string& phase, const std::string& what, const Tensor& t) {
    if (!t.defined() || !is_floating(t.dtype())) return;
    const Tensor host = t.to(Device::cpu());
    records.push_back({phase, what, host.dtype() == DType::f64 ? host.clone() : host.to(DType::f64)});
  }

  std::vector<Recorded> records;

 private:
  // " (predictor/l1/W, ...)": the parameters among the inputs, seen through autocast's casts.
  std::string parameters_of(const std::vector<const VariableNode*>& nodes) const {
    std::string out;
    for (const VariableNode* node : nodes) {
      if (node && node->creator && node->creator->name() == "cast" && !node->creator->inputs().empty())
        node = node->creator->inputs()[0].get();
      const auto found = names_.find(node);
      if (found != names_.end()) out += (out.empty() ? "" : ", ") + found->second;
    }
    return out.empty() ? out : " (" + out + ")";
  }

  std::map<const VariableNode*, std::string> names_;
};

std::vector<Recorded> run(Link& model, const std::function<void()>& step, std::optional<DType> autocast) {
  Recorder recorder(model);
  model.cleargrads();
  {
    const std::shared_ptr<void> observing = set_tensor_observer(&recorder);
    const AutocastScope scope(autocast);
    step();
  }
  for (const auto& [name, param] : model.namedparams())
    if (param.grad().defined()) recorder.add("grad", name, param.grad());
  return std::move(recorder.records);
}

PrecisionDifference compare(const Recorded& wide, const Recorded& low, std::int64_t index, DType dtype) {
  TANDEM_CHECK(wide.phase == low.phase && wide.what == low.what && wide.value.shape() == low.value.shape(),
               "precision_report: the two runs computed different things at ", wide.phase, " step ", index, ": '",
               wide.what, "' ", shape_str(wide.value.shape()), " in f32 and '", low.what, "' ",
               shape_str(low.value.shape()), " in ", dtype_name(dtype),
               " (does the step depend on something besides the parameters and the random state?)");
  const std::vector<double> a = wide.value.to_vector<double>(), b = low.value.to_vector<double>();
  double diff2 = 0, norm2 = 0, max_abs = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = b[i] - a[i];
    diff2 += d * d;
    norm2 += a[i] * a[i];
    max_abs = std::max(max_abs, std::abs(d));
    if (!std::isfinite(d)) max_abs = std::numeric_limits<double>::infinity();
  }
  PrecisionDifference row;
  row.what = wide.what;
  row.shape = wide.value.shape();
  row.dtype = dtype;
  row.max_abs_error = max_abs;
  row.relative_error = std::isfinite(max_abs) ? (norm2 > 0 ? std::sqrt(diff2 / norm2) : std::sqrt(diff2))
                                              : std::numeric_limits<double>::infinity();
  return row;
}

}  // namespace

const PrecisionDifference* PrecisionReport::first_beyond() const {
  for (const PrecisionDifference& row : rows)
    if (!(row.relative_error <= tolerance)) return &row;
  return nullptr;
}

std::string PrecisionReport::text(std::size_t shown) const {
  std::ostringstream out;
  const PrecisionDifference* first = first_beyond();
  out << "precision report, " << dtype_name(dtype) << " against f32 (tolerance " << tolerance << " relative): ";
  if (first) {
    out << "first beyond it: " << first->phase << " #" << first->index << " " << first->what << " "
        << shape_str(first->shape) << ", relative error " << first->relative_error << "\n";
  } else {
    out << "every tensor within it\n";
  }
  std::vector<const PrecisionDifference*> worst;
  for (const PrecisionDifference& row : rows) worst.push_back(&row);
  std::stable_sort(worst.begin(), worst.end(), [](const PrecisionDifference* a, const PrecisionDifference* b) {
    return a->relative_error > b->relative_error;
  });
  worst.resize(std::min(worst.size(), shown));
  char line[64];
  out << "phase     #     relative    max abs     tensor\n";
  for (const PrecisionDifference* row : worst) {
    std::snprintf(line, sizeof line, "%-9s %-5lld %-11.3g %-11.3g ", row->phase.c_str(),
                  static_cast<long long>(row->index), row->relative_error, row->max_abs_error);
    out << line << row->what << " " << shape_str(row->shape) << "\n";
  }
  return out.str();
}

PrecisionReport precision_report(Link& model, const std::function<void()>& step, DType dtype, double tolerance) {
  TANDEM_CHECK(is_half(dtype), "precision_report: compares bf16 or f16 with f32, got ", dtype_name(dtype));
  TANDEM_CHECK(tolerance >= 0, "precision_report: tolerance must be >= 0, got ", tolerance);
  PrecisionReport report;
  report.dtype = dtype;
  report.tolerance = tolerance > 0 ? tolerance : std::ldexp(1.0, dtype == DType::bf16 ? -5 : -8);
  // Both runs draw the same random numbers (dropout).
  const Generator start = global_generator();
  const std::vector<Recorded> wide = run(model, step, std::nullopt);
  global_generator() = start;
  const std::vector<Recorded> low = run(model, step, dtype);
  TANDEM_CHECK(wide.size() == low.size(), "precision_report: the f32 run recorded ", wide.size(), " tensors and the ",
               dtype_name(dtype), " run ", low.size());
  std::map<std::string, std::int64_t> index;
  for (std::size_t i = 0; i < wide.size(); ++i) {
    PrecisionDifference row = compare(wide[i], low[i], index[wide[i].phase], dtype);
    row.phase = wide[i].phase;
    row.index = index[wide[i].phase]++;
    report.rows.push_back(std::move(row));
  }
  return report;
}

}  // namespace tandem
