/* The fixture the pool suites share: a pool over the plain host allocator, whose own statistics
 * show exactly what the pool holds from it. Include after test_util.h. */
#ifndef GPUMEM_POOL_FIXTURE_H
#define GPUMEM_POOL_FIXTURE_H

#define KIB ((size_t)1024)
#define MIB (1024 * KIB)

#define STREAM_A ((gpumem_stream_t)(uintptr_t)0x1000)
#define STREAM_B ((gpumem_stream_t)(uintptr_t)0x2000)

struct fixture {
  gpumem_allocator_t* host;
  gpumem_allocator_t* pool;
};

static inline int setup(void** state) {
  static struct fixture f;
  f.host = NULL;
  f.pool = NULL;
  if (gpumem_allocator_create_host(0, &f.host) != GPUMEM_SUCCESS) return -1;
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = f.host;
  if (gpumem_pool_create(&params, &f.pool) != GPUMEM_SUCCESS) return -1;
  *state = &f;
  return 0;
}

/* Fails the test if the host allocator cannot be destroyed: something still relies on it. */
static inline int teardown(void** state) {
  struct fixture* f = *state;
  if (f->pool && gpumem_allocator_destroy_force(f->pool) != GPUMEM_SUCCESS) return -1;
  f->pool = NULL;
  if (gpumem_allocator_destroy(f->host) != GPUMEM_SUCCESS) {
    print_error("destroying the host upstream: %s\n", gpumem_last_error_detail());
    return -1;
  }
  return 0;
}

static inline void* alloc_ok(gpumem_allocator_t* pool, size_t size, gpumem_stream_t stream) {
  void* p = NULL;
  assert_ok(gpumem_alloc(pool, size, stream, &p));
  assert_non_null(p);
  return p;
}

#endif /* GPUMEM_POOL_FIXTURE_H */
