// A debugging aid for numerical faults (Chainer's debug mode, for NaN and Inf): when it is on,
// every function's floating outputs are checked in forward and every gradient in backward, and
// the first NaN or Inf raises an error naming the function, which output or input, where in the
// tensor, and the process (comm sets "rank R of N"). Data-parallel gradients are also checked
// before their allreduce (Communicator::multi_node_mean_grad), where one rank's NaN would
// otherwise spread to every rank.
//
// Off by default (each check costs a pass over the tensor); on when the environment variable
// TANDEM_CHECK_FINITE is 1 at the first use, or after set_check_finite(true).
#pragma once

#include <string>

#include "core/tensor.h"

namespace tandem {

bool check_finite_enabled();
void set_check_finite(bool on);

// "" when every element of t is finite (or t is not floating); otherwise the first non-finite
// element, e.g. "NaN at [2, 5] of f32[4, 8]".
std::string first_nonfinite(const Tensor& t);

// " on rank R of N" (core/process_label.h: comm sets it), or "" without a label.
std::string check_finite_where();

}  // namespace tandem
