// Trace recording at the C boundary.
#include "gpumem/trace.h"
#include "alloc/defaults.hpp"
#include "capi/guard.hpp"

using gpumem::fail;
using gpumem::require;
using gpumem::require_out;
using gpumem::alloc::Allocator;
using gpumem::capi::guard;
using gpumem::trace::Recorder;

GPUMEM_API gpumem_status_t gpumem_trace_start(gpumem_allocator_t* allocator, const char* path, uint32_t flags,
                                              gpumem_trace_t** out_trace) {
  return guard([&] {
    require_out(out_trace, "out_trace");
    *out_trace = nullptr;
    require(path != nullptr, "path is NULL");
    if (flags != 0) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "flags is 0x%x; no flag is defined yet: pass 0", flags);
    Recorder* r = gpumem::alloc::resolve(allocator)->start_trace(path);
    *out_trace = reinterpret_cast<gpumem_trace_t*>(r);
  });
}

GPUMEM_API gpumem_status_t gpumem_trace_stop(gpumem_trace_t* trace) {
  return guard([&] {
    auto* r = reinterpret_cast<Recorder*>(trace);
    if (!r || r->magic != Recorder::kLive)
      fail(GPUMEM_ERROR_INVALID_HANDLE, "%p is not a trace being recorded (stopped already, or never started)",
           static_cast<void*>(trace));
    r->magic = 0;
    static_cast<Allocator*>(r->owner)->stop_trace(r);
  });
}
