// Mixed precision by scope (PyTorch's autocast): inside an AutocastScope(DType::bf16), each
// differentiable function runs in the precision its policy names, and its inputs are cast to
// that precision on the way in (differentiably: a gradient goes back in its input's dtype).
// Parameters stay f32; only the products run in 16 bits:
//   lower    products and convolutions (linear, matmul, convolution_2d, deconvolution_2d,
//            spatial_convolution_2d, n_step_lstm): f32 and
//            16-bit inputs are cast to the scope's dtype;
//   f32      what needs range or many terms (softmax and its log, the losses, normalisation,
//            sum and mean, exp, log, pow): 16-bit inputs are cast to f32;
//   promote  everything else (add, mul, concat, attention's scaled_softmax, whose kernel computes
//            in f32 and rounds each probability once, ...): floating inputs of different dtypes
//            are cast to the widest of them (bf16 with f16 to f32), single inputs run as they are;
//   as_given nothing is cast (cast itself).
// f64 inputs are never lowered, as in PyTorch. docs/mixed-precision.md has the table;
// autocast_policies() lists it and set_autocast_policy changes an entry (say, attention's
// products kept in f32). The scope is per thread, like NoGradGuard, and nests; an
// AutocastScope(std::nullopt) switches autocasting off inside an enclosing one.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "core/dtype.h"

namespace tandem {

enum class AutocastPolicy { lower, f32, promote, as_given };
const char* autocast_policy_name(AutocastPolicy policy);

class AutocastScope {
 public:
  // dtype: bf16 or f16; std::nullopt switches autocasting off for the scope.
  explicit AutocastScope(std::optional<DType> dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  std::optional<DType> previous_;
};

// The dtype the innermost scope lowers to; std::nullopt outside any (or in a switched-off one).
std::optional<DType> autocast_dtype();

// The policy of a function by its name (FunctionNode::name(), up to a '+': "linear+relu" is
// linear's); functions the table does not name are promote.
AutocastPolicy autocast_policy(const std::string& function);
// Changes one function's entry, for every thread; as_given, lower, f32 or promote.
void set_autocast_policy(const std::string& function, AutocastPolicy policy);
// The table, sorted by name: every function named by default, and any changed since.
std::vector<std::pair<std::string, AutocastPolicy>> autocast_policies();

namespace autograd_detail {
// The inputs of `function` cast by its policy under the active scope: empty when none changes
// (FunctionNode::apply then uses the given ones).
Variables autocast_inputs(const std::string& function, const Variables& inputs);
}  // namespace autograd_detail

}  // namespace tandem
