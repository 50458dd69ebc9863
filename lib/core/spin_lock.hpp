// The lock of an allocator's short critical sections: one atomic exchange to take it and a plain
// store to release it, where std::mutex costs two atomic read-modify-writes and two calls into
// libc — most of the time of a cached allocation. Waiters spin briefly, then yield, so a holder
// that was preempted does not cost every waiter a time slice.
#pragma once

#include <atomic>
#include <thread>

namespace gpumem {

// One short wait in a spin loop, easing the core's sibling thread.
inline void spin_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

class SpinLock {
 public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins < 64) {
          spin_pause();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  bool try_lock() noexcept { return !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace gpumem
