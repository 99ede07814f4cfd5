// A lock for sections of a few dozen instructions that are almost never contended (the flight
// recorder's ring, touched by every communication call): taking and releasing it is one atomic
// exchange and one store, where a std::mutex costs a call into pthreads each way, 4 pairs in every
// small collective (what that cost: docs/performance.md, "What a small message costs"). A waiter
// spins briefly, then yields, so a holder that was preempted gets the core back.
#pragma once

#include <atomic>
#include <thread>

namespace tandem {

class SpinLock {
 public:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire)) wait();
  }
  bool try_lock() { return !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  void wait() const {
    for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
      if (spins >= 64) std::this_thread::yield();
#if defined(__x86_64__) || defined(__i386__)
      else __builtin_ia32_pause();
#endif
    }
  }
  std::atomic<bool> locked_{false};
};

}  // namespace tandem
