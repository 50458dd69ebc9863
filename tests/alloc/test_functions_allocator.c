/* Allocators supplied by the caller as C functions (CuPy's CFunctionAllocator, with a stream):
 * what reaches the functions, the context's destroy callback, how their failures come back, and
 * how a pool over them releases and retries. Needs no GPU. */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdlib.h>

#include "test_util.h"

/* What the functions saw, and how they behave. */
typedef struct calls {
  int allocs, frees, destroys, sequence;
  int last_free_at, destroyed_at; /* sequence numbers, for order */
  void* alloc_context;
  size_t alloc_size;
  int32_t alloc_device;
  gpumem_stream_t alloc_stream;
  void* free_context;
  void* free_ptr;
  size_t free_size;
  int32_t free_device;
  gpumem_stream_t free_stream;
  void* destroy_context;

  gpumem_status_t alloc_result; /* returned instead of allocating, unless GPUMEM_SUCCESS */
  bool alloc_gives_null;        /* success with no memory */
  gpumem_status_t free_result;  /* returned instead of freeing, unless GPUMEM_SUCCESS */
  size_t capacity;              /* refuse with out-of-memory beyond this many bytes outstanding; 0: none */
  size_t outstanding;
} calls_t;

static gpumem_status_t counting_alloc(void* context, size_t size, int32_t device, gpumem_stream_t stream,
                                      void** out_ptr) {
  calls_t* c = context;
  c->allocs++;
  c->alloc_context = context;
  c->alloc_size = size;
  c->alloc_device = device;
  c->alloc_stream = stream;
  if (c->alloc_result != GPUMEM_SUCCESS) return c->alloc_result;
  if (c->alloc_gives_null) {
    *out_ptr = NULL;
    return GPUMEM_SUCCESS;
  }
  if (c->capacity && c->outstanding + size > c->capacity) return GPUMEM_ERROR_OUT_OF_MEMORY;
  void* p = malloc(size);
  if (!p) return GPUMEM_ERROR_OUT_OF_MEMORY;
  c->outstanding += size;
  *out_ptr = p;
  return GPUMEM_SUCCESS;
}

static gpumem_status_t counting_free(void* context, void* ptr, size_t size, int32_t device, gpumem_stream_t stream) {
  calls_t* c = context;
  c->frees++;
  c->last_free_at = ++c->sequence;
  c->free_context = context;
  c->free_ptr = ptr;
  c->free_size = size;
  c->free_device = device;
  c->free_stream = stream;
  if (c->free_result != GPUMEM_SUCCESS) return c->free_result;
  c->outstanding -= size;
  free(ptr);
  return GPUMEM_SUCCESS;
}

static void counting_destroy(void* context) {
  calls_t* c = context;
  c->destroys++;
  c->destroyed_at = ++c->sequence;
  c->destroy_context = context;
}

static gpumem_allocator_functions_t functions_for(calls_t* c, int32_t device) {
  gpumem_allocator_functions_t f;
  memset(&f, 0, sizeof f);
  f.struct_size = sizeof f;
  f.context = c;
  f.device = device;
  f.alloc = counting_alloc;
  f.free = counting_free;
  f.destroy = counting_destroy;
  return f;
}

static gpumem_allocator_t* create(calls_t* c, int32_t device) {
  const gpumem_allocator_functions_t f = functions_for(c, device);
  gpumem_allocator_t* a = (gpumem_allocator_t*)0x1;
  assert_ok(gpumem_allocator_create_functions(&f, &a));
  assert_non_null(a);
  return a;
}

static void test_functions_allocator_arguments_reach_functions(void** state) {
  (void)state;
  calls_t c;
  memset(&c, 0, sizeof c);
  /* Any device index is the caller's to choose; nothing checks it against a driver. */
  gpumem_allocator_functions_t f = functions_for(&c, 3);
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_allocator_create_functions(&f, &a));
  /* The functions were copied: changing the caller's struct changes nothing. */
  f.alloc = NULL;
  f.context = NULL;
  f.device = 7;

  int32_t device = 99;
  assert_ok(gpumem_allocator_get_device(a, &device));
  assert_int_equal(device, 3);

  const gpumem_stream_t alloc_stream = (gpumem_stream_t)0x1234;
  const gpumem_stream_t free_stream = (gpumem_stream_t)0x5678;
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 777, alloc_stream, &p));
  assert_non_null(p);
  memset(p, 0x3c, 777);
  assert_int_equal(c.allocs, 1);
  assert_ptr_equal(c.alloc_context, &c);
  assert_int_equal(c.alloc_size, 777);
  assert_int_equal(c.alloc_device, 3);
  assert_ptr_equal(c.alloc_stream, alloc_stream);
  const gpumem_allocator_stats_t s = stats_of(a);
  assert_int_equal(s.bytes_in_use, 777);
  assert_int_equal(s.bytes_requested, 777);
  assert_int_equal(s.bytes_reserved, 777);

  assert_ok(gpumem_free(a, p, free_stream));
  assert_int_equal(c.frees, 1);
  assert_ptr_equal(c.free_context, &c);
  assert_ptr_equal(c.free_ptr, p);
  assert_int_equal(c.free_size, 777); /* the size it was asked for */
  assert_int_equal(c.free_device, 3);
  assert_ptr_equal(c.free_stream, free_stream);
  assert_int_equal(c.outstanding, 0);
  assert_int_equal(c.destroys, 0);
  assert_ok(gpumem_allocator_destroy(a));
  assert_int_equal(c.destroys, 1);
}

static void test_functions_allocator_host_device(void** state) {
  (void)state;
  calls_t c;
  memset(&c, 0, sizeof c);
  gpumem_allocator_t* a = create(&c, -1);
  int32_t device = 99;
  assert_ok(gpumem_allocator_get_device(a, &device));
  assert_int_equal(device, -1);
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 10, NULL, &p));
  assert_int_equal(c.alloc_device, -1);
  assert_null(c.alloc_stream);
  assert_ok(gpumem_free(a, p, NULL));
  assert_int_equal(c.free_device, -1);
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_functions_allocator_destroy_callback_once(void** state) {
  (void)state;
  calls_t c;
  memset(&c, 0, sizeof c);
  gpumem_allocator_t* a = create(&c, -1);
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 100, NULL, &p));

  /* Refused destroys leave the context alone. */
  assert_status(gpumem_allocator_destroy(a), GPUMEM_ERROR_BUSY);
  assert_detail_contains("1 live allocation");
  assert_int_equal(c.destroys, 0);
  gpumem_allocator_t* pool = pool_over(a);
  assert_ok(gpumem_free(a, p, NULL));
  assert_status(gpumem_allocator_destroy(a), GPUMEM_ERROR_BUSY);
  assert_detail_contains("upstream of a pool");
  assert_status(gpumem_allocator_destroy_force(a), GPUMEM_ERROR_BUSY);
  assert_int_equal(c.destroys, 0);
  assert_ok(gpumem_allocator_destroy(pool));
  assert_int_equal(c.destroys, 0);

  assert_ok(gpumem_allocator_destroy(a));
  assert_int_equal(c.destroys, 1);
  assert_ptr_equal(c.destroy_context, &c);
}

static void test_functions_allocator_destroy_force_frees_then_destroys(void** state) {
  (void)state;
  calls_t c;
  memset(&c, 0, sizeof c);
  gpumem_allocator_t* a = create(&c, -1);
  void *p, *q;
  assert_ok(gpumem_alloc(a, 100, NULL, &p));
  assert_ok(gpumem_alloc(a, 200, NULL, &q));
  assert_ok(gpumem_allocator_destroy_force(a));
  /* Each live allocation went back through the free function, before the context went. */
  assert_int_equal(c.frees, 2);
  assert_int_equal(c.outstanding, 0);
  assert_int_equal(c.destroys, 1);
  assert_true(c.last_free_at < c.destroyed_at);
}

static void test_functions_allocator_no_destroy_callback(void** state) {
  (void)state;
  calls_t c;
  memset(&c, 0, sizeof c);
  gpumem_allocator_functions_t f = functions_for(&c, -1);
  f.destroy = NULL;
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_allocator_create_functions(&f, &a));
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 10, NULL, &p));
  assert_ok(gpumem_free(a, p, NULL));
  assert_ok(gpumem_allocator_destroy(a));
  assert_int_equal(c.destroys, 0);
}

static void test_functions_allocator_out_of_memory(void** state) {
  (void)state;
  calls_t c;
  memset(&c, 0, sizeof c);
  c.alloc_result = GPUMEM_ERROR_OUT_OF_MEMORY;
  gpumem_allocator_t* a = create(&c, -1);
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(a, 1000, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_detail_contains("the caller's alloc function returned GPUMEM_ERROR_OUT_OF_MEMORY");
  assert_detail_contains("1,000 bytes");
  assert_null(p);
  assert_int_equal(c.allocs, 1);
  const gpumem_allocator_stats_t s = stats_of(a);
  assert_int_equal(s.oom_count, 1);
  assert_int_equal(s.alloc_count, 0);
  assert_int_equal(s.bytes_in_use, 0);
  assert_int_equal(s.bytes_reserved, 0);
  /* Nothing is live, so it goes at once. */
  assert_ok(gpumem_allocator_destroy(a));
  assert_int_equal(c.destroys, 1);
}

static void test_functions_allocator_other_status_passes_through(void** state) {
  (void)state;
  static const gpumem_status_t statuses[] = {GPUMEM_ERROR_NOT_SUPPORTED, GPUMEM_ERROR_DRIVER,
                                             GPUMEM_ERROR_INVALID_ARGUMENT};
  for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++) {
    calls_t c;
    memset(&c, 0, sizeof c);
    c.alloc_result = statuses[i];
    gpumem_allocator_t* a = create(&c, -1);
    void* p = (void*)0x1;
    assert_status(gpumem_alloc(a, 64, NULL, &p), statuses[i]);
    assert_detail_contains("the caller's alloc function returned");
    assert_detail_contains(gpumem_status_name(statuses[i]));
    assert_null(p);
    const gpumem_allocator_stats_t s = stats_of(a);
    assert_int_equal(s.oom_count, 0);
    assert_int_equal(s.alloc_count, 0);
    assert_ok(gpumem_allocator_destroy(a));
  }
}

static void test_functions_allocator_success_without_memory(void** state) {
  (void)state;
  calls_t c;
  memset(&c, 0, sizeof c);
  c.alloc_gives_null = true;
  gpumem_allocator_t* a = create(&c, -1);
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(a, 64, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_detail_contains("returned success but no memory");
  assert_null(p);
  const gpumem_allocator_stats_t s = stats_of(a);
  assert_int_equal(s.alloc_count, 0);
  assert_int_equal(s.bytes_in_use, 0);
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_functions_allocator_free_failure_keeps_allocation(void** state) {
  (void)state;
  calls_t c;
  memset(&c, 0, sizeof c);
  gpumem_allocator_t* a = create(&c, -1);
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 1000, NULL, &p));
  memset(p, 0x6d, 1000);
  const gpumem_allocator_stats_t before = stats_of(a);

  c.free_result = GPUMEM_ERROR_DRIVER;
  assert_status(gpumem_free(a, p, NULL), GPUMEM_ERROR_DRIVER);
  assert_detail_contains("the caller's free function returned GPUMEM_ERROR_DRIVER");
  assert_int_equal(c.frees, 1);
  /* Still live, and still the allocator's. */
  const gpumem_allocator_stats_t after = stats_of(a);
  assert_int_equal(after.bytes_in_use, before.bytes_in_use);
  assert_int_equal(after.free_count, 0);
  assert_int_equal(after.upstream_free_count, 0);
  for (size_t i = 0; i < 1000; i++) assert_int_equal(((const uint8_t*)p)[i], 0x6d);
  assert_status(gpumem_allocator_destroy(a), GPUMEM_ERROR_BUSY);
  assert_detail_contains("1 live allocation (1,000 bytes)");

  c.free_result = GPUMEM_SUCCESS;
  assert_ok(gpumem_free(a, p, NULL));
  assert_int_equal(c.frees, 2);
  assert_int_equal(stats_of(a).bytes_in_use, 0);
  assert_int_equal(stats_of(a).free_count, 1);
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_functions_allocator_pool_release_failure_keeps_block(void** state) {
  (void)state;
  calls_t c;
  memset(&c, 0, sizeof c);
  gpumem_allocator_t* a = create(&c, -1);
  gpumem_allocator_t* pool = pool_over(a);
  void* p = NULL;
  assert_ok(gpumem_alloc(pool, 4096, NULL, &p));
  assert_ok(gpumem_free(pool, p, NULL));

  c.free_result = GPUMEM_ERROR_DRIVER;
  assert_status(gpumem_pool_release(pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS), GPUMEM_ERROR_DRIVER);
  assert_detail_contains("the caller's free function returned GPUMEM_ERROR_DRIVER");
  gpumem_pool_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  assert_ok(gpumem_pool_get_info(pool, &info));
  assert_int_equal(info.total_bytes, 4096);
  assert_int_equal(info.free_bytes, 4096);
  assert_int_equal(info.free_block_count, 1);
  assert_int_equal(stats_of(a).bytes_in_use, 4096);

  /* Still cached, so it serves the next allocation. */
  void* again = NULL;
  assert_ok(gpumem_alloc(pool, 4096, NULL, &again));
  assert_ptr_equal(again, p);
  assert_ok(gpumem_free(pool, again, NULL));

  c.free_result = GPUMEM_SUCCESS;
  assert_ok(gpumem_pool_release(pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  assert_ok(gpumem_pool_get_info(pool, &info));
  assert_int_equal(info.total_bytes, 0);
  assert_int_equal(stats_of(a).bytes_in_use, 0);
  assert_int_equal(c.outstanding, 0);
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(a));
}

/* No reclaim callback is registered in this process, so a pool retries once: after releasing. */
static void test_functions_allocator_pool_retries_after_release(void** state) {
  (void)state;
  calls_t c;
  memset(&c, 0, sizeof c);
  c.capacity = 8192;
  gpumem_allocator_t* a = create(&c, -1);
  gpumem_allocator_t* pool = pool_over(a);
  void* p = NULL;
  assert_ok(gpumem_alloc(pool, 4096, NULL, &p));
  assert_ok(gpumem_free(pool, p, NULL));
  assert_int_equal(c.outstanding, 4096); /* cached by the pool */

  /* 4096 cached + 8192 is over the capacity: refused, the cache released, then it fits. */
  void* big = NULL;
  assert_ok(gpumem_alloc(pool, 8192, NULL, &big));
  assert_non_null(big);
  assert_int_equal(c.allocs, 3);
  assert_int_equal(c.frees, 1);
  assert_ptr_equal(c.free_ptr, p);
  assert_int_equal(c.outstanding, 8192);
  const gpumem_allocator_stats_t s = stats_of(pool);
  assert_int_equal(s.retry_count, 1);
  assert_int_equal(s.oom_count, 0);
  assert_int_equal(s.alloc_count, 2);
  assert_int_equal(s.upstream_alloc_count, 2);
  assert_int_equal(s.upstream_free_count, 1);
  assert_int_equal(s.bytes_in_use, 8192);
  assert_int_equal(s.bytes_reserved, 8192);
  const gpumem_allocator_stats_t u = stats_of(a);
  assert_int_equal(u.oom_count, 1);
  assert_int_equal(u.alloc_count, 2);
  assert_int_equal(u.free_count, 1);

  assert_ok(gpumem_free(pool, big, NULL));
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(a));
  assert_int_equal(c.outstanding, 0);
}

static void test_functions_allocator_pool_fails_when_upstream_keeps_failing(void** state) {
  (void)state;
  calls_t c;
  memset(&c, 0, sizeof c);
  gpumem_allocator_t* a = create(&c, -1);
  gpumem_allocator_t* pool = pool_over(a);
  void* p = NULL;
  assert_ok(gpumem_alloc(pool, 4096, NULL, &p));
  assert_ok(gpumem_free(pool, p, NULL));
  assert_int_equal(c.allocs, 1);

  c.alloc_result = GPUMEM_ERROR_OUT_OF_MEMORY;
  void* big = (void*)0x1;
  assert_status(gpumem_alloc(pool, 8000, NULL, &big), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(big);
  assert_detail_contains("out of memory allocating 8,000 bytes (rounded to 8,192)");
  assert_detail_contains("the caller's alloc function returned GPUMEM_ERROR_OUT_OF_MEMORY");
  /* Tried, released the cached block, tried again. */
  assert_int_equal(c.allocs, 3);
  assert_int_equal(c.frees, 1);
  assert_int_equal(c.outstanding, 0);
  const gpumem_allocator_stats_t s = stats_of(pool);
  assert_int_equal(s.retry_count, 1);
  assert_int_equal(s.oom_count, 1);
  assert_int_equal(s.alloc_count, 1);
  assert_int_equal(s.bytes_in_use, 0);
  assert_int_equal(s.bytes_reserved, 0);
  assert_int_equal(s.upstream_free_count, 1);
  assert_int_equal(stats_of(a).oom_count, 2);

  /* Any other failure is not retried. */
  c.alloc_result = GPUMEM_ERROR_NOT_SUPPORTED;
  big = (void*)0x1;
  assert_status(gpumem_alloc(pool, 8000, NULL, &big), GPUMEM_ERROR_NOT_SUPPORTED);
  assert_detail_contains("the caller's alloc function returned GPUMEM_ERROR_NOT_SUPPORTED");
  assert_null(big);
  assert_int_equal(c.allocs, 4);
  assert_int_equal(stats_of(pool).retry_count, 1);
  assert_int_equal(stats_of(pool).oom_count, 1);

  /* It recovers when the upstream does. */
  c.alloc_result = GPUMEM_SUCCESS;
  assert_ok(gpumem_alloc(pool, 8000, NULL, &big));
  assert_ok(gpumem_free(pool, big, NULL));
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(a));
  assert_int_equal(c.outstanding, 0);
  assert_int_equal(c.destroys, 1);
}

static void test_functions_allocator_create_bad_input(void** state) {
  (void)state;
  calls_t c;
  memset(&c, 0, sizeof c);
  gpumem_allocator_t* a = (gpumem_allocator_t*)0x1;

  assert_status(gpumem_allocator_create_functions(NULL, &a), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("functions is NULL");
  assert_null(a);

  gpumem_allocator_functions_t f = functions_for(&c, -1);
  assert_status(gpumem_allocator_create_functions(&f, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_allocator is NULL");

  f = functions_for(&c, -1);
  f.alloc = NULL;
  a = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_allocator_create_functions(&f, &a), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("functions->alloc is NULL");
  assert_null(a);

  f = functions_for(&c, -1);
  f.free = NULL;
  a = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_allocator_create_functions(&f, &a), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("functions->free is NULL");
  assert_null(a);

  f = functions_for(&c, -1);
  f.struct_size = offsetof(gpumem_allocator_functions_t, reserve) - 1; /* below 0.1's size */
  a = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_allocator_create_functions(&f, &a), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("functions->struct_size is 47, less than gpumem_allocator_functions_t had in gpumem 0.1");
  assert_null(a);
  f.struct_size = 0;
  a = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_allocator_create_functions(&f, &a), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("functions->struct_size is 0");
  assert_null(a);

  f = functions_for(&c, -2);
  a = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_allocator_create_functions(&f, &a), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("neither a device nor -1");
  assert_null(a);

  /* A failed create does not take the context: it is not destroyed, nothing was called. */
  assert_int_equal(c.destroys, 0);
  assert_int_equal(c.allocs, 0);
}

static void test_functions_allocator_larger_struct_accepted(void** state) {
  (void)state;
  calls_t c;
  memset(&c, 0, sizeof c);
  /* From a newer gpumem whose struct has grown: the fields this one knows are read. */
  struct {
    gpumem_allocator_functions_t f;
    uint64_t newer[4];
  } grown;
  memset(&grown, 0, sizeof grown);
  grown.f = functions_for(&c, -1);
  grown.f.struct_size = sizeof grown;
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_allocator_create_functions(&grown.f, &a));
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 8, NULL, &p));
  assert_int_equal(c.allocs, 1);
  assert_ok(gpumem_free(a, p, NULL));
  assert_ok(gpumem_allocator_destroy(a));
  assert_int_equal(c.destroys, 1);
}

/* Address ranges from a reserve function that the caller got wrong: it hands out the starts it is
 * given, in turn (the last one again and again), whatever it handed out before. Mapping does
 * nothing: the test owns the memory behind the starts, or nobody touches it. */
typedef struct liar {
  uintptr_t starts[4];
  int count;
  int reserves, unreserves, maps, unmaps;
  void* unreserved; /* what the last unreserve was given */
} liar_t;

enum { kLiarUnit = 4096, kLiarRange = 64 << 10 };

static gpumem_status_t liar_reserve(void* context, size_t size, int32_t device, void** out_ptr) {
  liar_t* l = context;
  (void)device;
  assert_int_equal(size, kLiarRange);
  const int i = l->reserves < l->count ? l->reserves : l->count - 1;
  l->reserves++;
  *out_ptr = (void*)l->starts[i];
  return GPUMEM_SUCCESS;
}

static gpumem_status_t liar_unreserve(void* context, void* ptr, size_t size, int32_t device) {
  liar_t* l = context;
  (void)device;
  assert_int_equal(size, kLiarRange);
  l->unreserves++;
  l->unreserved = ptr;
  return GPUMEM_SUCCESS;
}

static gpumem_status_t liar_map(void* context, void* ptr, size_t size, int32_t device) {
  (void)ptr, (void)size, (void)device;
  ((liar_t*)context)->maps++;
  return GPUMEM_SUCCESS;
}

static gpumem_status_t liar_unmap(void* context, void* ptr, size_t size, int32_t device) {
  (void)ptr, (void)size, (void)device;
  ((liar_t*)context)->unmaps++;
  return GPUMEM_SUCCESS;
}

/* Whole allocations are never asked for: a pool over ranges grows in place. */
static gpumem_status_t liar_alloc(void* context, size_t size, int32_t device, gpumem_stream_t stream, void** out_ptr) {
  (void)context, (void)size, (void)device, (void)stream, (void)out_ptr;
  return GPUMEM_ERROR_OUT_OF_MEMORY;
}

static gpumem_status_t liar_free(void* context, void* ptr, size_t size, int32_t device, gpumem_stream_t stream) {
  (void)context, (void)ptr, (void)size, (void)device, (void)stream;
  return GPUMEM_ERROR_INVALID_ARGUMENT;
}

static gpumem_allocator_t* create_liar(liar_t* l) {
  gpumem_allocator_functions_t f;
  memset(&f, 0, sizeof f);
  f.struct_size = sizeof f;
  f.context = l;
  f.device = -1;
  f.alloc = liar_alloc;
  f.free = liar_free;
  f.reserve = liar_reserve;
  f.unreserve = liar_unreserve;
  f.map = liar_map;
  f.unmap = liar_unmap;
  f.map_unit = kLiarUnit;
  f.range_size = kLiarRange;
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_allocator_create_functions(&f, &a));
  return a;
}

static void assert_inside(const void* p, size_t size, uintptr_t base) {
  assert_true((uintptr_t)p >= base && (uintptr_t)p + size <= base + kLiarRange);
}

static void assert_apart(const void* p, const void* q, size_t size) {
  assert_true((uintptr_t)p + size <= (uintptr_t)q || (uintptr_t)q + size <= (uintptr_t)p);
}

static void assert_detail_has_pointer(const char* before, const void* p, const char* after) {
  char text[160];
  snprintf(text, sizeof text, "%s%p%s", before, p, after);
  assert_detail_contains(text);
}

/* The same range twice: the second is refused, whichever pool or stream asks, and kept by the
 * caller (unreserving it would release the one in use); nothing else changes. */
static void test_functions_allocator_reserve_same_range_twice_refused(void** state) {
  (void)state;
  liar_t l;
  memset(&l, 0, sizeof l);
  const uintptr_t base = 0x7e5500000000; /* never touched: mapping does nothing, nor does the pool write */
  l.starts[0] = base;
  l.count = 1;
  gpumem_allocator_t* a = create_liar(&l);
  gpumem_allocator_t* first = pool_over(a);
  gpumem_allocator_t* second = pool_over(a);

  void* p = NULL;
  assert_ok(gpumem_alloc(first, 1000, NULL, &p));
  assert_inside(p, 1000, base);
  assert_int_equal(l.reserves, 1);
  const gpumem_allocator_stats_t upstream_before = stats_of(a);
  const gpumem_pool_info_t first_before = pool_info_of(first);

  /* Another pool over the same functions. */
  void* q = (void*)0x1;
  assert_status(gpumem_alloc(second, 1000, NULL, &q), GPUMEM_ERROR_INTERNAL);
  assert_null(q);
  assert_detail_has_pointer("the caller's reserve function returned ", (void*)base, " for 65,536 bytes");
  assert_detail_has_pointer("overlaps the range of 65,536 bytes at ", (void*)base, " that it gave before");
  assert_detail_contains("not given back");
  assert_int_equal(l.reserves, 2);
  assert_int_equal(l.unreserves, 0);
  const gpumem_pool_info_t second_info = pool_info_of(second);
  assert_int_equal(second_info.total_bytes, 0);
  assert_int_equal(second_info.address_bytes, 0);

  /* Another stream of the same pool: an arena of its own, which reserves a range of its own. */
  const gpumem_stream_t other_stream = (gpumem_stream_t)0x5000;
  q = (void*)0x1;
  assert_status(gpumem_alloc(first, 1000, other_stream, &q), GPUMEM_ERROR_INTERNAL);
  assert_null(q);
  assert_detail_contains("overlaps the range of 65,536 bytes");
  assert_int_equal(l.unreserves, 0);

  /* Nothing else changed: the upstream's statistics, the first pool, which still serves its stream. */
  const gpumem_allocator_stats_t upstream_after = stats_of(a);
  assert_memory_equal(&upstream_after, &upstream_before, sizeof upstream_after);
  const gpumem_pool_info_t first_after = pool_info_of(first);
  assert_int_equal(first_after.used_bytes, first_before.used_bytes);
  assert_int_equal(first_after.total_bytes, first_before.total_bytes);
  assert_int_equal(first_after.address_bytes, first_before.address_bytes);
  void* r = NULL;
  assert_ok(gpumem_alloc(first, 1000, NULL, &r));
  assert_inside(r, 1000, base);
  assert_apart(p, r, 1000);

  /* Once the range is given back, the same start is a new range, and taken. */
  assert_ok(gpumem_free(first, p, NULL));
  assert_ok(gpumem_free(first, r, NULL));
  assert_ok(gpumem_pool_release(first, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  assert_int_equal(l.unreserves, 1);
  assert_ptr_equal(l.unreserved, (void*)base);
  assert_ok(gpumem_alloc(second, 1000, NULL, &q));
  assert_inside(q, 1000, base);
  assert_ok(gpumem_free(second, q, NULL));

  assert_ok(gpumem_allocator_destroy(second));
  assert_ok(gpumem_allocator_destroy(first));
  assert_ok(gpumem_allocator_destroy(a));
  assert_int_equal(l.unreserves, 2);
}

/* A range that overlaps one held without starting at the same address, from either side. */
static void test_functions_allocator_reserve_overlapping_range_refused(void** state) {
  (void)state;
  liar_t l;
  memset(&l, 0, sizeof l);
  const uintptr_t base = 0x7e5600000000;
  l.starts[0] = base;
  l.starts[1] = base + kLiarRange - kLiarUnit; /* its first unit is the held range's last */
  l.starts[2] = base - kLiarRange + kLiarUnit; /* its last unit is the held range's first */
  l.starts[3] = base + kLiarRange;             /* right after: apart, and taken */
  l.count = 4;
  gpumem_allocator_t* a = create_liar(&l);
  gpumem_allocator_t* pool = pool_over(a);
  void* p[4] = {NULL, NULL, NULL, NULL};
  assert_ok(gpumem_alloc(pool, 1000, (gpumem_stream_t)0x10, &p[0]));
  assert_status(gpumem_alloc(pool, 1000, (gpumem_stream_t)0x20, &p[1]), GPUMEM_ERROR_INTERNAL);
  assert_detail_has_pointer("overlaps the range of 65,536 bytes at ", (void*)base, "");
  assert_status(gpumem_alloc(pool, 1000, (gpumem_stream_t)0x30, &p[2]), GPUMEM_ERROR_INTERNAL);
  assert_detail_has_pointer("overlaps the range of 65,536 bytes at ", (void*)base, "");
  assert_ok(gpumem_alloc(pool, 1000, (gpumem_stream_t)0x40, &p[3]));
  assert_inside(p[3], 1000, base + kLiarRange);
  assert_int_equal(l.unreserves, 0);
  assert_ok(gpumem_free(pool, p[0], (gpumem_stream_t)0x10));
  assert_ok(gpumem_free(pool, p[3], (gpumem_stream_t)0x40));
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(a));
  assert_int_equal(l.unreserves, 2);
}

/* A range that runs past the last address, or ends at 2^64 itself, is no range: refused, given
 * back, nothing else changed. So is none at all. */
static void test_functions_allocator_reserve_wrapping_range_refused(void** state) {
  (void)state;
  const uintptr_t starts[] = {(uintptr_t)0 - kLiarRange, UINTPTR_MAX - kLiarUnit + 1};
  for (size_t i = 0; i < sizeof starts / sizeof starts[0]; ++i) {
    liar_t l;
    memset(&l, 0, sizeof l);
    l.starts[0] = starts[i];
    l.count = 1;
    gpumem_allocator_t* a = create_liar(&l);
    gpumem_allocator_t* pool = pool_over(a);
    const gpumem_allocator_stats_t before = stats_of(a);
    void* p = (void*)0x1;
    assert_status(gpumem_alloc(pool, 1000, NULL, &p), GPUMEM_ERROR_INTERNAL);
    assert_null(p);
    assert_detail_has_pointer("the caller's reserve function returned ", (void*)starts[i],
                              " for 65,536 bytes, a range that runs past the end of the address space");
    assert_detail_contains("it was given back");
    assert_int_equal(l.unreserves, 1);
    assert_ptr_equal(l.unreserved, (void*)starts[i]);
    assert_int_equal(l.maps, 0);
    const gpumem_allocator_stats_t after = stats_of(a);
    assert_memory_equal(&after, &before, sizeof after);
    assert_int_equal(pool_info_of(pool).address_bytes, 0);
    assert_ok(gpumem_allocator_destroy(pool));
    assert_ok(gpumem_allocator_destroy(a));
    assert_int_equal(l.unreserves, 1);
  }

  liar_t l;
  memset(&l, 0, sizeof l);
  l.count = 1; /* success, and NULL */
  gpumem_allocator_t* a = create_liar(&l);
  gpumem_allocator_t* pool = pool_over(a);
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(pool, 1000, NULL, &p), GPUMEM_ERROR_INTERNAL);
  assert_null(p);
  assert_detail_contains("the caller's reserve function returned success but no range (NULL) for 65,536 bytes");
  assert_int_equal(l.unreserves, 0);
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(a));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_functions_allocator_arguments_reach_functions),
      cmocka_unit_test(test_functions_allocator_host_device),
      cmocka_unit_test(test_functions_allocator_destroy_callback_once),
      cmocka_unit_test(test_functions_allocator_destroy_force_frees_then_destroys),
      cmocka_unit_test(test_functions_allocator_no_destroy_callback),
      cmocka_unit_test(test_functions_allocator_out_of_memory),
      cmocka_unit_test(test_functions_allocator_other_status_passes_through),
      cmocka_unit_test(test_functions_allocator_success_without_memory),
      cmocka_unit_test(test_functions_allocator_free_failure_keeps_allocation),
      cmocka_unit_test(test_functions_allocator_pool_release_failure_keeps_block),
      cmocka_unit_test(test_functions_allocator_pool_retries_after_release),
      cmocka_unit_test(test_functions_allocator_pool_fails_when_upstream_keeps_failing),
      cmocka_unit_test(test_functions_allocator_create_bad_input),
      cmocka_unit_test(test_functions_allocator_larger_struct_accepted),
      cmocka_unit_test(test_functions_allocator_reserve_same_range_twice_refused),
      cmocka_unit_test(test_functions_allocator_reserve_overlapping_range_refused),
      cmocka_unit_test(test_functions_allocator_reserve_wrapping_range_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
