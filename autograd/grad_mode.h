// Whether operations record the graph. NoGradGuard switches recording off for its scope on the
// current thread (inference, optimizer updates, numerical gradients).
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

}  // namespace tandem
