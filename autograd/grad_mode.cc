#include "autograd/grad_mode.h"

namespace tandem {

namespace {
thread_local bool grad_mode_enabled = true;
thread_local bool train_mode_enabled = true;
}  // namespace

bool grad_enabled() { return grad_mode_enabled; }

NoGradGuard::NoGradGuard() : previous_(grad_mode_enabled) { grad_mode_enabled = false; }
NoGradGuard::~NoGradGuard() { grad_mode_enabled = previous_; }

EnableGradGuard::EnableGradGuard() : previous_(grad_mode_enabled) { grad_mode_enabled = true; }
EnableGradGuard::~EnableGradGuard() { grad_mode_enabled = previous_; }

bool train_mode() { return train_mode_enabled; }

TrainModeGuard::TrainModeGuard(bool train) : previous_(train_mode_enabled) { train_mode_enabled = train; }
TrainModeGuard::~TrainModeGuard() { train_mode_enabled = previous_; }

}  // namespace tandem
