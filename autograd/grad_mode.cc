#include "autograd/grad_mode.h"

namespace tandem {

namespace {
thread_local bool grad_mode_enabled = true;
}

bool grad_enabled() { return grad_mode_enabled; }

NoGradGuard::NoGradGuard() : previous_(grad_mode_enabled) { grad_mode_enabled = false; }
NoGradGuard::~NoGradGuard() { grad_mode_enabled = previous_; }

}  // namespace tandem
