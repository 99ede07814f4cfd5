#include "autograd/tensor_observer.h"

#include <atomic>

#include "core/error.h"

namespace tandem {

namespace {
std::atomic<TensorObserver*> current{nullptr};
}  // namespace

std::shared_ptr<void> set_tensor_observer(TensorObserver* observer) {
  TANDEM_CHECK(observer != nullptr, "set_tensor_observer: null observer");
  TensorObserver* none = nullptr;
  TANDEM_CHECK(current.compare_exchange_strong(none, observer),
               "set_tensor_observer: another observer is set (one at a time)");
  return std::shared_ptr<void>(observer, [](void*) { current.store(nullptr); });
}

TensorObserver* tensor_observer() { return current.load(std::memory_order_relaxed); }

}  // namespace tandem
