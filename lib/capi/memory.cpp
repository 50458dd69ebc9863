// Raw memory of every kind at the C boundary.
#include "memory/memory.hpp"
#include "pin/service.hpp"

#include "capi/guard.hpp"

using gpumem::require;
using gpumem::require_out;
using gpumem::capi::guard;
namespace memory = gpumem::memory;

namespace {
// The checks every allocation makes before it reaches the driver; clears the output first.
void start_alloc(void** out_ptr, size_t size) {
  require_out(out_ptr, "out_ptr");
  *out_ptr = nullptr;
  require(size != 0, "size is 0");
}
}  // namespace

extern "C" {

GPUMEM_API gpumem_status_t gpumem_device_alloc(int32_t device, size_t size, void** out_ptr) {
  return guard([&] {
    start_alloc(out_ptr, size);
    *out_ptr = memory::device_alloc(device, size, {"gpumem_device_alloc"});
  });
}

GPUMEM_API gpumem_status_t gpumem_device_free(void* ptr) {
  return guard([&] {
    if (ptr) memory::device_free(ptr, {"gpumem_device_free"});
  });
}

GPUMEM_API gpumem_status_t gpumem_device_alloc_async(int32_t device, size_t size, gpumem_stream_t stream,
                                                     void** out_ptr) {
  return guard([&] {
    start_alloc(out_ptr, size);
    *out_ptr = memory::device_alloc_async(device, size, stream, {"gpumem_device_alloc_async"});
  });
}

GPUMEM_API gpumem_status_t gpumem_device_alloc_from_pool(gpumem_cuda_pool_t pool, size_t size, gpumem_stream_t stream,
                                                         void** out_ptr) {
  return guard([&] {
    start_alloc(out_ptr, size);
    require(pool != nullptr, "pool is NULL");
    *out_ptr = memory::device_alloc_from_pool(pool, size, stream, {"gpumem_device_alloc_from_pool"});
  });
}

GPUMEM_API gpumem_status_t gpumem_device_free_async(void* ptr, gpumem_stream_t stream) {
  return guard([&] {
    if (ptr) memory::device_free_async(ptr, stream, {"gpumem_device_free_async"});
  });
}

GPUMEM_API gpumem_status_t gpumem_host_alloc(size_t size, uint32_t flags, void** out_ptr) {
  return guard([&] {
    start_alloc(out_ptr, size);
    *out_ptr = memory::host_alloc(size, flags, {"gpumem_host_alloc"});
  });
}

GPUMEM_API gpumem_status_t gpumem_host_free(void* ptr) {
  return guard([&] {
    if (ptr) memory::host_free(ptr, {"gpumem_host_free"});
  });
}

GPUMEM_API gpumem_status_t gpumem_host_register(void* ptr, size_t size, uint32_t flags) {
  return guard([&] {
    require(ptr != nullptr, "ptr is NULL");
    require(size != 0, "size is 0");
    memory::host_register(ptr, size, flags, {"gpumem_host_register"});
  });
}

GPUMEM_API gpumem_status_t gpumem_host_unregister(void* ptr) {
  return guard([&] {
    require(ptr != nullptr, "ptr is NULL");
    // The pinning service's registrations are its own: they end through gpumem_unpin.
    if (gpumem::pin::PinMap* pins = gpumem::pin::started_service();
        pins && pins->registered_within(reinterpret_cast<uintptr_t>(ptr), 1))
      gpumem::fail(GPUMEM_ERROR_INVALID_POINTER,
                   "%p is registered by the pinning service; gpumem_unpin and gpumem_pin_forget release it", ptr);
    memory::host_unregister(ptr, {"gpumem_host_unregister"});
  });
}

GPUMEM_API gpumem_status_t gpumem_host_get_device_pointer(void* ptr, void** out_device_ptr) {
  return guard([&] {
    require_out(out_device_ptr, "out_device_ptr");
    *out_device_ptr = nullptr;
    require(ptr != nullptr, "ptr is NULL");
    *out_device_ptr = memory::host_device_pointer(ptr);
  });
}

GPUMEM_API gpumem_status_t gpumem_managed_alloc(int32_t device, size_t size, uint32_t flags, void** out_ptr) {
  return guard([&] {
    start_alloc(out_ptr, size);
    *out_ptr = memory::managed_alloc(device, size, flags, {"gpumem_managed_alloc"});
  });
}

GPUMEM_API gpumem_status_t gpumem_managed_free(void* ptr) {
  return guard([&] {
    if (ptr) memory::managed_free(ptr, {"gpumem_managed_free"});
  });
}

GPUMEM_API gpumem_status_t gpumem_managed_prefetch(void* ptr, size_t size, int32_t location, gpumem_stream_t stream) {
  return guard([&] { memory::managed_prefetch(ptr, size, location, stream, {"gpumem_managed_prefetch"}); });
}

GPUMEM_API gpumem_status_t gpumem_managed_advise(void* ptr, size_t size, int32_t advice, int32_t location) {
  return guard([&] { memory::managed_advise(ptr, size, advice, location); });
}

GPUMEM_API gpumem_status_t gpumem_managed_get_range_info(const void* ptr, size_t size,
                                                         gpumem_managed_range_info_t* out_info) {
  return guard([&] {
    gpumem::capi::fill_struct(out_info, "out_info",
                              [&](gpumem_managed_range_info_t& info) { memory::managed_range_info(ptr, size, info); });
  });
}

}  // extern "C"
