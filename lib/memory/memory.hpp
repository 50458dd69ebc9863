// Raw memory of every kind, copies and memsets, and pointer attributes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "driver/driver.hpp"
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
// Throws GPUMEM_ERROR_INVALID_POINTER if [p, p + size) runs past the end of its allocation.
void require_within_allocation(const void* p, size_t size, const PointerInfo& info, const char* role);

void* device_alloc(int device, size_t size);
void device_free(void* p);
void* device_alloc_async(int device, size_t size, CUstream stream);
void* device_alloc_from_pool(CUmemoryPool pool, size_t size, CUstream stream);
void device_free_async(void* p, CUstream stream);

void* host_alloc(size_t size, unsigned flags);
void host_free(void* p);
void host_register(void* p, size_t size, unsigned flags);
void host_unregister(void* p);
void* host_device_pointer(void* p);

void* managed_alloc(int device, size_t size, unsigned flags);
void managed_free(void* p);
void managed_prefetch(void* p, size_t size, int location, CUstream stream);
void managed_advise(void* p, size_t size, int advice, int location);
void managed_range_info(const void* p, size_t size, gpumem_managed_range_info_t& out);

// A null stream with async == false is the synchronous form.
void memset(void* dst, uint32_t value, unsigned element_size, size_t count, CUstream stream, bool async);
void copy(void* dst, const void* src, size_t size, CUstream stream, bool async);

}  // namespace gpumem::memory
