// The experimental tier at the C boundary (gpumem/experimental.h).
#include "gpumem/experimental.h"
#include "capi/guard.hpp"
#include "capi/structs.hpp"
#include "core/handle.hpp"
#include "defaults/defaults.hpp"
#include "memory/host_copy.hpp"
#include "memory/memory.hpp"
#include "pin/service.hpp"
#include "pool/pool.hpp"

extern "C" {

GPUMEM_API gpumem_status_t gpumem_shutdown(void) {
  return gpumem::capi::guard([&] {
    const int64_t live = gpumem::live_handles().load(std::memory_order_acquire);
    if (live > 0)
      gpumem::fail(GPUMEM_ERROR_BUSY,
                   "%lld handles the caller made are live (allocators, pools, arrays, recordings, trace readers); "
                   "destroy them first",
                   static_cast<long long>(live));
    if (!gpumem::memory::stop_host_copier())
      gpumem::fail(GPUMEM_ERROR_BUSY, "a host copy is running on another thread");
    gpumem::memory::staging_release();
    gpumem::alloc::release_device_pools();
    if (gpumem::pin::PinMap* pins = gpumem::pin::started_service()) pins->flush();
  });
}

GPUMEM_API gpumem_status_t gpumem_last_out_of_memory(gpumem_out_of_memory_info_t* out_info) {
  return gpumem::capi::guard([&] {
    gpumem::capi::fill_struct(out_info, "out_info", [&](gpumem_out_of_memory_info_t& out) {
      out = gpumem::pool::last_out_of_memory();  // fill_struct keeps the caller's struct_size
    });
  });
}

}  // extern "C"
