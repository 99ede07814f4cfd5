// Weight gradients computed later, and together: zero-bubble pipelines (Qi et al., "Zero Bubble
// Pipeline Parallelism", 2023) split a stage's backward into the gradient of its input, which the
// previous stage waits for, and the gradient of its weights, which nobody waits for and can run
// when the rank would otherwise idle. tandem goes one step further and batches them: a product
// dW += dY^T X over 32 rows moves the whole weight and its gradient through memory for little
// arithmetic, so a pipeline's small microbatches ran at a fraction of the big batch's rate (the
// deep MLP's stage: docs/performance.md, "Pipelines"; bench ids pp.mlp.train.single.t1.m8 and
// .m8.dw). Queued, the weight gradients of every microbatch become one product over all their
// rows.
//
//   WeightGradientQueue queue;
//   { WeightGradientQueue::Scope deferring(queue);  tandem::backward(...);  }  // per microbatch
//   queue.flush();  // each queued weight's gradient, added to its grad()
//
// Inside a Scope (on this thread), a linear function's backward whose weight is a leaf that needs
// a gradient queues (dY, X) for it instead of computing dW; its input's and bias's gradients are
// computed as always. Every other function computes its gradients as always, so a queue never
// changes what a step computes, only when (sums of the same products in another order: equal to
// rounding). Nothing is queued (the gradient is computed at once, as outside a Scope) while a
// backward observer is registered (a data-parallel optimizer that averages each gradient when
// backward reports it final would otherwise average it before the queue adds to it) or under
// check_finite (which must see every gradient as it is made).
//
// A queue holds its tensors (each microbatch's X is the one the function saved anyway; dY is
// kept too) until flush() or clear(): memory that grows with the microbatches queued.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "autograd/variable.h"
#include "core/tensor.h"

namespace tandem {

class WeightGradientQueue {
 public:
  class Scope {
   public:
    explicit Scope(WeightGradientQueue& queue);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    WeightGradientQueue* previous_;
  };

  // The queue of this thread's innermost Scope when queueing is allowed now (see above); null
  // otherwise.
  static WeightGradientQueue* active();

  // dW += grad_output^T input for the leaf `weight` ([out, in]): grad_output [rows, out], input
  // [rows, in].
  void push(const std::shared_ptr<VariableNode>& weight, Tensor grad_output, Tensor input);

  // Computes every queued weight's gradient (one product per weight over all its queued rows) and
  // adds it to the weight's grad(), then empties the queue. Returns the microbatches' rows that
  // went into the products.
  std::int64_t flush();
  // Drops what is queued (a failed step).
  void clear();
  // Moves what `other` queued into this queue (weight actions computed together); other is left empty.
  void absorb(WeightGradientQueue&& other);

  bool empty() const { return entries_.empty(); }
  std::int64_t queued_bytes() const;

 private:
  struct Entry {
    std::shared_ptr<VariableNode> weight;
    std::vector<Tensor> grad_outputs, inputs;
  };
  static std::int64_t flush_order_free(Entry& entry);
  std::vector<Entry> entries_;                                  // in the order weights were first queued
  std::unordered_map<const VariableNode*, std::size_t> index_;  // weight -> entries_ position
};

}  // namespace tandem
