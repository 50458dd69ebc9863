// What a NULL allocator means: the thread's override, else the process default of the current
// device, else that device's pool. And the reclaim callbacks every pool runs when out of memory.
#pragma once

#include "alloc/allocator.hpp"
#include "gpumem/pool.h"

namespace gpumem::alloc {

// The allocator behind a handle, NULL resolved to the current default.
Allocator* current_default();
inline Allocator* resolve(gpumem_allocator_t* handle) { return handle ? Allocator::from(handle) : current_default(); }

Allocator* device_pool(int device);
void set_default(int device, Allocator* allocator);  // NULL: back to the device pool
Allocator* get_default(int device);
Allocator* set_thread(Allocator* allocator);  // returns the override it replaces
Allocator* get_thread();

uint64_t reclaim_add(gpumem_reclaim_fn fn, void* user_data);
void reclaim_remove(uint64_t id);

}  // namespace gpumem::alloc
