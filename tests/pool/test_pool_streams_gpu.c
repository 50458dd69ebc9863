/* A pool over device memory handing memory from one stream's work to another's: the second
 * stream's writes land after the first stream's, with no host synchronize by the caller. The first
 * stream is kept busy with copies of its own buffer into the memory (several milliseconds), so a
 * pool that did not order the two would let them overlap and leave the first stream's bytes. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "test_cuda.h"
#include "test_util.h"

enum { kBytes = 64 << 20, kBusyCopies = 100 };

struct gpu_fixture {
  gpumem_allocator_t* device;
  gpumem_allocator_t* pool;
  gpumem_stream_t a, b;
  void* source; /* kBytes of 0x11, plain device memory */
};

static int gpu_setup(void** state) {
  static struct gpu_fixture f;
  memset(&f, 0, sizeof f);
  if (gpumem_allocator_create_device(0, &f.device) != GPUMEM_SUCCESS) return -1;
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = f.device;
  if (gpumem_pool_create(&params, &f.pool) != GPUMEM_SUCCESS) return -1;
  if (gpumem_device_alloc(0, kBytes, &f.source) != GPUMEM_SUCCESS) return -1;
  if (gpumem_memset(f.source, 0x11, 1, kBytes) != GPUMEM_SUCCESS) return -1;
  f.a = test_stream_create(0);
  f.b = test_stream_create(0);
  *state = &f;
  return 0;
}

static int gpu_teardown(void** state) {
  struct gpu_fixture* f = *state;
  test_stream_sync(f->a);
  test_stream_sync(f->b);
  test_stream_destroy(f->a);
  test_stream_destroy(f->b);
  if (gpumem_allocator_destroy_force(f->pool) != GPUMEM_SUCCESS) return -1;
  if (gpumem_allocator_destroy(f->device) != GPUMEM_SUCCESS) return -1;
  return gpumem_device_free(f->source) == GPUMEM_SUCCESS ? 0 : -1;
}

/* Work on `stream` that writes 0x11 over p for several milliseconds. */
static void keep_busy_writing(struct gpu_fixture* f, void* p, gpumem_stream_t stream) {
  for (int i = 0; i < kBusyCopies; i++) assert_ok(gpumem_copy_async(p, f->source, kBytes, stream));
}

/* After every stream is done, p holds `value` in every byte. */
static void expect_all(struct gpu_fixture* f, void* p, unsigned char value) {
  test_stream_sync(f->a);
  test_stream_sync(f->b);
  unsigned char* host = malloc(kBytes);
  assert_non_null(host);
  assert_ok(gpumem_copy(host, p, kBytes));
  for (size_t i = 0; i < kBytes; i++) {
    if (host[i] != value) {
      print_error("byte %zu is 0x%02x, expected 0x%02x: the streams' writes overlapped\n", i, host[i], value);
      free(host);
      fail();
    }
  }
  free(host);
}

static void test_pool_streams_gpu_memory_lent_across_streams_is_ordered(void** state) {
  struct gpu_fixture* f = *state;
  void* p = NULL;
  assert_ok(gpumem_alloc(f->pool, kBytes, f->a, &p));
  keep_busy_writing(f, p, f->a);
  assert_ok(gpumem_free(f->pool, p, f->a));
  const uint64_t reserved = stats_of(f->pool).bytes_reserved;
  void* q = NULL;
  assert_ok(gpumem_alloc(f->pool, kBytes, f->b, &q)); /* b's arena is empty: a's memory is lent */
  assert_ptr_equal(q, p);
  assert_int_equal(stats_of(f->pool).bytes_reserved, reserved); /* lent, not grown */
  assert_ok(gpumem_memset_async(q, 0x22, 1, kBytes, f->b));
  expect_all(f, q, 0x22);
  assert_ok(gpumem_free(f->pool, q, f->b));
}

static void test_pool_streams_gpu_never_lends_when_told(void** state) {
  struct gpu_fixture* f = *state;
  assert_ok(gpumem_pool_set_stream_reuse(f->pool, GPUMEM_STREAM_REUSE_NEVER));
  void* p = NULL;
  assert_ok(gpumem_alloc(f->pool, kBytes, f->a, &p));
  assert_ok(gpumem_free(f->pool, p, f->a));
  void* q = NULL;
  assert_ok(gpumem_alloc(f->pool, kBytes, f->b, &q));
  assert_ptr_not_equal(q, p);
  assert_ok(gpumem_free(f->pool, q, f->b));
  assert_ok(gpumem_pool_set_stream_reuse(f->pool, GPUMEM_STREAM_REUSE_FENCE));
}

static void test_pool_streams_gpu_free_on_another_stream_is_ordered(void** state) {
  struct gpu_fixture* f = *state;
  void* p = NULL;
  assert_ok(gpumem_alloc(f->pool, kBytes, f->a, &p));
  keep_busy_writing(f, p, f->b);            /* b uses a's memory... */
  assert_ok(gpumem_free(f->pool, p, f->b)); /* ...and frees it there */
  const gpumem_pool_info_t info = pool_info_of(f->pool);
  assert_int_equal(info.pending_bytes, kBytes); /* nothing has looked at b's work since */
  assert_int_equal(info.used_bytes + info.free_bytes + info.pending_bytes, info.total_bytes);
  void* q = NULL;
  assert_ok(gpumem_alloc(f->pool, kBytes, f->a, &q));
  assert_ok(gpumem_memset_async(q, 0x33, 1, kBytes, f->a));
  expect_all(f, q, 0x33); /* whether or not q is p: a never wrote while b still did */
  assert_ok(gpumem_free(f->pool, q, f->a));
}

static void test_pool_streams_gpu_recorded_stream_is_ordered(void** state) {
  struct gpu_fixture* f = *state;
  void* p = NULL;
  assert_ok(gpumem_alloc(f->pool, kBytes, f->a, &p));
  keep_busy_writing(f, p, f->b);
  assert_ok(gpumem_pool_record_stream(f->pool, p, f->b));
  assert_ok(gpumem_free(f->pool, p, f->a)); /* freed on its own stream, but b still writes */
  void* q = NULL;
  assert_ok(gpumem_alloc(f->pool, kBytes, f->a, &q));
  assert_ok(gpumem_memset_async(q, 0x44, 1, kBytes, f->a));
  expect_all(f, q, 0x44);
  assert_ok(gpumem_free(f->pool, q, f->a));
}

static void test_pool_streams_gpu_out_of_memory_waits_for_pending_frees(void** state) {
  struct gpu_fixture* f = *state;
  /* The earlier tests' streams are done, so their pending frees settle and everything goes back. */
  assert_ok(gpumem_pool_release(f->pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  assert_int_equal(stats_of(f->pool).bytes_reserved, 0);
  assert_ok(gpumem_pool_set_limit(f->pool, kBytes));
  void* p = NULL;
  assert_ok(gpumem_alloc(f->pool, kBytes, f->a, &p));
  keep_busy_writing(f, p, f->b);
  assert_ok(gpumem_free(f->pool, p, f->b)); /* pending until b's copies end */
  void* q = NULL;
  assert_ok(gpumem_alloc(f->pool, kBytes, f->a, &q)); /* only room once b is done */
  assert_true(stats_of(f->pool).bytes_reserved <= kBytes);
  assert_ok(gpumem_memset_async(q, 0x55, 1, kBytes, f->a));
  expect_all(f, q, 0x55);
  assert_ok(gpumem_free(f->pool, q, f->a));
  assert_ok(gpumem_pool_set_limit(f->pool, 0));
}

int main(void) {
  if (!gpu_available()) {
    printf("all tests need a GPU: %s\n", gpumem_last_error_detail());
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pool_streams_gpu_memory_lent_across_streams_is_ordered),
      cmocka_unit_test(test_pool_streams_gpu_never_lends_when_told),
      cmocka_unit_test(test_pool_streams_gpu_free_on_another_stream_is_ordered),
      cmocka_unit_test(test_pool_streams_gpu_recorded_stream_is_ordered),
      cmocka_unit_test(test_pool_streams_gpu_out_of_memory_waits_for_pending_frees),
  };
  return cmocka_run_group_tests(tests, gpu_setup, gpu_teardown);
}
