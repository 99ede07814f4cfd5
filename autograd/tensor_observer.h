// An observer of every tensor the functions compute: each forward's outputs and each backward's
// input gradients. What training/digests.h records to find where two runs part; with none set
// the functions pay one relaxed load each.
#pragma once

#include <memory>
#include <vector>

#include "autograd/variable.h"
#include "core/tensor.h"

namespace tandem {

class FunctionNode;

class TensorObserver {
 public:
  virtual ~TensorObserver() = default;
  // After `function`'s forward computed `outputs` from `inputs`.
  virtual void forward_done(const FunctionNode& function, const std::vector<Variable>& inputs,
                            const std::vector<Tensor>& outputs) = 0;
  // After `function`'s backward computed the gradients of its inputs (undefined where none).
  virtual void backward_done(const FunctionNode& function, const std::vector<Tensor>& grad_inputs) = 0;
};

// Makes `observer` the one observer (of every thread) until the handle is destroyed; a second
// one while it lives is an error.
std::shared_ptr<void> set_tensor_observer(TensorObserver* observer);

// The observer set now, or null.
TensorObserver* tensor_observer();

}  // namespace tandem
