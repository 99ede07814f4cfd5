#include "autograd/check_finite.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "core/process_label.h"

namespace tandem {

namespace {

std::atomic<bool>& enabled() {
  static std::atomic<bool> on = [] {
    const char* value = std::getenv("TANDEM_CHECK_FINITE");
    return value != nullptr && std::string(value) == "1";
  }();
  return on;
}

}  // namespace

bool check_finite_enabled() { return enabled().load(std::memory_order_relaxed); }

void set_check_finite(bool on) { enabled().store(on, std::memory_order_relaxed); }

std::string first_nonfinite(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) return "";
  // x * 0 is 0 for every finite x and NaN for NaN and +-Inf, so the sum is 0 exactly when all
  // are finite: one pass on the tensor's own device; the host scan below runs only on failure.
  if (sum(mul(t, 0.0)).item() == 0.0) return "";
  const std::vector<double> values = t.to(Device::cpu()).to_vector<double>();
  std::int64_t flat = 0;
  while (flat < static_cast<std::int64_t>(values.size()) && std::isfinite(values[flat])) ++flat;
  if (flat == static_cast<std::int64_t>(values.size())) return "";
  std::vector<std::int64_t> index(t.dim());
  for (std::int64_t d = static_cast<std::int64_t>(t.dim()) - 1, rest = flat; d >= 0; --d) {
    index[d] = rest % t.size(d);
    rest /= t.size(d);
  }
  std::ostringstream out;
  out << (std::isnan(values[flat]) ? "NaN" : values[flat] > 0 ? "+Inf" : "-Inf") << " at [";
  for (std::size_t d = 0; d < index.size(); ++d) out << (d ? ", " : "") << index[d];
  out << "] of " << t.description();
  return out.str();
}

std::string check_finite_where() { return process_where(); }

}  // namespace tandem
