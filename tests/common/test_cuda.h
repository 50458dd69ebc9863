/* Test-only access to a few driver calls gpumem does not offer (streams, captures, the default
 * memory pool), opened at run time as the library does: the driver GPUMEM_CUDA_DRIVER names (the
 * fake driver of tests/driver, which has the stream and capture calls too), else libcuda.so.1. For
 * GPU tests, after require_gpu(), and for tests over the fake. */
#ifndef GPUMEM_TEST_CUDA_H
#define GPUMEM_TEST_CUDA_H

#include <dlfcn.h>
#include <stdlib.h>

#include "test_util.h"

typedef int (*test_cu_fn_ctx_retain)(void** ctx, int dev);
typedef int (*test_cu_fn_ctx)(void* ctx);
typedef int (*test_cu_fn_ctx_pop)(void** ctx);
typedef int (*test_cu_fn_stream_create)(gpumem_stream_t* s, unsigned flags);
typedef int (*test_cu_fn_stream)(gpumem_stream_t s);
typedef int (*test_cu_fn_pool)(gpumem_cuda_pool_t* pool, int dev);

static inline void* test_cu_symbol(const char* name) {
  static void* lib = NULL;
  if (!lib) {
    const char* driver = getenv("GPUMEM_CUDA_DRIVER");
    lib = dlopen(driver && *driver ? driver : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  }
  assert_non_null(lib);
  void* fn = dlsym(lib, name);
  assert_non_null(fn);
  return fn;
}

/* Runs with device's primary context current, as gpumem does; returns what to pass to test_cu_pop. */
static inline void test_cu_push(int device) {
  void* ctx = NULL;
  assert_int_equal(((test_cu_fn_ctx_retain)test_cu_symbol("cuDevicePrimaryCtxRetain"))(&ctx, device), 0);
  assert_int_equal(((test_cu_fn_ctx)test_cu_symbol("cuCtxPushCurrent_v2"))(ctx), 0);
}

static inline void test_cu_pop(void) {
  void* ctx = NULL;
  assert_int_equal(((test_cu_fn_ctx_pop)test_cu_symbol("cuCtxPopCurrent_v2"))(&ctx), 0);
}

/* A non-blocking stream on a device, as a caller of gpumem would bring. */
static inline gpumem_stream_t test_stream_create(int device) {
  gpumem_stream_t s = NULL;
  test_cu_push(device);
  assert_int_equal(((test_cu_fn_stream_create)test_cu_symbol("cuStreamCreate"))(&s, 1 /* CU_STREAM_NON_BLOCKING */), 0);
  test_cu_pop();
  return s;
}

static inline void test_stream_sync(gpumem_stream_t s) {
  assert_int_equal(((test_cu_fn_stream)test_cu_symbol("cuStreamSynchronize"))(s), 0);
}

static inline void test_stream_destroy(gpumem_stream_t s) {
  assert_int_equal(((test_cu_fn_stream)test_cu_symbol("cuStreamDestroy_v2"))(s), 0);
}

/* The device's default CUDA memory pool (cuDeviceGetDefaultMemPool). */
static inline gpumem_cuda_pool_t test_default_pool(int device) {
  gpumem_cuda_pool_t pool = NULL;
  assert_int_equal(((test_cu_fn_pool)test_cu_symbol("cuDeviceGetDefaultMemPool"))(&pool, device), 0);
  return pool;
}

#endif /* GPUMEM_TEST_CUDA_H */
