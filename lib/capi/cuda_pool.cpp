// CUDA-pool allocators and peer access at the C boundary.
#include "alloc/cuda_pool.hpp"
#include "capi/guard.hpp"

using gpumem::fail;
using gpumem::require_out;
using gpumem::alloc::Allocator;
using gpumem::alloc::CudaPoolAllocator;
using gpumem::capi::guard;

namespace {

CudaPoolAllocator* cuda_pool_from(gpumem_allocator_t* handle) {
  Allocator* a = Allocator::from(handle);
  auto* allocator = dynamic_cast<CudaPoolAllocator*>(a);
  if (!allocator)
    fail(GPUMEM_ERROR_INVALID_HANDLE,
         "%p is a %s allocator, not a CUDA pool allocator (from gpumem_allocator_create_cuda_pool); for a pool "
         "over one, pass its upstream",
         static_cast<void*>(handle), a->kind());
  return allocator;
}

}  // namespace

extern "C" {

GPUMEM_API gpumem_status_t gpumem_cuda_pool_params_init(gpumem_cuda_pool_params_t* params, size_t struct_size) {
  return guard([&] { gpumem::capi::init_struct(params, "params", struct_size); });
}

GPUMEM_API gpumem_status_t gpumem_allocator_create_cuda_pool(const gpumem_cuda_pool_params_t* params,
                                                             gpumem_allocator_t** out_allocator) {
  return guard([&] {
    require_out(out_allocator, "out_allocator");
    *out_allocator = nullptr;
    *out_allocator = gpumem::alloc::make_cuda_pool(gpumem::capi::in_struct(params, "params"));
  });
}

GPUMEM_API gpumem_status_t gpumem_cuda_pool_get(gpumem_allocator_t* allocator, gpumem_cuda_pool_t* out_pool) {
  return guard([&] {
    require_out(out_pool, "out_pool");
    *out_pool = nullptr;
    *out_pool = cuda_pool_from(allocator)->pool();
  });
}

GPUMEM_API gpumem_status_t gpumem_cuda_pool_trim(gpumem_allocator_t* allocator, uint64_t keep_bytes) {
  return guard([&] { cuda_pool_from(allocator)->trim(keep_bytes); });
}

GPUMEM_API gpumem_status_t gpumem_cuda_pool_set_release_threshold(gpumem_allocator_t* allocator, uint64_t bytes) {
  return guard([&] { cuda_pool_from(allocator)->set_release_threshold(bytes); });
}

GPUMEM_API gpumem_status_t gpumem_cuda_pool_get_info(gpumem_allocator_t* allocator, gpumem_cuda_pool_info_t* out_info) {
  return guard([&] {
    gpumem::capi::fill_struct(out_info, "out_info", [&](gpumem_cuda_pool_info_t& out) {
      const gpumem_cuda_pool_info_t info = cuda_pool_from(allocator)->info();
      out.reserved = info.reserved;
      out.reserved_high = info.reserved_high;
      out.used = info.used;
      out.used_high = info.used_high;
      out.release_threshold = info.release_threshold;
    });
  });
}

GPUMEM_API gpumem_status_t gpumem_cuda_pool_reset_peaks(gpumem_allocator_t* allocator) {
  return guard([&] { cuda_pool_from(allocator)->reset_pool_peaks(); });
}

GPUMEM_API gpumem_status_t gpumem_allocator_set_peer_access(gpumem_allocator_t* allocator, int32_t peer_device,
                                                            uint32_t access) {
  return guard([&] {
    Allocator* a = Allocator::from(allocator);
    if (access != GPUMEM_PEER_ACCESS_NONE && access != GPUMEM_PEER_ACCESS_READ_WRITE)
      fail(GPUMEM_ERROR_INVALID_ARGUMENT,
           "access %u is not GPUMEM_PEER_ACCESS_NONE (0) or GPUMEM_PEER_ACCESS_READ_WRITE (1)", access);
    if (peer_device < 0)
      fail(GPUMEM_ERROR_INVALID_DEVICE, "peer_device is %d; devices are numbered from 0", peer_device);
    a->set_peer_access(peer_device, access == GPUMEM_PEER_ACCESS_READ_WRITE);
  });
}

}  // extern "C"
