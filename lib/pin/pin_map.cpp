#include "pin/pin_map.hpp"

#include <algorithm>
#include <exception>

#include "core/error.hpp"

namespace gpumem::pin {

PinMap::PinMap(Backend& backend, size_t page_size, uint64_t budget) : backend_(backend), page_(page_size) {
  stats_.budget = budget;
  spare_runs_.reserve(64);
}

void PinMap::lru_push_front(Registration* r) {
  r->lru_prev = nullptr;
  r->lru_next = lru_head_;
  (lru_head_ ? lru_head_->lru_prev : lru_tail_) = r;
  lru_head_ = r;
}

void PinMap::lru_unlink(Registration* r) {
  (r->lru_prev ? r->lru_prev->lru_next : lru_head_) = r->lru_next;
  (r->lru_next ? r->lru_next->lru_prev : lru_tail_) = r->lru_prev;
  r->lru_prev = r->lru_next = nullptr;
}

bool PinMap::claimed(uintptr_t start, uintptr_t end) const {
  for (const Range& r : claims_)
    if (r.start < end && start < r.end) return true;
  return false;
}

void PinMap::wait_unclaimed(std::unique_lock<SpinLock>& lock, uintptr_t start, uintptr_t end) {
  unclaimed_.wait(lock, [&] { return !claimed(start, end); });
}

void PinMap::release_claim(uintptr_t start, uintptr_t end) {
  const auto it =
      std::find_if(claims_.begin(), claims_.end(), [&](const Range& r) { return r.start == start && r.end == end; });
  if (it != claims_.end()) claims_.erase(it);
  unclaimed_.notify_all();
}

std::vector<PinMap::Range> PinMap::gaps(uintptr_t start, uintptr_t end) const {
  std::vector<Range> out;
  auto it = registrations_.upper_bound(start);
  if (it != registrations_.begin() && std::prev(it)->second.end > start) --it;
  uintptr_t cur = start;
  for (; it != registrations_.end() && it->first < end; ++it) {
    if (it->first > cur) out.push_back(Range{cur, it->first});
    cur = std::max(cur, it->second.end);
  }
  if (cur < end) out.push_back(Range{cur, end});
  return out;
}

bool PinMap::pinned_within(uintptr_t start, uintptr_t end) const {
  auto it = runs_.upper_bound(start);
  if (it != runs_.begin() && std::prev(it)->second.end > start) return true;
  return it != runs_.end() && it->first < end;
}

bool PinMap::fully_pinned(uintptr_t start, uintptr_t end) const {
  auto it = runs_.upper_bound(start);
  if (it == runs_.begin()) return false;
  --it;
  if (it->second.end <= start) return false;
  uintptr_t cur = it->second.end;
  while (cur < end) {
    ++it;
    if (it == runs_.end() || it->first != cur) return false;
    cur = it->second.end;
  }
  return true;
}

std::map<uintptr_t, PinMap::Run>::iterator PinMap::make_run(uintptr_t start, Run run) {
  if (spare_runs_.empty()) return runs_.emplace(start, run).first;
  auto node = std::move(spare_runs_.back());
  spare_runs_.pop_back();
  node.key() = start;
  node.mapped() = run;
  return runs_.insert(std::move(node)).position;
}

std::map<uintptr_t, PinMap::Run>::iterator PinMap::drop_run(std::map<uintptr_t, Run>::iterator it) {
  const auto next = std::next(it);
  if (spare_runs_.size() < spare_runs_.capacity()) {
    spare_runs_.push_back(runs_.extract(it));  // within the reserved capacity: cannot throw
  } else {
    runs_.erase(it);
  }
  return next;
}

void PinMap::add_counts(uintptr_t start, uintptr_t end, int delta) {
  // Runs are split at the range's ends, changed inside it, then neighbours with equal counts joined.
  // Pinning fresh bytes and unpinning exactly one run, the common cases, skip the splitting.
  auto exact = runs_.end();
  if (delta > 0 && !pinned_within(start, end)) {
    make_run(start, Run{end, 1});
  } else if (delta < 0 && (exact = runs_.find(start)) != runs_.end() && exact->second.end == end) {
    if (--exact->second.count == 0) {
      drop_run(exact);
      return;  // nothing left to join: its neighbours were already unequal or apart
    }
  } else {
    change_counts(start, end, delta);
  }
  auto it = runs_.lower_bound(start);
  if (it != runs_.begin()) --it;
  while (it != runs_.end() && it->first <= end) {
    auto next = std::next(it);
    if (next != runs_.end() && it->second.end == next->first && it->second.count == next->second.count) {
      it->second.end = next->second.end;
      drop_run(next);
    } else {
      it = next;
    }
  }
}

void PinMap::change_counts(uintptr_t start, uintptr_t end, int delta) {
  const auto split_at = [&](uintptr_t x) {
    auto it = runs_.upper_bound(x);
    if (it == runs_.begin()) return;
    --it;
    if (it->first < x && it->second.end > x) {
      const Run right{it->second.end, it->second.count};
      it->second.end = x;
      make_run(x, right);
    }
  };
  split_at(start);
  split_at(end);
  if (delta > 0) {
    uintptr_t cur = start;
    auto it = runs_.lower_bound(start);
    while (cur < end) {
      if (it != runs_.end() && it->first == cur) {
        ++it->second.count;
        cur = it->second.end;
        ++it;
      } else {
        const uintptr_t next = it != runs_.end() && it->first < end ? it->first : end;
        make_run(cur, Run{next, 1});
        cur = next;
      }
    }
  } else {
    for (auto it = runs_.lower_bound(start); it != runs_.end() && it->first < end;) {
      if (--it->second.count == 0) {
        it = drop_run(it);
      } else {
        ++it;
      }
    }
  }
}

void PinMap::activate(uintptr_t start, uintptr_t end) {
  auto it = registrations_.upper_bound(start);
  if (it != registrations_.begin() && std::prev(it)->second.end > start) --it;
  for (; it != registrations_.end() && it->first < end; ++it) {
    Registration& r = it->second;
    if (!r.cached) continue;
    r.cached = false;
    lru_unlink(&r);
    stats_.cached -= r.end - it->first;
    stats_.pinned += r.end - it->first;
  }
}

void PinMap::cache_unneeded(uintptr_t start, uintptr_t end) {
  auto it = registrations_.upper_bound(start);
  if (it != registrations_.begin() && std::prev(it)->second.end > start) --it;
  for (; it != registrations_.end() && it->first < end; ++it) {
    Registration& r = it->second;
    if (r.cached || pinned_within(it->first, r.end)) continue;
    lru_push_front(&r);
    r.cached = true;
    stats_.pinned -= r.end - it->first;
    stats_.cached += r.end - it->first;
  }
}

std::vector<PinMap::Range> PinMap::take_over_budget() {
  std::vector<Range> out;
  for (Registration* r = lru_tail_; stats_.cached > stats_.budget && r;) {
    Registration* older_first = r->lru_prev;  // r goes below
    const Range range{r->start, r->end};
    if (!claimed(range.start, range.end)) {
      out.push_back(range);
      claims_.push_back(range);
      stats_.cached -= range.end - range.start;
      stats_.registered -= range.end - range.start;
      --stats_.registrations;
      lru_unlink(r);
      registrations_.erase(range.start);
    }
    r = older_first;
  }
  return out;
}

void PinMap::unlock_all(std::unique_lock<SpinLock>& lock, std::vector<Range>& ranges, bool count_evictions) {
  lock.unlock();
  std::vector<bool> failed(ranges.size(), false);
  std::exception_ptr first;
  for (size_t i = 0; i < ranges.size(); ++i) {
    try {
      backend_.unlock_pages(ranges[i].start, ranges[i].end - ranges[i].start);
    } catch (...) {
      failed[i] = true;
      if (!first) first = std::current_exception();
    }
  }
  lock.lock();
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    release_claim(r.start, r.end);
    if (failed[i]) {
      // Still registered: cached again, so the books match the driver.
      Registration& back = registrations_.emplace(r.start, Registration{r.start, r.end, true}).first->second;
      lru_push_front(&back);
      stats_.cached += r.end - r.start;
      stats_.registered += r.end - r.start;
      ++stats_.registrations;
    } else if (count_evictions) {
      ++stats_.evictions;
    }
  }
  if (first && !count_evictions) std::rethrow_exception(first);
}

void PinMap::pin(uintptr_t p, size_t size) {
  const uintptr_t start = p, end = p + size, pages = page_down(start), pages_end = page_up(end);
  std::unique_lock<SpinLock> lock(mutex_);
  wait_unclaimed(lock, pages, pages_end);
  const std::vector<Range> missing = gaps(pages, pages_end);
  if (!missing.empty()) {
    // The driver is called without the lock; these pages are claimed meanwhile.
    claims_.push_back(Range{pages, pages_end});
    lock.unlock();
    std::vector<Range> done;
    try {
      for (const Range& r : missing) {
        backend_.lock_pages(r.start, r.end - r.start);
        done.push_back(r);
      }
    } catch (...) {
      for (const Range& r : done) {
        try {
          backend_.unlock_pages(r.start, r.end - r.start);
        } catch (...) {
          // Nothing more can be done for it; the original failure is what the caller hears.
        }
      }
      lock.lock();
      release_claim(pages, pages_end);
      throw;
    }
    lock.lock();
    for (const Range& r : done) {
      registrations_.emplace(r.start, Registration{r.start, r.end, false});
      stats_.registered += r.end - r.start;
      stats_.pinned += r.end - r.start;
      ++stats_.registrations;
    }
    release_claim(pages, pages_end);
    ++stats_.misses;
  } else {
    ++stats_.hits;
  }
  add_counts(start, end, +1);
  activate(pages, pages_end);
  ++stats_.pins;
}

void PinMap::unpin(uintptr_t p, size_t size) {
  const uintptr_t start = p, end = p + size;
  std::unique_lock<SpinLock> lock(mutex_);
  wait_unclaimed(lock, page_down(start), page_up(end));
  if (!fully_pinned(start, end))
    fail(GPUMEM_ERROR_NOT_OWNED, "%p + %s is not pinned throughout; nothing was unpinned", reinterpret_cast<void*>(p),
         bytes(size).c_str());
  add_counts(start, end, -1);
  cache_unneeded(page_down(start), page_up(end));
  ++stats_.unpins;
  std::vector<Range> evicted = take_over_budget();
  if (!evicted.empty()) unlock_all(lock, evicted, true);
}

State PinMap::query(uintptr_t p, size_t size) {
  std::lock_guard<SpinLock> lock(mutex_);
  if (fully_pinned(p, p + size)) return State::full;
  return pinned_within(p, p + size) ? State::partial : State::none;
}

void PinMap::forget(uintptr_t p, size_t size) {
  const uintptr_t start = p, end = p + size, pages = page_down(start), pages_end = page_up(end);
  std::unique_lock<SpinLock> lock(mutex_);
  // The registrations it would drop may reach beyond the range, where a pin in flight may be
  // counting on them: wait until nothing claims any of their pages.
  for (uintptr_t lo = pages, hi = pages_end;;) {
    wait_unclaimed(lock, lo, hi);
    auto first = registrations_.upper_bound(pages);
    if (first != registrations_.begin() && std::prev(first)->second.end > pages) --first;
    uintptr_t reach_lo = pages, reach_hi = pages_end;
    for (auto it = first; it != registrations_.end() && it->first < pages_end; ++it) {
      reach_lo = std::min(reach_lo, it->first);
      reach_hi = std::max(reach_hi, it->second.end);
    }
    if (reach_lo == lo && reach_hi == hi) break;
    lo = reach_lo;
    hi = reach_hi;
  }
  if (pinned_within(start, end))
    fail(GPUMEM_ERROR_BUSY, "%p + %s is still pinned in part; unpin it before freeing it", reinterpret_cast<void*>(p),
         bytes(size).c_str());
  std::vector<Range> dropped;
  auto it = registrations_.upper_bound(pages);
  if (it != registrations_.begin() && std::prev(it)->second.end > pages) --it;
  for (auto scan = it; scan != registrations_.end() && scan->first < pages_end; ++scan)
    if (!scan->second.cached)
      fail(GPUMEM_ERROR_BUSY,
           "the registration %p + %s that covers part of %p + %s also locks pinned memory outside it; unpin that first",
           reinterpret_cast<void*>(scan->first), bytes(scan->second.end - scan->first).c_str(),
           reinterpret_cast<void*>(p), bytes(size).c_str());
  dropped.reserve(4);
  while (it != registrations_.end() && it->first < pages_end) {
    const Range r{it->first, it->second.end};
    dropped.push_back(r);
    claims_.push_back(r);
    lru_unlink(&it->second);
    stats_.cached -= r.end - r.start;
    stats_.registered -= r.end - r.start;
    --stats_.registrations;
    it = registrations_.erase(it);
  }
  if (!dropped.empty()) unlock_all(lock, dropped, false);
}

void PinMap::flush() {
  std::unique_lock<SpinLock> lock(mutex_);
  const uint64_t budget = stats_.budget;
  stats_.budget = 0;
  std::vector<Range> dropped = take_over_budget();
  stats_.budget = budget;
  if (!dropped.empty()) unlock_all(lock, dropped, false);
}

void PinMap::set_budget(uint64_t budget) {
  std::unique_lock<SpinLock> lock(mutex_);
  stats_.budget = budget;
  std::vector<Range> evicted = take_over_budget();
  if (!evicted.empty()) unlock_all(lock, evicted, true);
}

bool PinMap::registered_within(uintptr_t start, size_t size) {
  std::lock_guard<SpinLock> lock(mutex_);
  auto it = registrations_.upper_bound(start);
  if (it != registrations_.begin() && std::prev(it)->second.end > start) return true;
  return it != registrations_.end() && it->first < start + size;
}

Stats PinMap::stats() {
  std::lock_guard<SpinLock> lock(mutex_);
  return stats_;
}

void PinMap::check_invariants() {
  std::lock_guard<SpinLock> lock(mutex_);
  const auto broken = [](const char* what) { fail(GPUMEM_ERROR_INTERNAL, "pin invariant broken: %s", what); };
  uintptr_t last_end = 0;
  for (auto it = runs_.begin(); it != runs_.end(); ++it) {
    if (it->first >= it->second.end || it->second.count == 0) broken("an empty run");
    if (it->first < last_end) broken("runs overlap");
    if (it->first == last_end && it != runs_.begin() && std::prev(it)->second.count == it->second.count)
      broken("equal neighbouring runs were not joined");
    if (!gaps(page_down(it->first), page_up(it->second.end)).empty()) broken("pinned bytes on unregistered pages");
    last_end = it->second.end;
  }
  uint64_t registered = 0, pinned = 0, cached = 0, count = 0;
  last_end = 0;
  for (const auto& [start, r] : registrations_) {
    if (start % page_ || r.end % page_ || start >= r.end) broken("a registration is not whole pages");
    if (start < last_end) broken("registrations overlap");
    if (r.cached == pinned_within(start, r.end)) broken("a registration's cached mark is wrong");
    registered += r.end - start;
    (r.cached ? cached : pinned) += r.end - start;
    ++count;
    last_end = r.end;
  }
  size_t listed = 0;
  for (const Registration* r = lru_head_; r; r = r->lru_next) {
    if (!r->cached || (r->lru_next && r->lru_next->lru_prev != r)) broken("the LRU list is corrupt");
    ++listed;
  }
  if (listed != static_cast<size_t>(std::count_if(registrations_.begin(), registrations_.end(),
                                                  [](const auto& e) { return e.second.cached; })))
    broken("the LRU list disagrees with the cached registrations");
  if (registered != stats_.registered || pinned != stats_.pinned || cached != stats_.cached ||
      count != stats_.registrations)
    broken("the statistics disagree with the registrations");
}

}  // namespace gpumem::pin
