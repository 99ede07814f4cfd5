// Observers of the backward engine: what lets a data-parallel optimizer start averaging a
// parameter's gradient while backward still runs (PyTorch DDP's autograd hooks), instead of
// after it has ended.
//
// The engine tells every registered observer when a backward starts, when a leaf's gradient
// is final for this backward (no function still to run adds to it: the engine counts, before
// it starts, how many of the functions it will run take each leaf), after each function's
// backward (a chance to move communication on without blocking), and when it ends. A leaf's
// gradient has been delivered to its variable (grad()) when leaf_final is called; a leaf whose
// functions passed it no gradient is reported too, with its gradient as it was. With no
// observer registered the engine does none of this work.
#pragma once

#include <memory>
#include <vector>

#include "autograd/variable.h"

namespace tandem {

class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  virtual void backward_started() {}
  virtual void leaf_final(const VariableNode& leaf) { (void)leaf; }
  virtual void function_done() {}
  virtual void backward_finished() {}
  // A function is about to read a leaf whose memory has been released (a parameter sharded over
  // ranks, ZeRO-3): in forward, before the function computes; in backward, before its backward.
  // The observer that owns the leaf gathers it (Storage::restore and fill).
  virtual void leaf_needed(const VariableNode& leaf) { (void)leaf; }
};

// Calls leaf_needed on every observer for each leaf among `leaves` whose memory is released.
void gather_released_leaves(const std::vector<std::shared_ptr<VariableNode>>& leaves);

// Registers an observer for every backward on every thread until the returned handle is
// destroyed.
std::shared_ptr<void> add_backward_observer(BackwardObserver* observer);

// The observers registered now (the engine takes a copy at the start of each backward).
std::vector<BackwardObserver*> backward_observers();

// PyTorch DDP's no_sync(): backward passes inside this scope (on this thread) only accumulate
// gradients; a data-parallel optimizer (comm/data_parallel) averages what they accumulated with
// the next backward outside it. Gradient accumulation over k microbatches: the first k - 1
// backward passes inside it (StandardUpdater::set_accumulation does so).
class NoGradientSync {
 public:
  NoGradientSync();
  ~NoGradientSync();
  NoGradientSync(const NoGradientSync&) = delete;
  NoGradientSync& operator=(const NoGradientSync&) = delete;
  static bool active();

 private:
  bool previous_;
};

}  // namespace tandem
