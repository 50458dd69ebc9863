// Allocation and free of each raw kind, straight to the driver.
#include <vector>

#include "memory/memory.hpp"

namespace gpumem::memory {
namespace {

constexpr unsigned kHostAllocFlags =
    GPUMEM_HOST_ALLOC_PORTABLE | GPUMEM_HOST_ALLOC_DEVICEMAP | GPUMEM_HOST_ALLOC_WRITECOMBINED;
constexpr unsigned kHostRegisterFlags = GPUMEM_HOST_REGISTER_PORTABLE | GPUMEM_HOST_REGISTER_DEVICEMAP |
                                        GPUMEM_HOST_REGISTER_IOMEMORY | GPUMEM_HOST_REGISTER_READ_ONLY;

CUdeviceptr address(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

// Stream-ordered work on the legacy stream, which a capture on a blocking stream ties up.
constexpr const char* kLegacyWork = "work queued on the legacy stream";
constexpr const char* kLegacyInstead = "queue it on the capturing stream, or on a stream of your own";

int device_of(CUcontext ctx) {
  driver::ContextScope scope(ctx);
  CUdevice dev = 0;
  driver::check(driver::api().cuCtxGetDevice(&dev), "cuCtxGetDevice");
  return dev;
}

// Device out-of-memory details say how much the device had.
[[noreturn]] void throw_alloc_failure(CUresult r, const char* call, size_t size, int device) {
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    size_t free = 0, total = 0;
    const std::string where = device >= 0 ? format(" on device %d", device) : "";
    const std::string held = driver::api().cuMemGetInfo(&free, &total) == CUDA_SUCCESS
                                 ? format("; %s of %s bytes free", grouped(free).c_str(), grouped(total).c_str())
                                 : "";
    throw Error(GPUMEM_ERROR_OUT_OF_MEMORY,
                format("out of memory allocating %s%s (%s%s)", bytes(size).c_str(), where.c_str(), call, held.c_str()),
                r);
  }
  driver::throw_result(r, format("%s of %s bytes", call, grouped(size).c_str()));
}

// The checks every free makes: the pointer is the start of an allocation of the expected kind.
PointerInfo check_allocation_start(void* p, int32_t expected_type, const char* fn) {
  const PointerInfo info = pointer_info(p);
  if (info.memory_type != expected_type) {
    PointerInfo want;
    want.memory_type = expected_type;
    want.device = info.device;
    fail(GPUMEM_ERROR_INVALID_POINTER, "%s: %p is %s, not %s", fn, p, describe_kind(info).c_str(),
         expected_type == GPUMEM_MEMORY_DEVICE ? "device memory" : describe_kind(want).c_str());
  }
  if (info.base != reinterpret_cast<uintptr_t>(p))
    fail(GPUMEM_ERROR_INVALID_POINTER, "%s: %p lies %s inside the allocation at %p (%s); pass its start", fn, p,
         bytes(reinterpret_cast<uintptr_t>(p) - info.base).c_str(), reinterpret_cast<void*>(info.base),
         bytes(info.size).c_str());
  return info;
}

// A failed free of a pointer that passed the checks. The driver refuses what it does not know as
// this kind of allocation: that is an invalid pointer, explained by the hint.
void check_free(CUresult r, const char* call, void* p, const char* hint) {
  if (r == CUDA_SUCCESS) return;
  if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
    throw Error(GPUMEM_ERROR_INVALID_POINTER, format("%s(%p) refused it: %s", call, p, hint), r);
  driver::throw_result(r, format("%s(%p)", call, p));
}

CUmemLocation location_of(int location) {
  CUmemLocation loc{};
  if (location == GPUMEM_LOCATION_HOST) {
    loc.type = CU_MEM_LOCATION_TYPE_HOST;
  } else {
    loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = location;
  }
  return loc;
}

// Checked in two steps so that bad arguments are refused before the driver is asked anything.
void require_location_value(int location) {
  if (location < 0 && location != GPUMEM_LOCATION_HOST)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "location %d is neither a device nor GPUMEM_LOCATION_HOST", location);
}
void require_location_present(int location) {
  if (location != GPUMEM_LOCATION_HOST) driver::require_device(location);
}

void require_range_arguments(const void* p, size_t size) {
  require(p != nullptr, "ptr is NULL");
  require(size != 0, "size is 0");
  if (reinterpret_cast<uintptr_t>(p) + size < reinterpret_cast<uintptr_t>(p))
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "the range %p + %s bytes wraps around the address space", p,
         grouped(size).c_str());
}

PointerInfo require_managed_range(const void* p, size_t size, const char* fn) {
  require_range_arguments(p, size);
  PointerInfo info = pointer_info(p);
  if (info.memory_type != GPUMEM_MEMORY_MANAGED)
    fail(GPUMEM_ERROR_INVALID_POINTER, "%s: %p is %s, not managed memory", fn, p, describe_kind(info).c_str());
  require_within_allocation(p, size, info, "the");
  return info;
}

}  // namespace

void* device_alloc(int device, size_t size, Caller caller) {
  const driver::Api& a = driver::device_api();
  driver::ContextScope scope(driver::primary_context(device));
  refuse_during_capture(caller, "allocating device memory synchronously (cuMemAlloc)",
                        "allocate before the capture begins or after it ends, or with gpumem_device_alloc_async on "
                        "the capturing stream");
  CUdeviceptr p = 0;
  const CUresult r = a.cuMemAlloc(&p, size);
  if (r != CUDA_SUCCESS) throw_alloc_failure(r, "cuMemAlloc", size, device);
  return reinterpret_cast<void*>(p);
}

void device_free(void* p, Caller caller) {
  driver::unless_shut_down([&] {
    const PointerInfo info = check_allocation_start(p, GPUMEM_MEMORY_DEVICE, "gpumem_device_free");
    driver::ContextScope scope(context_of(info));
    refuse_during_capture(caller, "freeing device memory synchronously (cuMemFree)",
                          "free it after the capture ends, or with gpumem_device_free_async on the capturing stream");
    check_free(driver::api().cuMemFree(address(p)), "cuMemFree", p, "not an allocation of gpumem_device_alloc");
  });
}

void* device_alloc_async(int device, size_t size, CUstream stream, Caller caller) {
  const driver::Api& a = driver::device_api();
  const CUcontext primary = driver::primary_context(device);
  CUcontext ctx = driver::stream_context(stream);
  if (!ctx) ctx = primary;
  if (ctx != primary) {
    const int stream_device = device_of(ctx);
    if (stream_device != device)
      fail(GPUMEM_ERROR_INVALID_ARGUMENT, "the stream belongs to device %d, not device %d", stream_device, device);
  }
  driver::ContextScope scope(ctx);
  if (driver::is_legacy_stream(stream)) refuse_during_capture(caller, kLegacyWork, kLegacyInstead);
  CUdeviceptr p = 0;
  const CUresult r = a.cuMemAllocAsync(&p, size, stream);
  if (r != CUDA_SUCCESS) throw_alloc_failure(r, "cuMemAllocAsync", size, device);
  return reinterpret_cast<void*>(p);
}

void* device_alloc_from_pool(CUmemoryPool pool, size_t size, CUstream stream, Caller caller) {
  const driver::Api& a = driver::device_api();
  CUcontext ctx = driver::stream_context(stream);
  driver::ContextScope scope(ctx ? ctx : driver::current_context());
  if (driver::is_legacy_stream(stream)) refuse_during_capture(caller, kLegacyWork, kLegacyInstead);
  CUdeviceptr p = 0;
  const CUresult r = a.cuMemAllocFromPoolAsync(&p, size, pool, stream);
  if (r != CUDA_SUCCESS) throw_alloc_failure(r, "cuMemAllocFromPoolAsync", size, -1);
  return reinterpret_cast<void*>(p);
}

void device_free_async(void* p, CUstream stream, Caller caller) {
  driver::unless_shut_down([&] {
    const PointerInfo info = check_allocation_start(p, GPUMEM_MEMORY_DEVICE, "gpumem_device_free_async");
    driver::ContextScope scope(context_for(stream, info));
    if (driver::is_legacy_stream(stream)) refuse_during_capture(caller, kLegacyWork, kLegacyInstead);
    check_free(driver::api().cuMemFreeAsync(address(p), stream), "cuMemFreeAsync", p, "not a device allocation");
  });
}

void* host_alloc(size_t size, unsigned flags, Caller caller) {
  if (flags & ~kHostAllocFlags)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "unknown host allocation flags 0x%x", flags & ~kHostAllocFlags);
  const driver::Api& a = driver::device_api();
  driver::ContextScope scope(driver::current_context());
  refuse_during_capture(caller, "allocating page-locked host memory (cuMemHostAlloc)",
                        "allocate before the capture begins or after it ends");
  void* p = nullptr;
  const CUresult r = a.cuMemHostAlloc(&p, size, flags);
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    throw Error(
        GPUMEM_ERROR_OUT_OF_MEMORY,
        format("out of memory allocating %s bytes of pinned host memory (cuMemHostAlloc)", grouped(size).c_str()), r);
  if (r != CUDA_SUCCESS)
    driver::throw_result(r, format("cuMemHostAlloc of %s bytes, flags 0x%x", grouped(size).c_str(), flags));
  return p;
}

void host_free(void* p, Caller caller) {
  driver::unless_shut_down([&] {
    const PointerInfo info = check_allocation_start(p, GPUMEM_MEMORY_HOST, "gpumem_host_free");
    driver::ContextScope scope(context_of(info));
    refuse_during_capture(caller, "freeing page-locked host memory (cuMemFreeHost)", "free it after the capture ends");
    check_free(driver::api().cuMemFreeHost(p), "cuMemFreeHost", p,
               "not a pinned allocation; a registered range is released with gpumem_host_unregister");
  });
}

void host_register(void* p, size_t size, unsigned flags, Caller caller) {
  if (flags & ~kHostRegisterFlags)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "unknown host register flags 0x%x", flags & ~kHostRegisterFlags);
  require_range_arguments(p, size);
  // The driver says only "invalid value" for ranges that overlap pinned allocations.
  for (const char* end : {static_cast<const char*>(p), static_cast<const char*>(p) + size - 1}) {
    const PointerInfo info = pointer_info(end);
    if (info.memory_type == GPUMEM_MEMORY_HOST)
      fail(GPUMEM_ERROR_ALREADY_REGISTERED, "%p + %s overlaps page-locked memory at %p (%s)", p, bytes(size).c_str(),
           reinterpret_cast<void*>(info.base), bytes(info.size).c_str());
    if (info.memory_type != GPUMEM_MEMORY_UNREGISTERED)
      fail(GPUMEM_ERROR_INVALID_POINTER, "%p + %s overlaps %s at %p; only host memory can be registered", p,
           bytes(size).c_str(), describe_kind(info).c_str(), reinterpret_cast<void*>(info.base));
  }
  const driver::Api& a = driver::device_api();
  driver::ContextScope scope(driver::current_context());
  refuse_during_capture(caller, "page-locking host memory (cuMemHostRegister)",
                        "register it before the capture begins or after it ends");
  const CUresult r = a.cuMemHostRegister(p, size, flags);
  if (r != CUDA_SUCCESS)
    driver::throw_result(r, format("cuMemHostRegister(%p, %s bytes, flags 0x%x)", p, grouped(size).c_str(), flags));
}

namespace {
void host_unregister_now(void* p, const Caller& caller) {
  const PointerInfo info = pointer_info(p);
  if (info.memory_type != GPUMEM_MEMORY_HOST)
    fail(GPUMEM_ERROR_INVALID_POINTER, "gpumem_host_unregister: %p is %s, not a registered host range", p,
         describe_kind(info).c_str());
  if (info.base != reinterpret_cast<uintptr_t>(p))
    fail(GPUMEM_ERROR_INVALID_POINTER,
         "gpumem_host_unregister: %p lies %s inside the page-locked range at %p; pass its start", p,
         bytes(reinterpret_cast<uintptr_t>(p) - info.base).c_str(), reinterpret_cast<void*>(info.base));
  driver::ContextScope scope(context_of(info));
  refuse_during_capture(caller, "unregistering host memory (cuMemHostUnregister)",
                        "unregister it after the capture ends");
  const CUresult r = driver::api().cuMemHostUnregister(p);
  if (r == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED || r == CUDA_ERROR_INVALID_VALUE)
    throw Error(GPUMEM_ERROR_INVALID_POINTER,
                format("gpumem_host_unregister: %p is a pinned allocation, not a registered range; free it with "
                       "gpumem_host_free",
                       p),
                r);
  driver::check(r, "cuMemHostUnregister");
}
}  // namespace

void host_unregister(void* p, Caller caller) {
  driver::unless_shut_down([&] { host_unregister_now(p, caller); });
}

void* host_device_pointer(void* p) {
  PointerInfo info = pointer_info(p);
  if (info.memory_type != GPUMEM_MEMORY_HOST)
    fail(GPUMEM_ERROR_INVALID_POINTER, "%p is %s, not page-locked host memory", p, describe_kind(info).c_str());
  driver::ContextScope scope(context_of(info));
  CUdeviceptr d = 0;
  const CUresult r = driver::api().cuMemHostGetDevicePointer(&d, p, 0);
  if (r == CUDA_ERROR_INVALID_VALUE)
    throw Error(GPUMEM_ERROR_INVALID_POINTER,
                format("%p is page-locked host memory that is not mapped for the device", p), r);
  driver::check(r, "cuMemHostGetDevicePointer");
  return reinterpret_cast<void*>(d);
}

void* managed_alloc(int device, size_t size, unsigned flags, Caller caller) {
  if (flags == 0) flags = GPUMEM_MANAGED_ATTACH_GLOBAL;
  if (flags != GPUMEM_MANAGED_ATTACH_GLOBAL && flags != GPUMEM_MANAGED_ATTACH_HOST)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT,
         "managed flags 0x%x: pass 0, GPUMEM_MANAGED_ATTACH_GLOBAL or GPUMEM_MANAGED_ATTACH_HOST", flags);
  const driver::Api& a = driver::device_api();
  driver::ContextScope scope(driver::primary_context(device));
  refuse_during_capture(caller, "allocating managed memory (cuMemAllocManaged)",
                        "allocate before the capture begins or after it ends");
  CUdeviceptr p = 0;
  const CUresult r = a.cuMemAllocManaged(&p, size, flags);
  if (r != CUDA_SUCCESS) throw_alloc_failure(r, "cuMemAllocManaged", size, device);
  return reinterpret_cast<void*>(p);
}

void managed_free(void* p, Caller caller) {
  driver::unless_shut_down([&] {
    const PointerInfo info = check_allocation_start(p, GPUMEM_MEMORY_MANAGED, "gpumem_managed_free");
    driver::ContextScope scope(context_of(info));
    refuse_during_capture(caller, "freeing managed memory (cuMemFree)", "free it after the capture ends");
    check_free(driver::api().cuMemFree(address(p)), "cuMemFree", p, "not a managed allocation");
  });
}

void managed_prefetch(void* p, size_t size, int location, CUstream stream, Caller caller) {
  require_range_arguments(p, size);
  require_location_value(location);
  require_location_present(location);
  const PointerInfo info = require_managed_range(p, size, "gpumem_managed_prefetch");
  const driver::Api& a = driver::api();
  if (!a.cuMemPrefetchAsync) fail(GPUMEM_ERROR_NOT_SUPPORTED, "prefetch needs a CUDA 12.2 or newer driver");
  if (location != GPUMEM_LOCATION_HOST) {
    // The driver answers "invalid device" here, for a device that exists.
    int concurrent = 0;
    driver::check(a.cuDeviceGetAttribute(&concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, location),
                  "cuDeviceGetAttribute(concurrent managed access)");
    if (!concurrent)
      fail(GPUMEM_ERROR_NOT_SUPPORTED, "device %d has no concurrent managed access, which prefetching needs", location);
  }
  driver::ContextScope scope(context_for(stream, info));
  if (driver::is_legacy_stream(stream)) refuse_during_capture(caller, kLegacyWork, kLegacyInstead);
  const CUresult r = a.cuMemPrefetchAsync(address(p), size, location_of(location), 0, stream);
  if (r != CUDA_SUCCESS)
    driver::throw_result(r, format("cuMemPrefetchAsync(%p, %s bytes, to %s %d)", p, grouped(size).c_str(),
                                   location == GPUMEM_LOCATION_HOST ? "host" : "device", location));
}

void managed_advise(void* p, size_t size, int advice, int location) {
  if (advice < GPUMEM_ADVICE_SET_READ_MOSTLY || advice > GPUMEM_ADVICE_UNSET_ACCESSED_BY)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "unknown advice %d (expected 1 to 6, GPUMEM_ADVICE_*)", advice);
  const bool takes_location = advice != GPUMEM_ADVICE_SET_READ_MOSTLY && advice != GPUMEM_ADVICE_UNSET_READ_MOSTLY;
  require_range_arguments(p, size);
  if (takes_location) require_location_value(location);
  if ((advice == GPUMEM_ADVICE_SET_ACCESSED_BY || advice == GPUMEM_ADVICE_UNSET_ACCESSED_BY) &&
      location == GPUMEM_LOCATION_HOST)
    fail(GPUMEM_ERROR_INVALID_ARGUMENT, "accessed-by advice takes a device, not GPUMEM_LOCATION_HOST");
  if (takes_location) require_location_present(location);
  const PointerInfo info = require_managed_range(p, size, "gpumem_managed_advise");
  const driver::Api& a = driver::api();
  if (!a.cuMemAdvise) fail(GPUMEM_ERROR_NOT_SUPPORTED, "advice needs a CUDA 12.2 or newer driver");
  driver::ContextScope scope(context_of(info));
  // Measured on the H200: the driver refuses advice during a global-mode capture and ends the
  // capture, so gpumem refuses first.
  driver::refuse_during_capture("gpumem_managed_advise", "giving advice on managed memory (cuMemAdvise)",
                                "give the advice before the capture begins or after it ends");
  const CUmemLocation loc = takes_location ? location_of(location) : location_of(info.device);
  const CUresult r = a.cuMemAdvise(address(p), size, static_cast<CUmem_advise>(advice), loc);
  if (r != CUDA_SUCCESS)
    driver::throw_result(
        r, format("cuMemAdvise(%p, %s bytes, advice %d, location %d)", p, grouped(size).c_str(), advice, location));
}

void managed_range_info(const void* p, size_t size, gpumem_managed_range_info_t& out) {
  const PointerInfo info = require_managed_range(p, size, "gpumem_managed_get_range_info");
  const int count = driver::device_count();
  int read_mostly = 0, preferred = CU_DEVICE_INVALID, last_prefetch = CU_DEVICE_INVALID;
  std::vector<int> accessed_by(static_cast<size_t>(count), CU_DEVICE_INVALID);
  void* data[] = {&read_mostly, &preferred, &last_prefetch, accessed_by.data()};
  size_t sizes[] = {sizeof read_mostly, sizeof preferred, sizeof last_prefetch, sizeof(int) * accessed_by.size()};
  CUmem_range_attribute attrs[] = {CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
                                   CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY};
  driver::ContextScope scope(context_of(info));
  driver::check(driver::api().cuMemRangeGetAttributes(data, sizes, attrs, 4, address(p), size),
                "cuMemRangeGetAttributes");
  out.read_mostly = read_mostly != 0;
  out.preferred_location = preferred;
  out.last_prefetch_location = last_prefetch;
  out.accessed_by = 0;
  for (int d : accessed_by)
    if (d >= 0 && d < 64) out.accessed_by |= uint64_t{1} << d;
}

}  // namespace gpumem::memory
