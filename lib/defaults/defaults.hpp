// What a NULL allocator means: the thread's override, else the process default of the current
// device, else that device's pool. And the reclaim callbacks every pool runs when out of memory.
#pragma once

#include "alloc/allocator.hpp"
#include "gpumem/pool.h"

namespace gpumem::alloc {

// The allocator a call uses, kept from destruction while the call holds it when it is a process
// default the caller set (which another thread may replace and destroy meanwhile). Keep it no
// longer than the call.
class Resolved {
 public:
  explicit Resolved(Allocator* a, std::atomic<uint64_t>* counted = nullptr, unsigned generation = 0)
      : a_(a), counted_(counted), generation_(generation) {}
  Resolved(Resolved&& o) noexcept : a_(o.a_), counted_(o.counted_), generation_(o.generation_) { o.counted_ = nullptr; }
  Resolved(const Resolved&) = delete;
  Resolved& operator=(const Resolved&) = delete;
  ~Resolved();
  Allocator* operator->() const { return a_; }
  operator Allocator*() const { return a_; }

 private:
  Allocator* a_;
  std::atomic<uint64_t>* counted_;  // the shard this call counted itself in, if it did
  unsigned generation_;
};

// The allocator behind a handle, NULL resolved to the current default.
Resolved current_default();
// get_default(device), counted as current_default() counts: for callers that name the device
// (the PyTorch and CuPy entry points).
Resolved default_for(int device);
inline Resolved resolve(gpumem_allocator_t* handle) {
  return handle ? Resolved(Allocator::from(handle)) : current_default();
}
// Returns once no call that resolved NULL to a process default before now is still running: what
// destroying an allocator that was once a default waits for.
void wait_for_default_calls();

Allocator* device_pool(int device);
// Gives back what every device pool made so far caches, on all streams (gpumem_shutdown).
void release_device_pools();
void set_default(int device, Allocator* allocator);  // NULL: back to the device pool
Allocator* get_default(int device);
Allocator* set_thread(Allocator* allocator);  // returns the override it replaces
Allocator* get_thread();

uint64_t reclaim_add(gpumem_reclaim_fn fn, void* user_data);
void reclaim_remove(uint64_t id);

}  // namespace gpumem::alloc
