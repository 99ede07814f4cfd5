// Where a reduced-precision run parts from f32: runs one forward and backward of a model in f32
// and again under an AutocastScope (autograd/autocast.h), from the same parameters and random
// state, and compares every function's outputs (in forward order), every gradient a backward
// computed (in backward order) and every parameter's gradient. The first tensor whose relative
// error exceeds the tolerance names the function, which output or gradient, and the parameters
// it read: where a bf16 run starts to diverge (an overflow in f16, a sum that lost its small
// terms), rather than a loss curve that drifts.
//
//   PrecisionReport report = precision_report(*model, [&] { lossfun().backward(); }, DType::bf16);
//   std::printf("%s", report.text(20).c_str());
//
// The model's gradients are left as the reduced-precision run made them. The casts autocast adds
// are left out, so the two runs' functions match one for one (an error says where they do not).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "layers/link.h"

namespace tandem {

struct PrecisionDifference {
  std::string phase;       // "forward", "backward" or "grad" (a parameter's gradient)
  std::int64_t index = 0;  // position in its phase
  std::string what;        // "linear output 0 (predictor/l1/W, predictor/l1/b)"
  Shape shape;
  DType dtype = DType::f32;   // the reduced-precision run's
  double relative_error = 0;  // ||low - f32|| / ||f32|| (the absolute error when ||f32|| is 0)
  double max_abs_error = 0;
};

struct PrecisionReport {
  DType dtype = DType::bf16;
  double tolerance = 0;
  // In the order the step computed them (forward before backward), then the parameters' gradients.
  std::vector<PrecisionDifference> rows;
  // The first row beyond the tolerance (an output that parts makes every later one part), or null
  // when every row is within it.
  const PrecisionDifference* first_beyond() const;
  // The verdict, then the rows with the largest errors (at most `rows` of them), as a table.
  std::string text(std::size_t rows = 20) const;
};

// step runs one forward and backward (loss.backward(), or a pipeline's step). tolerance 0: eight
// units in the last place of the format (2^-5 for bf16, 2^-8 for f16).
PrecisionReport precision_report(Link& model, const std::function<void()>& step, DType dtype, double tolerance = 0);

}  // namespace tandem
