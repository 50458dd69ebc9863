/* The allocator kinds the allocator suites run over, made one way everywhere. Include after
 * test_cuda.h. */
#ifndef GPUMEM_ALLOC_KINDS_H
#define GPUMEM_ALLOC_KINDS_H

#include <stdlib.h>

/* An allocator supplied by the caller, over malloc. */
static inline gpumem_status_t malloc_alloc(void* context, size_t size, int32_t device, gpumem_stream_t stream,
                                           void** out_ptr) {
  (void)context;
  (void)device;
  (void)stream;
  /* Refused here rather than by malloc: AddressSanitizer aborts on an impossible size instead of
   * returning NULL, and an impossible size is what the SIZE_MAX tests ask for. */
  if (size > ((size_t)1 << 40)) return GPUMEM_ERROR_OUT_OF_MEMORY;
  void* p = malloc(size);
  if (!p) return GPUMEM_ERROR_OUT_OF_MEMORY;
  *out_ptr = p;
  return GPUMEM_SUCCESS;
}

static inline gpumem_status_t malloc_free(void* context, void* ptr, size_t size, int32_t device,
                                          gpumem_stream_t stream) {
  (void)context;
  (void)size;
  (void)device;
  (void)stream;
  free(ptr);
  return GPUMEM_SUCCESS;
}

/* A caller's allocator with the given alloc function and context, freeing with free(). */
static inline gpumem_status_t create_functions_with(gpumem_alloc_fn alloc, void* context, gpumem_allocator_t** out) {
  gpumem_allocator_functions_t f;
  memset(&f, 0, sizeof f);
  f.struct_size = sizeof f;
  f.context = context;
  f.device = -1;
  f.alloc = alloc;
  f.free = malloc_free;
  return gpumem_allocator_create_functions(&f, out);
}

static inline gpumem_status_t create_host(gpumem_allocator_t** out) { return gpumem_allocator_create_host(0, out); }
static inline gpumem_status_t create_functions(gpumem_allocator_t** out) {
  return create_functions_with(malloc_alloc, NULL, out);
}
static inline gpumem_status_t create_device(gpumem_allocator_t** out) { return gpumem_allocator_create_device(0, out); }
static inline gpumem_status_t create_device_async(gpumem_allocator_t** out) {
  return gpumem_allocator_create_device_async(0, NULL, out);
}
static inline gpumem_status_t create_device_async_default_pool(gpumem_allocator_t** out) {
  return gpumem_allocator_create_device_async(0, test_default_pool(0), out);
}
static inline gpumem_status_t create_managed(gpumem_allocator_t** out) {
  return gpumem_allocator_create_managed(0, GPUMEM_MANAGED_ATTACH_GLOBAL, out);
}
static inline gpumem_status_t create_pinned(gpumem_allocator_t** out) { return gpumem_allocator_create_pinned(0, out); }
/* A new CUDA pool with both properties set: a maximum size well above what the suites allocate,
 * and a release threshold that keeps some memory at a synchronize but not all. */
static inline gpumem_status_t create_cuda_pool_new(gpumem_allocator_t** out) {
  gpumem_cuda_pool_params_t params = GPUMEM_CUDA_POOL_PARAMS_INIT;
  params.source = GPUMEM_CUDA_POOL_NEW;
  params.max_size = (uint64_t)1 << 30;
  params.release_threshold = (uint64_t)64 << 20;
  return gpumem_allocator_create_cuda_pool(&params, out);
}
static inline gpumem_status_t create_cuda_pool_default(gpumem_allocator_t** out) {
  gpumem_cuda_pool_params_t params = GPUMEM_CUDA_POOL_PARAMS_INIT;
  params.source = GPUMEM_CUDA_POOL_DEFAULT;
  return gpumem_allocator_create_cuda_pool(&params, out);
}
/* Device memory mapped into reserved addresses, with the defaults: a pool over it maps 32 MiB at a
 * time (the granularity if larger) into ranges the size of the device's memory; direct allocations
 * are rounded to the granularity. */
static inline gpumem_status_t create_vm(gpumem_allocator_t** out) {
  const gpumem_vm_params_t params = GPUMEM_VM_PARAMS_INIT;
  return gpumem_allocator_create_vm(&params, out);
}

#endif /* GPUMEM_ALLOC_KINDS_H */
