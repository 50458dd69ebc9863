// Callbacks with a lifetime (hooks, reclaim callbacks): removal returns once no call of the
// removed callback is running, so its caller may then release what the callback uses. A removal
// from inside the callback (on its own thread) waits for the other threads' calls only; the calls
// it is inside finish after it returns, and no new call starts. Ids come from next_id().
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/handle.hpp"

namespace gpumem {

template <class Fn>
class Callbacks {
 public:
  struct Entry {
    uint64_t id;
    uint32_t events;
    Fn fn;
    void* user_data;
    int running = 0;  // calls in progress, on every thread; under the list's mutex
    bool removed = false;
  };

  // Adds one; returns its id and sets events to the union of every callback's.
  uint64_t add(uint32_t events, Fn fn, void* user_data, uint32_t& all_events) {
    auto e = std::make_shared<Entry>(Entry{next_id(), events, fn, user_data});
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.push_back(e);
    all_events = events_locked();
    return e->id;
  }

  // Takes the callback with id off the list: no call of it starts any more. NULL (nothing
  // changed) if none has that id. Sets all_events as add() does.
  std::shared_ptr<Entry> take(uint64_t id, uint32_t& all_events) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::shared_ptr<Entry> e;
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if ((*it)->id == id) {
        e = *it;
        entries_.erase(it);
        break;
      }
    if (!e) return nullptr;
    e->removed = true;
    all_events = events_locked();
    return e;
  }

  // Returns once no thread but this one runs a callback that take() gave.
  void wait_idle(const std::shared_ptr<Entry>& e) {
    const int own = frames_on_this_thread(e.get());
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return e->running == own; });
  }

  // take() and wait_idle(); false if none has that id.
  bool remove(uint64_t id, uint32_t& all_events) {
    const std::shared_ptr<Entry> e = take(id, all_events);
    if (e) wait_idle(e);
    return e != nullptr;
  }

  // Calls call(fn, user_data) for each callback whose events meet event, in the order they were
  // added, without the lock held: a callback may add and remove callbacks. One removed meanwhile
  // is skipped. Without the memory to list them, none runs (the caller's own work matters more).
  template <class Call>
  void run(uint32_t event, Call&& call) noexcept {
    std::vector<std::shared_ptr<Entry>> listed;
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& e : entries_)
        if (e->events & event) listed.push_back(e);
    } catch (...) {
      return;
    }
    for (const auto& e : listed) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (e->removed) continue;
        ++e->running;
      }
      Frame frame{e.get(), frames_};
      frames_ = &frame;
      call(e->fn, e->user_data);
      frames_ = frame.next;
      std::lock_guard<std::mutex> lock(mutex_);
      --e->running;
      if (e->removed) idle_.notify_all();
    }
  }

  bool empty() {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.empty();
  }

 private:
  // The calls this thread is inside, innermost first: a removal from inside one does not wait
  // for itself.
  struct Frame {
    const Entry* entry;
    Frame* next;
  };
  static inline thread_local Frame* frames_ = nullptr;
  static int frames_on_this_thread(const Entry* e) {
    int n = 0;
    for (const Frame* f = frames_; f; f = f->next) n += f->entry == e;
    return n;
  }
  uint32_t events_locked() const {
    uint32_t events = 0;
    for (const auto& e : entries_) events |= e->events;
    return events;
  }

  std::mutex mutex_;
  std::condition_variable idle_;
  std::vector<std::shared_ptr<Entry>> entries_;
};

}  // namespace gpumem
