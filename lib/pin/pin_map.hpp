// The pinning service's bookkeeping: pin counts over byte ranges, the driver registrations that
// lock their pages, and the cache of registrations no pin needs any more. Knows nothing about CUDA:
// registering is the backend's job. Driver calls run without the lock; ranges with a call in
// flight are claimed, and other calls that touch them wait.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "core/spin_lock.hpp"

namespace gpumem::pin {

class Backend {
 public:
  virtual ~Backend() = default;
  // Page-locks [start, start + size), page aligned; throws gpumem::Error.
  virtual void lock_pages(uintptr_t start, size_t size) = 0;
  virtual void unlock_pages(uintptr_t start, size_t size) = 0;
};

struct Stats {
  uint64_t registered = 0, pinned = 0, cached = 0, registrations = 0;
  uint64_t pins = 0, unpins = 0, hits = 0, misses = 0, evictions = 0, budget = 0;
};

enum class State { none, partial, full };

class PinMap {
 public:
  PinMap(Backend& backend, size_t page_size, uint64_t budget);
  void pin(uintptr_t p, size_t size);
  void unpin(uintptr_t p, size_t size);
  State query(uintptr_t p, size_t size);
  void forget(uintptr_t p, size_t size);
  void flush();
  void set_budget(uint64_t budget);
  Stats stats();
  // Whether a registration of the service's overlaps [start, start + size).
  bool registered_within(uintptr_t start, size_t size);
  // Throws GPUMEM_ERROR_INTERNAL naming the first broken invariant; for tests.
  void check_invariants();

 private:
  struct Run {  // bytes [start, end) pinned count times
    uintptr_t end;
    uint32_t count;
  };
  struct Registration {
    uintptr_t start, end;
    bool cached;
    Registration* lru_prev = nullptr;  // in the LRU list while cached (map nodes do not move)
    Registration* lru_next = nullptr;
  };
  struct Range {
    uintptr_t start, end;
  };

  uintptr_t page_down(uintptr_t p) const { return p & ~(page_ - 1); }
  uintptr_t page_up(uintptr_t p) const { return (p + page_ - 1) & ~(page_ - 1); }
  bool claimed(uintptr_t start, uintptr_t end) const;  // under mutex_
  void wait_unclaimed(std::unique_lock<SpinLock>& lock, uintptr_t start, uintptr_t end);
  void release_claim(uintptr_t start, uintptr_t end);  // under mutex_
  std::vector<Range> gaps(uintptr_t start, uintptr_t end) const;
  bool pinned_within(uintptr_t start, uintptr_t end) const;
  bool fully_pinned(uintptr_t start, uintptr_t end) const;
  // Runs are made and dropped through these, which keep the dropped map nodes for reuse: pinning
  // and unpinning the same memory over and over then allocates nothing.
  std::map<uintptr_t, Run>::iterator make_run(uintptr_t start, Run run);
  std::map<uintptr_t, Run>::iterator drop_run(std::map<uintptr_t, Run>::iterator it);
  std::vector<std::map<uintptr_t, Run>::node_type> spare_runs_;
  void add_counts(uintptr_t start, uintptr_t end, int delta);
  void change_counts(uintptr_t start, uintptr_t end, int delta);  // add_counts' general case
  void activate(uintptr_t start, uintptr_t end);                  // cached registrations in the range are needed again
  void cache_unneeded(uintptr_t start, uintptr_t end);
  std::vector<Range> take_over_budget();  // removes and claims what to evict
  void unlock_all(std::unique_lock<SpinLock>& lock, std::vector<Range>& ranges, bool count_evictions);

  Backend& backend_;
  const uintptr_t page_;
  SpinLock mutex_;  // short sections: never held across a driver call
  std::condition_variable_any unclaimed_;
  std::map<uintptr_t, Run> runs_;
  std::map<uintptr_t, Registration> registrations_;
  // Cached registrations, most recently used first; linked through the registrations themselves,
  // so caching and reusing one allocates nothing.
  Registration* lru_head_ = nullptr;
  Registration* lru_tail_ = nullptr;
  void lru_push_front(Registration* r);
  void lru_unlink(Registration* r);
  std::vector<Range> claims_;
  Stats stats_;
};

}  // namespace gpumem::pin
