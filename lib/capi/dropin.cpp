// Other libraries' allocator entry points at the C boundary: PyTorch's pluggable allocator and
// CuPy's C-function allocator. They are gpumem_alloc() and gpumem_free() with those libraries'
// signatures, so a NULL or nothing is all they answer.
#include "capi/guard.hpp"
#include "capi/torch_errors.hpp"
#include "defaults/defaults.hpp"
#include "gpumem/cupy.h"
#include "gpumem/torch.h"
#include "pool/pool.hpp"
#include "pool/tenant.hpp"

#include <algorithm>
#include <array>
#include <atomic>

#include "driver/driver.hpp"

using gpumem::fail;
using gpumem::alloc::Allocator;
using gpumem::capi::guard;

namespace {

// The default of the device the caller names, not of the thread's current context: PyTorch and
// CuPy free on whichever thread drops the memory, whose current device may be another.
// Counted, as a NULL allocator is: a default replaced meanwhile is not destroyed under the call.
gpumem::alloc::Resolved default_of(int32_t device) {
  if (device < 0) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "device is %d; devices are numbered from 0", device);
  return gpumem::alloc::default_for(device);
}

// gpumem_torch_set_allocator()'s choice for each device; NULL: the device's default.
constexpr int kTorchDevices = 64;
std::array<std::atomic<Allocator*>, kTorchDevices> torch_allocators{};

gpumem::alloc::Resolved torch_allocator(int32_t device) {
  if (device >= 0 && device < kTorchDevices)
    if (Allocator* a = torch_allocators[device].load(std::memory_order_acquire)) return gpumem::alloc::Resolved(a);
  return default_of(device);
}

gpumem_cupy_target_t target_of(const void* target) {
  return gpumem::capi::in_struct(static_cast<const gpumem_cupy_target_t*>(target), "target");
}

gpumem::alloc::Resolved allocator_of(const gpumem_cupy_target_t& target, int32_t device) {
  return target.allocator ? gpumem::alloc::Resolved(Allocator::from(target.allocator)) : default_of(device);
}

void* torch_alloc(ptrdiff_t size, int32_t device, gpumem_stream_t stream, gpumem_status_t& status) {
  void* ptr = nullptr;
  status = guard([&] {
    if (size < 0) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "size is %td; PyTorch asks for 0 bytes or more", size);
    // PyTorch asks for 0 bytes for an empty tensor and takes NULL as a failure, while gpumem
    // refuses a size of 0: an empty tensor gets the smallest block.
    ptr = torch_allocator(device)->allocate(size > 0 ? static_cast<size_t>(size) : 1, stream);
  });
  return ptr;
}

}  // namespace

extern "C" {

GPUMEM_API void* gpumem_torch_alloc(ptrdiff_t size, int32_t device, gpumem_stream_t stream) {
  gpumem_status_t status;
  return torch_alloc(size, device, stream, status);
}

GPUMEM_API void* gpumem_torch_alloc_raising(ptrdiff_t size, int32_t device, gpumem_stream_t stream) {
  gpumem_status_t status;
  void* ptr = torch_alloc(size, device, stream, status);
  if (!ptr) gpumem::capi::throw_as_torch(status, gpumem::last_error_detail());
  return ptr;
}

GPUMEM_API void gpumem_torch_free(void* ptr, ptrdiff_t size, int32_t device, gpumem_stream_t stream) {
  (void)size;
  // The status has nowhere to go: the guard leaves its detail for gpumem_last_error_detail().
  (void)guard([&] {
    if (ptr) gpumem::pool::Pool::free_from_caller(torch_allocator(device), ptr, stream);
  });
}

GPUMEM_API gpumem_status_t gpumem_torch_set_allocator(int32_t device, gpumem_allocator_t* allocator) {
  return guard([&] {
    if (device < 0 || device >= kTorchDevices)
      fail(GPUMEM_ERROR_INVALID_ARGUMENT, "device is %d; PyTorch's devices here are 0 to %d", device,
           kTorchDevices - 1);
    Allocator* a = allocator ? Allocator::from(allocator) : nullptr;
    if (a) a->retain();
    if (Allocator* old = torch_allocators[device].exchange(a, std::memory_order_acq_rel)) old->unretain();
  });
}

GPUMEM_API void gpumem_torch_record_stream(void* ptr, gpumem_stream_t stream) {
  (void)guard([&] {
    if (!ptr) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "ptr is NULL");
    // PyTorch names no device: the one whose allocator holds the memory.
    const int n = std::min(gpumem::driver::device_count(), kTorchDevices);
    for (int d = 0; d < n; ++d) {
      const gpumem::alloc::Resolved resolved = torch_allocator(d);
      Allocator* a = resolved;
      const bool held = dynamic_cast<gpumem::pool::Tenant*>(a) ? static_cast<gpumem::pool::Tenant*>(a)->holds(ptr)
                        : dynamic_cast<gpumem::pool::Pool*>(a) ? static_cast<gpumem::pool::Pool*>(a)->holds(ptr)
                                                               : false;
      if (held) return gpumem::pool::record_stream(a, ptr, stream);
    }
    fail(GPUMEM_ERROR_NOT_OWNED, "%p is not memory of gpumem_torch_alloc on any device", ptr);
  });
}

GPUMEM_API void* gpumem_cupy_alloc(void* target, size_t size, int32_t device) {
  void* ptr = nullptr;
  guard([&] {
    const gpumem_cupy_target_t t = target_of(target);
    if (size == 0) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "size is 0");
    ptr = allocator_of(t, device)->allocate(size, t.stream);
  });
  return ptr;
}

GPUMEM_API void gpumem_cupy_free(void* target, void* ptr, int32_t device) {
  (void)guard([&] {
    const gpumem_cupy_target_t t = target_of(target);
    if (ptr) gpumem::pool::Pool::free_from_caller(allocator_of(t, device), ptr, t.stream);
  });
}

}  // extern "C"
