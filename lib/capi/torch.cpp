// PyTorch's pluggable allocator at the C boundary: gpumem_alloc() and gpumem_free() on the
// device's default allocator, with PyTorch's signatures, so a NULL or nothing is all they answer.
#include "gpumem/torch.h"
#include "alloc/defaults.hpp"
#include "capi/guard.hpp"

using gpumem::fail;
using gpumem::alloc::Allocator;
using gpumem::capi::guard;

namespace {

// The default of the device PyTorch names, not of the thread's current context: PyTorch's free
// may run on a thread whose current device is another.
Allocator* default_of(int32_t device) {
  if (device < 0) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "device is %d; devices are numbered from 0", device);
  return gpumem::alloc::get_default(device);
}

}  // namespace

extern "C" {

GPUMEM_API void* gpumem_torch_alloc(ptrdiff_t size, int32_t device, gpumem_stream_t stream) {
  void* ptr = nullptr;
  guard([&] {
    if (size < 0) fail(GPUMEM_ERROR_INVALID_ARGUMENT, "size is %td; PyTorch asks for 0 bytes or more", size);
    // PyTorch asks for 0 bytes for an empty tensor and takes NULL as a failure, while gpumem
    // refuses a size of 0: an empty tensor gets the smallest block.
    ptr = default_of(device)->allocate(size > 0 ? static_cast<size_t>(size) : 1, stream);
  });
  return ptr;
}

GPUMEM_API void gpumem_torch_free(void* ptr, ptrdiff_t size, int32_t device, gpumem_stream_t stream) {
  (void)size;
  // The status has nowhere to go: the guard leaves its detail for gpumem_last_error_detail().
  (void)guard([&] {
    if (ptr) default_of(device)->deallocate(ptr, stream);
  });
}

}  // extern "C"
