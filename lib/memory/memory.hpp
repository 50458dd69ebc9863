// Raw memory of every kind, copies and memsets, and pointer attributes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "driver/driver.hpp"
#include "gpumem/array.h"
#include "gpumem/memory.h"
#include "gpumem/pointer.h"

namespace gpumem::memory {

// What the driver knows about an address.
struct PointerInfo {
  int32_t memory_type = GPUMEM_MEMORY_UNREGISTERED;
  int32_t device = -1;
  bool managed = false;
  void* host = nullptr;
  uintptr_t base = 0;
  size_t size = 0;
  CUcontext context = nullptr;
};

PointerInfo pointer_info(const void* p);
// The address through which the device reaches p; NULL if it cannot.
void* device_address(const void* p, const PointerInfo& info);
// "device memory on device 0", "managed memory", ... for error details.
std::string describe_kind(const PointerInfo& info);
// The context to work on memory in: the allocation's, else the current one.
CUcontext context_of(const PointerInfo& info);
// The context for work on memory queued on a stream: the stream's, else the memory's.
CUcontext context_for(CUstream stream, const PointerInfo& info);
// Whether the driver may return from a synchronous copy into this memory before the copy has
// landed: it has then to be waited for. A copy into host memory has ended when the driver returns.
inline bool copy_lands_later(const PointerInfo& dst) {
  return dst.memory_type == GPUMEM_MEMORY_DEVICE || dst.memory_type == GPUMEM_MEMORY_MANAGED;
}
// Throws GPUMEM_ERROR_INVALID_POINTER if [p, p + size) runs past the end of its allocation.
void require_within_allocation(const void* p, size_t size, const PointerInfo& info, const char* role);

// Who a raw call serves, for the capture check it makes before it reaches the driver
// (driver::refuse_during_capture): the public function, named in the detail, and a stream the
// caller was given, whose capture is seen even on a non-blocking stream. Without fn there is no
// check: the caller has made it, or decides otherwise. The synchronous calls check in every case;
// the stream-ordered ones only on the legacy stream, which a capture on a blocking stream ties up.
struct Caller {
  const char* fn = nullptr;
  CUstream stream = nullptr;
};
inline void refuse_during_capture(const Caller& caller, const char* work, const char* instead,
                                  std::initializer_list<CUcontext> contexts = {}) {
  if (caller.fn) driver::refuse_during_capture(caller.fn, work, instead, contexts, caller.stream);
}

void* device_alloc(int device, size_t size, Caller caller = {});
void device_free(void* p, Caller caller = {});
void* device_alloc_async(int device, size_t size, CUstream stream, Caller caller = {});
void* device_alloc_from_pool(CUmemoryPool pool, size_t size, CUstream stream, Caller caller = {});
void device_free_async(void* p, CUstream stream, Caller caller = {});

void* host_alloc(size_t size, unsigned flags, Caller caller = {});
void host_free(void* p, Caller caller = {});
void host_register(void* p, size_t size, unsigned flags, Caller caller = {});
void host_unregister(void* p, Caller caller = {});
void* host_device_pointer(void* p);

void* managed_alloc(int device, size_t size, unsigned flags, Caller caller = {});
void managed_free(void* p, Caller caller = {});
void managed_prefetch(void* p, size_t size, int location, CUstream stream, Caller caller = {});
void managed_advise(void* p, size_t size, int advice, int location);
void managed_range_info(const void* p, size_t size, gpumem_managed_range_info_t& out);

// A null stream with async == false is the synchronous form. Both check for a capture first, as
// gpumem_memset() / gpumem_copy() (or their _async forms on the legacy stream), which they serve.
void memset(void* dst, uint32_t value, unsigned element_size, size_t count, CUstream stream, bool async);
void copy(void* dst, const void* src, size_t size, CUstream stream, bool async);

// One side of a 2D or 3D copy, as the caller described it (gpumem_copy2d_t / gpumem_copy3d_t).
struct CopySide {
  const char* role;  // "dst" or "src", for messages
  const void* ptr;
  const gpumem_array_s* array;
  size_t x, y, z, pitch, height;
};
struct CopyRegion {
  CopySide dst, src;
  size_t width, height, depth;
  int rank;  // 2 or 3: what the caller called, for messages
};
// Checks for a capture as gpumem_copy2d() or gpumem_copy3d() (by rank), or their _async forms.
void copy3d(CopyRegion region, CUstream stream, bool async);

// The synchronous forms queue on the legacy stream and wait for it: cuMemcpy between two device
// addresses, cuMemset and kernels return before the work is done.
void wait_legacy_stream(const char* what);

// Enables peer access between two devices in both directions on first call for the pair; true if
// each can reach the other's memory. Copies work either way (the driver stages them otherwise).
bool ensure_peer_access(int a, int b);

// Memory as the rows of a 3D region: row y of slice z starts at at + y * pitch + z * slice.
struct RowsAt {
  char* at;
  size_t pitch, slice;
};

// Copies between device memory and plain host memory through gpumem's staging buffers, in the
// current context: height rows of width bytes in each of depth slices (1D: one row). False, having
// done nothing, when the copy is better left to the driver (small, a capturing stream, all staging
// buffers busy).
bool staged_copy(RowsAt dst, RowsAt src, size_t width, size_t height, size_t depth, bool to_device, CUstream stream,
                 bool async);
size_t staging_held();
// Refused as gpumem_copy_staging_release() during a capture, when it holds buffers to free.
void staging_release();

}  // namespace gpumem::memory
