// The one handle facility: every opaque handle gpumem hands out (allocators and pools, arrays,
// traces, trace readers) is an object that starts with a Handle<Tag>, and every id (hooks, reclaim
// callbacks) comes from next_id(). Handle memory lives in the handle space (core/keep.hpp) and is
// never freed nor reused, and an id is never given twice: a destroyed handle or a removed id stays
// refused for the rest of the process, whatever is created after it. A check compares numbers
// before it reads anything, then reads one word; no lock, so it costs nothing on the fast path.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/keep.hpp"

namespace gpumem {

// How many handles callers hold: made and not destroyed, less those the library owns.
std::atomic<int64_t>& live_handles() noexcept;

// The base of every handle's object, and its first member. Tag is the type's mark (8 ASCII bytes);
// a destroyed handle carries its complement, so the detail can say "destroyed".
template <uint64_t Tag>
struct Handle {
  static constexpr uint64_t kLive = Tag;
  static constexpr uint64_t kDestroyed = ~Tag;
  uint64_t magic = kLive;  // first: what a check reads
  bool counted = true;     // among live_handles(): a caller's handle, not yet destroyed

  Handle() noexcept { live_handles().fetch_add(1, std::memory_order_relaxed); }
  ~Handle() { uncount(); }  // a constructor that threw, or an object the library destroys itself
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  static void* operator new(size_t size) { return handle_allocate(size); }
  static void operator delete(void*, size_t) noexcept {}
  // For kinds that align members to cache lines (the pool).
  static void* operator new(size_t size, std::align_val_t alignment) {
    return handle_allocate(size, static_cast<size_t>(alignment));
  }
  static void operator delete(void*, size_t, std::align_val_t) noexcept {}

  // Whether p is a live handle of this type: in the handle space, and marked live.
  static bool live(const void* p) noexcept {
    return __builtin_expect(in_handle_space(p), 1) &&
           __atomic_load_n(static_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE) == kLive;
  }
  // Why p is not, for the detail.
  static const char* why(const void* p) noexcept {
    if (!p) return "it is NULL";
    if (!in_handle_space(p)) return "gpumem made no handle at that address";
    if (__atomic_load_n(static_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE) == kDestroyed) return "it was destroyed";
    return "another kind of handle, or the inside of one";
  }

  // Marks the handle destroyed; true for the one caller that did (of any number racing to), so
  // that what it owns is released once.
  bool retire() noexcept {
    uint64_t expected = kLive;
    if (!__atomic_compare_exchange_n(&magic, &expected, kDestroyed, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return false;
    uncount();
    return true;
  }
  // Undoes retire() when releasing what the handle owns failed: the caller keeps a working handle.
  void revive() noexcept {
    // Counted before it is published: a destroy that then wins retire() sees `counted` set.
    counted = true;
    live_handles().fetch_add(1, std::memory_order_relaxed);
    __atomic_store_n(&magic, kLive, __ATOMIC_RELEASE);
  }
  // The library owns this one (a device pool): no caller destroys it, so it keeps nothing busy.
  void disown() noexcept { uncount(); }

 private:
  void uncount() noexcept {
    if (!counted) return;
    counted = false;
    live_handles().fetch_sub(1, std::memory_order_relaxed);
  }
};

// An id for a hook or a reclaim callback: process-wide, from 1, never given twice.
uint64_t next_id() noexcept;

}  // namespace gpumem
