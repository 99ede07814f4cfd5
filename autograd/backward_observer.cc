#include "autograd/backward_observer.h"

#include <algorithm>
#include <mutex>

namespace tandem {

namespace {

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::vector<BackwardObserver*>& registry() {
  static std::vector<BackwardObserver*> observers;
  return observers;
}

}  // namespace

std::shared_ptr<void> add_backward_observer(BackwardObserver* observer) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().push_back(observer);
  return std::shared_ptr<void>(nullptr, [observer](void*) {
    std::lock_guard<std::mutex> unregister(registry_mutex());
    auto& observers = registry();
    observers.erase(std::remove(observers.begin(), observers.end(), observer), observers.end());
  });
}

namespace {
thread_local bool g_no_sync = false;
}

NoGradientSync::NoGradientSync() : previous_(g_no_sync) { g_no_sync = true; }
NoGradientSync::~NoGradientSync() { g_no_sync = previous_; }
bool NoGradientSync::active() { return g_no_sync; }

void gather_released_leaves(const std::vector<std::shared_ptr<VariableNode>>& leaves) {
  for (const std::shared_ptr<VariableNode>& node : leaves) {
    if (!node || node->creator) continue;
    const std::shared_ptr<VariableImpl> variable = node->variable.lock();
    if (!variable || !variable->data.defined() || !variable->data.storage()->released()) continue;
    for (BackwardObserver* observer : backward_observers()) observer->leaf_needed(*node);
  }
}

std::vector<BackwardObserver*> backward_observers() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  return registry();
}

}  // namespace tandem
