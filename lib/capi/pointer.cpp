// Pointer attributes at the C boundary.
#include "capi/guard.hpp"
#include "memory/memory.hpp"

extern "C" {

GPUMEM_API gpumem_status_t gpumem_pointer_get_info(const void* ptr, gpumem_pointer_info_t* out_info) {
  return gpumem::capi::guard([&] {
    gpumem::capi::fill_struct(out_info, "out_info", [&](gpumem_pointer_info_t& out) {
      const gpumem::memory::PointerInfo info = gpumem::memory::pointer_info(ptr);
      out.memory_type = info.memory_type;
      out.device = info.device;
      out.is_managed = info.managed;
      out.is_pinned = info.memory_type == GPUMEM_MEMORY_HOST;
      // The host reaches its own plain memory at the address itself.
      out.host_ptr = info.memory_type == GPUMEM_MEMORY_UNREGISTERED ? const_cast<void*>(ptr) : info.host;
      out.device_ptr = gpumem::memory::device_address(ptr, info);
      out.base = reinterpret_cast<void*>(info.base);
      out.size = info.size;
    });
  });
}

}  // extern "C"
