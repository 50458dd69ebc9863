// The pinning service at the C boundary.
#include "gpumem/pin.h"
#include "capi/guard.hpp"
#include "pin/service.hpp"

using gpumem::capi::guard;
using gpumem::pin::CallScope;
using gpumem::pin::service;

namespace {

uintptr_t checked_range(const void* ptr, size_t size) {
  gpumem::require(ptr != nullptr, "ptr is NULL");
  gpumem::require(size != 0, "size is 0");
  const auto start = reinterpret_cast<uintptr_t>(ptr);
  if (start + size < start)
    gpumem::fail(GPUMEM_ERROR_INVALID_ARGUMENT, "the range %p + %s wraps around the address space", ptr,
                 gpumem::bytes(size).c_str());
  return start;
}

}  // namespace

extern "C" {

GPUMEM_API gpumem_status_t gpumem_pin(void* ptr, size_t size, uint32_t flags) {
  return guard([&] {
    const uintptr_t start = checked_range(ptr, size);
    if (flags != 0) gpumem::fail(GPUMEM_ERROR_INVALID_ARGUMENT, "flags 0x%x: pin takes no flags yet (pass 0)", flags);
    const CallScope call("gpumem_pin");
    service().pin(start, size);
  });
}

GPUMEM_API gpumem_status_t gpumem_unpin(void* ptr, size_t size) {
  return guard([&] {
    const CallScope call("gpumem_unpin");
    service().unpin(checked_range(ptr, size), size);
  });
}

GPUMEM_API gpumem_status_t gpumem_pin_query(const void* ptr, size_t size, int32_t* out_state) {
  return guard([&] {
    gpumem::require_out(out_state, "out_state");
    *out_state = GPUMEM_PIN_NONE;
    const uintptr_t start = checked_range(ptr, size);
    switch (service().query(start, size)) {
      case gpumem::pin::State::full:
        *out_state = GPUMEM_PIN_FULL;
        break;
      case gpumem::pin::State::partial:
        *out_state = GPUMEM_PIN_PARTIAL;
        break;
      case gpumem::pin::State::none:
        break;
    }
  });
}

GPUMEM_API gpumem_status_t gpumem_pin_forget(void* ptr, size_t size) {
  return guard([&] {
    const CallScope call("gpumem_pin_forget");
    service().forget(checked_range(ptr, size), size);
  });
}

GPUMEM_API gpumem_status_t gpumem_pin_cache_flush(void) {
  return guard([&] {
    const CallScope call("gpumem_pin_cache_flush");
    service().flush();
  });
}

GPUMEM_API gpumem_status_t gpumem_pin_cache_set_budget(uint64_t bytes) {
  return guard([&] {
    const CallScope call("gpumem_pin_cache_set_budget");
    service().set_budget(bytes);
  });
}

GPUMEM_API gpumem_status_t gpumem_pin_get_stats(gpumem_pin_stats_t* out_stats) {
  return guard([&] {
    gpumem::capi::fill_struct(out_stats, "out_stats", [&](gpumem_pin_stats_t& out) {
      const gpumem::pin::Stats s = service().stats();
      out.bytes_registered = s.registered;
      out.bytes_pinned = s.pinned;
      out.bytes_cached = s.cached;
      out.registrations = s.registrations;
      out.pins = s.pins;
      out.unpins = s.unpins;
      out.hits = s.hits;
      out.misses = s.misses;
      out.evictions = s.evictions;
      out.cache_budget = s.budget;
    });
  });
}

}  // extern "C"
