// Numerical gradient checking, shipped in the library so that every differentiable function
// (and every user-written one) can be tested the same way.
//
// gradcheck runs `fn` on the inputs converted to f64, reduces its outputs with fixed random
// weights (asymmetric, so a gradient that is right only up to a permutation or a sign of
// symmetric terms cannot pass), backpropagates, and compares every input gradient with central
// differences. It then repeats the backward pass with each input in turn not requiring a
// gradient, and checks that the input gets none and the others' gradients do not change.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autograd/variable.h"

namespace tandem {

struct GradcheckOptions {
  double eps = 1e-3;   // central-difference step
  double atol = 1e-5;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-4;
  std::uint64_t seed = 0;  // for the output weights
  // Inputs to treat as constants (integer inputs always are).
  std::vector<bool> no_grad;
};

struct GradcheckResult {
  bool ok = true;
  std::string report;  // what failed, where, with both values
  double max_abs_error = 0;
  explicit operator bool() const { return ok; }
};

using GradcheckFunction = std::function<Variables(const Variables&)>;

GradcheckResult gradcheck(const GradcheckFunction& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

}  // namespace tandem
