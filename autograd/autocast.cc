#include "autograd/autocast.h"

#include <map>
#include <mutex>

#include "autograd/functions/array.h"
#include "core/error.h"

namespace tandem {

namespace {

thread_local std::optional<DType> active_dtype;

struct PolicyTable {
  std::mutex mutex;
  std::map<std::string, AutocastPolicy> entries;
};

PolicyTable& policy_table() {
  static PolicyTable* table = [] {
    auto* made = new PolicyTable;
    for (const char* name :
         {"linear", "matmul", "convolution_2d", "deconvolution_2d", "spatial_convolution_2d", "n_step_lstm"})
      made->entries[name] = AutocastPolicy::lower;
    for (const char* name :
         {"softmax", "log_softmax", "softmax_cross_entropy", "vocab_parallel_softmax_cross_entropy",
          "mean_squared_error", "layer_normalization", "batch_normalization", "fixed_batch_normalization",
          "multi_node_batch_normalization", "sum", "mean", "exp", "log", "pow", "rdiv"})
      made->entries[name] = AutocastPolicy::f32;
    // Attention's softmax runs in its scores' dtype: the kernel computes in f32 and rounds each
    // probability once (what the next product would have rounded them to), so a bf16 attention
    // keeps bf16 probabilities for backward instead of f32 ones beside their bf16 copy.
    made->entries["scaled_softmax"] = AutocastPolicy::promote;
    made->entries["cast"] = AutocastPolicy::as_given;
    // A recomputed region casts inside, as its functions say (autograd/checkpoint.h).
    made->entries["checkpoint"] = AutocastPolicy::as_given;
    return made;
  }();
  return *table;
}

std::string base_name(const std::string& function) { return function.substr(0, function.find('+')); }

// The widest of two floating dtypes; bf16 with f16 is f32 (neither holds the other).
DType wider(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  return DType::f32;
}

}  // namespace

const char* autocast_policy_name(AutocastPolicy policy) {
  switch (policy) {
    case AutocastPolicy::lower:
      return "lower";
    case AutocastPolicy::f32:
      return "f32";
    case AutocastPolicy::promote:
      return "promote";
    case AutocastPolicy::as_given:
      return "as_given";
  }
  return "?";
}

AutocastScope::AutocastScope(std::optional<DType> dtype) : previous_(active_dtype) {
  TANDEM_CHECK(!dtype || is_half(*dtype), "AutocastScope: lowers to bf16 or f16, got ", dtype_name(*dtype));
  active_dtype = dtype;
}

AutocastScope::~AutocastScope() { active_dtype = previous_; }

std::optional<DType> autocast_dtype() { return active_dtype; }

AutocastPolicy autocast_policy(const std::string& function) {
  PolicyTable& table = policy_table();
  const std::lock_guard<std::mutex> lock(table.mutex);
  const auto found = table.entries.find(base_name(function));
  return found == table.entries.end() ? AutocastPolicy::promote : found->second;
}

void set_autocast_policy(const std::string& function, AutocastPolicy policy) {
  TANDEM_CHECK(!function.empty() && function.find('+') == std::string::npos,
               "set_autocast_policy: name a function without its suffix ('linear', not 'linear+relu'), got '", function,
               "'");
  PolicyTable& table = policy_table();
  const std::lock_guard<std::mutex> lock(table.mutex);
  table.entries[function] = policy;
}

std::vector<std::pair<std::string, AutocastPolicy>> autocast_policies() {
  PolicyTable& table = policy_table();
  const std::lock_guard<std::mutex> lock(table.mutex);
  return {table.entries.begin(), table.entries.end()};
}

namespace autograd_detail {

Variables autocast_inputs(const std::string& function, const Variables& inputs) {
  const std::optional<DType> lowered = active_dtype;
  if (!lowered) return {};
  const AutocastPolicy policy = autocast_policy(function);
  if (policy == AutocastPolicy::as_given) return {};
  // lower and promote: the one dtype their floating inputs get (f32 decides per input below).
  std::optional<DType> target;
  if (policy == AutocastPolicy::lower) target = *lowered;
  if (policy == AutocastPolicy::promote) {
    for (const Variable& x : inputs)
      if (x.defined() && is_floating(x.dtype())) target = target ? wider(*target, x.dtype()) : x.dtype();
  }
  Variables cast;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Variable& x = inputs[i];
    if (!x.defined() || !is_floating(x.dtype())) continue;
    DType want = x.dtype();
    if (policy == AutocastPolicy::f32) {
      if (is_half(x.dtype())) want = DType::f32;
    } else if (x.dtype() != DType::f64 || policy == AutocastPolicy::promote) {
      want = *target;  // f64 is never lowered
    }
    if (want == x.dtype()) continue;
    if (cast.empty()) cast = inputs;
    cast[i] = functions::cast(x, want);
  }
  return cast;
}

}  // namespace autograd_detail

}  // namespace tandem
