// Memset and copies at the C boundary.
#include "capi/guard.hpp"
#include "memory/memory.hpp"

using gpumem::capi::guard;
namespace memory = gpumem::memory;

extern "C" {

GPUMEM_API gpumem_status_t gpumem_memset(void* dst, uint32_t value, uint32_t element_size, size_t count) {
  return guard([&] { memory::memset(dst, value, element_size, count, nullptr, false); });
}

GPUMEM_API gpumem_status_t gpumem_memset_async(void* dst, uint32_t value, uint32_t element_size, size_t count,
                                               gpumem_stream_t stream) {
  return guard([&] { memory::memset(dst, value, element_size, count, stream, true); });
}

GPUMEM_API gpumem_status_t gpumem_copy(void* dst, const void* src, size_t size) {
  return guard([&] { memory::copy(dst, src, size, nullptr, false); });
}

GPUMEM_API gpumem_status_t gpumem_copy_async(void* dst, const void* src, size_t size, gpumem_stream_t stream) {
  return guard([&] { memory::copy(dst, src, size, stream, true); });
}

}  // extern "C"
