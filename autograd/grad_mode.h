// Thread-local modes, as Chainer's configuration: whether operations record the graph
// (NoGradGuard switches recording off for a scope: inference, optimizer updates, numerical
// gradients), and whether the model is training (dropout and batch normalisation read it;
// TrainModeGuard sets it for a scope, e.g. false during evaluation).
#pragma once

namespace tandem {

bool grad_enabled();

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Switches recording back on for a scope (inside backward, which runs with it off: activation
// checkpointing recomputes a forward there, autograd/checkpoint.h).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

bool train_mode();

class TrainModeGuard {
 public:
  explicit TrainModeGuard(bool train);
  ~TrainModeGuard();
  TrainModeGuard(const TrainModeGuard&) = delete;
  TrainModeGuard& operator=(const TrainModeGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace tandem
