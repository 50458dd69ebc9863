/* gpumem's pool as PyTorch's CUDA allocator, loaded with
 *
 *     torch.cuda.memory.CUDAPluggableAllocator(path, "gpumem_bench_torch_malloc", "gpumem_bench_torch_free")
 *
 * One pool per device, made on first use, over the upstream that GPUMEM_TORCH_UPSTREAM names:
 * "vm" (the default: virtual memory, so the pool's segments grow in place) or "device"
 * (cuMemAlloc). gpumem_bench_torch_stats() reads the pool's statistics for ctypes. bench/torch_dropin.py
 * compares it with PyTorch's own allocator; bench/README.md says what it measures. */
#define _POSIX_C_SOURCE 200809L

#include <gpumem/gpumem.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define EXPORT __attribute__((visibility("default")))

/* More devices than one host has; a device beyond it is refused, not written past. */
#define MAX_DEVICES 64

static gpumem_allocator_t* pools[MAX_DEVICES];
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;

/* PyTorch has no way to hear why an allocation failed (a NULL is all it gets), so the reason goes
 * to stderr, where the failing run's log keeps it. */
static void report(const char* what, int device, gpumem_status_t status) {
  fprintf(stderr, "gpumem_torch_allocator: %s on device %d: %s: %s\n", what, device, gpumem_status_name(status),
          gpumem_last_error_detail());
}

/* The upstream GPUMEM_TORCH_UPSTREAM names; false, with a message, for a name it does not know. */
static bool create_upstream(int device, gpumem_allocator_t** out_upstream) {
  const char* name = getenv("GPUMEM_TORCH_UPSTREAM");
  gpumem_status_t status;
  if (name == NULL || name[0] == '\0' || strcmp(name, "vm") == 0) {
    gpumem_vm_params_t params = GPUMEM_VM_PARAMS_INIT;
    params.device = device;
    status = gpumem_allocator_create_vm(&params, out_upstream);
  } else if (strcmp(name, "device") == 0) {
    status = gpumem_allocator_create_device(device, out_upstream);
  } else {
    fprintf(stderr, "gpumem_torch_allocator: GPUMEM_TORCH_UPSTREAM is \"%s\"; it must be \"vm\" or \"device\"\n", name);
    return false;
  }
  if (status != GPUMEM_SUCCESS) report("creating the upstream allocator", device, status);
  return status == GPUMEM_SUCCESS;
}

/* The pool of a device, made by the first caller; NULL if it cannot be made (the next call tries
 * again). The pools live as long as the process: PyTorch frees tensors during interpreter
 * shutdown, after any point where the module could destroy them. */
static gpumem_allocator_t* pool_of(int device) {
  if (device < 0 || device >= MAX_DEVICES) {
    fprintf(stderr, "gpumem_torch_allocator: device %d is beyond the %d this module serves\n", device, MAX_DEVICES);
    return NULL;
  }
  /* The acquire pairs with the release below: a pool seen here is fully made. */
  gpumem_allocator_t* pool = __atomic_load_n(&pools[device], __ATOMIC_ACQUIRE);
  if (pool != NULL) return pool;
  pthread_mutex_lock(&pools_lock);
  pool = pools[device];
  gpumem_allocator_t* upstream = NULL;
  if (pool == NULL && create_upstream(device, &upstream)) {
    gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
    params.upstream = upstream;
    const gpumem_status_t status = gpumem_pool_create(&params, &pool);
    if (status == GPUMEM_SUCCESS) {
      __atomic_store_n(&pools[device], pool, __ATOMIC_RELEASE);
    } else {
      report("creating the pool", device, status);
      gpumem_allocator_destroy(upstream);
    }
  }
  pthread_mutex_unlock(&pools_lock);
  return pool;
}

/* PyTorch's allocation: the stream is its cudaStream_t, which gpumem_stream_t represents alike.
 * NULL on failure. Thread-safe: any thread, concurrently. */
EXPORT void* gpumem_bench_torch_malloc(ssize_t size, int device, void* stream) {
  gpumem_allocator_t* pool = pool_of(device);
  if (pool == NULL || size < 0) return NULL;
  /* PyTorch asks for 0 bytes for an empty tensor. gpumem refuses a size of 0 and NULL means
   * failure here, so an empty tensor gets the pool's smallest block (512 B). */
  void* ptr = NULL;
  const gpumem_status_t status = gpumem_alloc(pool, size > 0 ? (size_t)size : 1, (gpumem_stream_t)stream, &ptr);
  if (status != GPUMEM_SUCCESS) {
    report("allocating", device, status);
    return NULL;
  }
  return ptr;
}

/* PyTorch's free, on the stream the memory was allocated on. Thread-safe: any thread, concurrently. */
EXPORT void gpumem_bench_torch_free(void* ptr, ssize_t size, int device, void* stream) {
  (void)size;
  if (ptr == NULL) return;
  gpumem_allocator_t* pool = pool_of(device);
  if (pool == NULL) return;
  const gpumem_status_t status = gpumem_free(pool, ptr, (gpumem_stream_t)stream);
  if (status != GPUMEM_SUCCESS) report("freeing", device, status);
}

/* The pool's peaks of bytes reserved from its upstream and of bytes in use, for ctypes. Returns
 * 0, or a gpumem status: GPUMEM_ERROR_INVALID_ARGUMENT for a NULL output or a device out of
 * range, GPUMEM_ERROR_INVALID_HANDLE for a device on which nothing was allocated yet.
 * Thread-safe: any thread, concurrently. */
EXPORT int gpumem_bench_torch_stats(int device, uint64_t* peak_reserved, uint64_t* peak_in_use) {
  if (peak_reserved == NULL || peak_in_use == NULL || device < 0 || device >= MAX_DEVICES)
    return GPUMEM_ERROR_INVALID_ARGUMENT;
  gpumem_allocator_t* pool = __atomic_load_n(&pools[device], __ATOMIC_ACQUIRE);
  if (pool == NULL) return GPUMEM_ERROR_INVALID_HANDLE;
  gpumem_allocator_stats_t stats;
  memset(&stats, 0, sizeof stats);
  stats.struct_size = sizeof stats;
  const gpumem_status_t status = gpumem_allocator_get_stats(pool, &stats);
  if (status != GPUMEM_SUCCESS) return status;
  *peak_reserved = stats.peak_bytes_reserved;
  *peak_in_use = stats.peak_bytes_in_use;
  return GPUMEM_SUCCESS;
}
