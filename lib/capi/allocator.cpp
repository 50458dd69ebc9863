// Allocators at the C boundary.
#include "alloc/raw.hpp"
#include "capi/guard.hpp"
#include "defaults/defaults.hpp"
#include "pool/pool.hpp"

using gpumem::require;
using gpumem::require_out;
using gpumem::alloc::Allocator;
using gpumem::capi::guard;

namespace {

// Clears the output, makes the allocator, and hands it out.
template <class Make>
gpumem_status_t create(gpumem_allocator_t** out, Make&& make) {
  return guard([&] {
    require_out(out, "out_allocator");
    *out = nullptr;
    *out = make();
  });
}

void destroy(gpumem_allocator_t* handle, bool force) {
  Allocator* a = Allocator::from(handle);
  if (a->permanent())
    gpumem::fail(GPUMEM_ERROR_BUSY, "%p is the pool of device %d (or its upstream), which lives as long as the process",
                 static_cast<void*>(handle), a->device());
  if (const int users = a->users())
    gpumem::fail(GPUMEM_ERROR_BUSY,
                 "%p is relied on %d time%s: as the upstream of a pool, a process default, a thread's override or "
                 "memory exported to another process (gpumem_ipc_export)",
                 static_cast<void*>(handle), users, users == 1 ? "" : "s");
  if (a->was_default()) gpumem::alloc::wait_for_default_calls();
  uint64_t count = 0, bytes = 0;
  a->live(count, bytes);
  if (count && !force)
    gpumem::fail(GPUMEM_ERROR_BUSY,
                 "%p has %llu live allocation%s (%s bytes); free them first, or destroy it with "
                 "gpumem_allocator_destroy_force",
                 static_cast<void*>(handle), static_cast<unsigned long long>(count), count == 1 ? "" : "s",
                 gpumem::grouped(bytes).c_str());
  // Retired first, so that of two threads destroying it at once one does, the other is refused.
  if (!a->retire())
    gpumem::fail(GPUMEM_ERROR_INVALID_HANDLE, "%p is not a live gpumem allocator: another thread destroyed it",
                 static_cast<void*>(handle));
  try {
    if (count) a->free_all_live();
    // A pool's cache goes back first, so an upstream that refuses a block fails the destroy.
    if (auto* pool = dynamic_cast<gpumem::pool::Pool*>(a)) pool->release(nullptr, true);
  } catch (...) {
    a->revive();
    throw;
  }
  delete a;
}

}  // namespace

extern "C" {

GPUMEM_API gpumem_status_t gpumem_allocator_create_device(int32_t device, gpumem_allocator_t** out_allocator) {
  return create(out_allocator, [&] { return gpumem::alloc::make_device(device); });
}

GPUMEM_API gpumem_status_t gpumem_allocator_create_device_async(int32_t device, gpumem_cuda_pool_t cuda_pool,
                                                                gpumem_allocator_t** out_allocator) {
  return create(out_allocator, [&] { return gpumem::alloc::make_device_async(device, cuda_pool); });
}

GPUMEM_API gpumem_status_t gpumem_allocator_create_managed(int32_t device, uint32_t flags,
                                                           gpumem_allocator_t** out_allocator) {
  return create(out_allocator, [&] { return gpumem::alloc::make_managed(device, flags); });
}

GPUMEM_API gpumem_status_t gpumem_allocator_create_pinned(uint32_t flags, gpumem_allocator_t** out_allocator) {
  return create(out_allocator, [&] { return gpumem::alloc::make_pinned(flags); });
}

GPUMEM_API gpumem_status_t gpumem_allocator_create_host(size_t alignment, gpumem_allocator_t** out_allocator) {
  return create(out_allocator, [&] { return gpumem::alloc::make_host(alignment); });
}

GPUMEM_API gpumem_status_t gpumem_allocator_create_functions(const gpumem_allocator_functions_t* functions,
                                                             gpumem_allocator_t** out_allocator) {
  return create(out_allocator,
                [&] { return gpumem::alloc::make_functions(gpumem::capi::in_struct(functions, "functions")); });
}

GPUMEM_API gpumem_status_t gpumem_allocator_destroy(gpumem_allocator_t* allocator) {
  return guard([&] {
    if (allocator) destroy(allocator, false);
  });
}

GPUMEM_API gpumem_status_t gpumem_allocator_destroy_force(gpumem_allocator_t* allocator) {
  return guard([&] {
    if (allocator) destroy(allocator, true);
  });
}

GPUMEM_API gpumem_status_t gpumem_allocator_get_device(gpumem_allocator_t* allocator, int32_t* out_device) {
  return guard([&] {
    require_out(out_device, "out_device");
    *out_device = 0;
    *out_device = gpumem::alloc::resolve(allocator)->device();
  });
}

GPUMEM_API gpumem_status_t gpumem_alloc(gpumem_allocator_t* allocator, size_t size, gpumem_stream_t stream,
                                        void** out_ptr) {
  return guard([&] {
    require_out(out_ptr, "out_ptr");
    *out_ptr = nullptr;
    require(size != 0, "size is 0");
    *out_ptr = gpumem::alloc::resolve(allocator)->allocate(size, stream);
  });
}

GPUMEM_API gpumem_status_t gpumem_free(gpumem_allocator_t* allocator, void* ptr, gpumem_stream_t stream) {
  return guard([&] {
    if (ptr) gpumem::pool::Pool::free_from_caller(gpumem::alloc::resolve(allocator), ptr, stream);
  });
}

GPUMEM_API gpumem_status_t gpumem_allocator_set_default(int32_t device, gpumem_allocator_t* allocator) {
  return guard([&] {
    require(device >= 0, "device is negative");
    gpumem::alloc::set_default(device, allocator ? Allocator::from(allocator) : nullptr);
  });
}

GPUMEM_API gpumem_status_t gpumem_allocator_get_default(int32_t device, gpumem_allocator_t** out_allocator) {
  return guard([&] {
    require_out(out_allocator, "out_allocator");
    *out_allocator = nullptr;
    require(device >= 0, "device is negative");
    *out_allocator = gpumem::alloc::get_default(device);
  });
}

GPUMEM_API gpumem_status_t gpumem_allocator_set_thread(gpumem_allocator_t* allocator,
                                                       gpumem_allocator_t** out_previous) {
  return guard([&] {
    if (out_previous) *out_previous = nullptr;
    Allocator* a = allocator ? Allocator::from(allocator) : nullptr;
    Allocator* previous = gpumem::alloc::set_thread(a);
    if (out_previous) *out_previous = previous;
  });
}

GPUMEM_API gpumem_status_t gpumem_allocator_get_thread(gpumem_allocator_t** out_allocator) {
  return guard([&] {
    require_out(out_allocator, "out_allocator");
    *out_allocator = gpumem::alloc::get_thread();
  });
}

GPUMEM_API gpumem_status_t gpumem_allocator_get_stats(gpumem_allocator_t* allocator,
                                                      gpumem_allocator_stats_t* out_stats) {
  return guard([&] {
    gpumem::capi::fill_struct(out_stats, "out_stats", [&](gpumem_allocator_stats_t& out) {
      const gpumem::alloc::Stats s = gpumem::alloc::resolve(allocator)->stats();
      out.bytes_in_use = s.in_use;
      out.peak_bytes_in_use = s.peak_in_use;
      out.bytes_requested = s.requested;
      out.bytes_reserved = s.reserved;
      out.peak_bytes_reserved = s.peak_reserved;
      out.alloc_count = s.allocs;
      out.free_count = s.frees;
      out.upstream_alloc_count = s.upstream_allocs;
      out.upstream_free_count = s.upstream_frees;
      out.retry_count = s.retries;
      out.oom_count = s.ooms;
    });
  });
}

GPUMEM_API gpumem_status_t gpumem_allocator_reset_peaks(gpumem_allocator_t* allocator) {
  return guard([&] { gpumem::alloc::resolve(allocator)->reset_peaks(); });
}

GPUMEM_API gpumem_status_t gpumem_allocator_add_hook(gpumem_allocator_t* allocator, uint32_t events,
                                                     gpumem_hook_fn hook, void* user_data, uint64_t* out_hook_id) {
  return guard([&] {
    require_out(out_hook_id, "out_hook_id");
    *out_hook_id = 0;
    require(hook != nullptr, "hook is NULL");
    if (events == 0 || (events & ~uint32_t{GPUMEM_HOOK_ALL}))
      gpumem::fail(GPUMEM_ERROR_INVALID_ARGUMENT, "events 0x%x: pass a non-empty mask of GPUMEM_HOOK_* (0x%x)", events,
                   static_cast<unsigned>(GPUMEM_HOOK_ALL));
    *out_hook_id = Allocator::from(allocator)->add_hook(events, hook, user_data);
  });
}

GPUMEM_API gpumem_status_t gpumem_allocator_remove_hook(gpumem_allocator_t* allocator, uint64_t hook_id) {
  return guard([&] { Allocator::from(allocator)->remove_hook(hook_id); });
}

}  // extern "C"
