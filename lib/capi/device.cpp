// Driver and device queries at the C boundary.
#include "driver/device.hpp"

#include "capi/guard.hpp"
#include "driver/driver.hpp"

using gpumem::capi::guard;

extern "C" {

GPUMEM_API gpumem_status_t gpumem_driver_get_version(int32_t* out_version) {
  return guard([&] {
    gpumem::require_out(out_version, "out_version");
    *out_version = 0;
    *out_version = gpumem::driver::driver_version();
  });
}

GPUMEM_API gpumem_status_t gpumem_device_get_count(int32_t* out_count) {
  return guard([&] {
    gpumem::require_out(out_count, "out_count");
    *out_count = 0;
    *out_count = gpumem::driver::device_count();
  });
}

GPUMEM_API gpumem_status_t gpumem_device_get_info(int32_t device, gpumem_device_info_t* out_info) {
  return guard([&] {
    gpumem::capi::fill_struct(out_info, "out_info",
                              [&](gpumem_device_info_t& info) { gpumem::driver::device_info(device, info); });
  });
}

GPUMEM_API gpumem_status_t gpumem_device_query_memory(int32_t device, size_t* out_free, size_t* out_total) {
  return guard([&] {
    if (out_free) *out_free = 0;
    if (out_total) *out_total = 0;
    gpumem::require(out_free || out_total, "out_free and out_total are both NULL");
    size_t free = 0, total = 0;
    gpumem::driver::device_memory(device, free, total);
    if (out_free) *out_free = free;
    if (out_total) *out_total = total;
  });
}

GPUMEM_API gpumem_status_t gpumem_stream_wait(gpumem_stream_t stream, gpumem_stream_t producer) {
  return guard([&] {
    if (stream == producer) return;
    namespace driver = gpumem::driver;
    const CUcontext own = driver::stream_context(producer);
    const CUcontext context = own ? own : driver::stream_context(stream);
    driver::ContextScope scope(context ? context : driver::current_context());
    CUevent event = nullptr;
    driver::check(driver::api().cuEventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    // Destroying the event at once is allowed: the wait already queued keeps what it waits for.
    const CUresult recorded = driver::api().cuEventRecord(event, producer);
    const CUresult waited = recorded == CUDA_SUCCESS ? driver::api().cuStreamWaitEvent(stream, event, 0) : recorded;
    driver::api().cuEventDestroy(event);
    driver::check(recorded, "cuEventRecord on the producer stream");
    driver::check(waited, "cuStreamWaitEvent of the waiting stream");
  });
}

}  // extern "C"
