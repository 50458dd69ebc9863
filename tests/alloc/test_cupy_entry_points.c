/* CuPy's C-function allocator (gpumem_cupy_alloc, gpumem_cupy_free): the target's allocator
 * serves it on the target's stream, or the default allocator of CuPy's device when the target
 * names none, and failures answer NULL or nothing while leaving their detail. A host pool stands
 * in for a device's in CI; the default allocator needs a GPU. */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdlib.h>

#include "test_util.h"

static gpumem_allocator_t* host_pool(gpumem_allocator_t** out_upstream) {
  assert_ok(gpumem_allocator_create_host(0, out_upstream));
  return pool_over(*out_upstream);
}

static void destroy_pool(gpumem_allocator_t* pool, gpumem_allocator_t* upstream) {
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(upstream));
}

static gpumem_cupy_target_t target_of(gpumem_allocator_t* allocator, gpumem_stream_t stream) {
  gpumem_cupy_target_t t = {sizeof t, allocator, stream};
  return t;
}

/* ---- No driver needed ---- */

static void test_cupy_entry_points_alloc_from_target(void** state) {
  (void)state;
  gpumem_allocator_t* upstream = NULL;
  gpumem_allocator_t* pool = host_pool(&upstream);
  gpumem_cupy_target_t target = target_of(pool, (gpumem_stream_t)0x1000);

  enum { SIZE = 1000 };
  unsigned char* p = gpumem_cupy_alloc(&target, SIZE, 0);
  assert_non_null(p);
  memset(p, 0x5a, SIZE);
  gpumem_allocator_stats_t s = stats_of(pool);
  assert_int_equal(s.alloc_count, 1);
  assert_int_equal(s.bytes_requested, SIZE);
  assert_int_equal(s.bytes_in_use, 1024);

  /* The free goes back on the target's stream, whose arena hands the block out again at once. */
  gpumem_cupy_free(&target, p, 0);
  s = stats_of(pool);
  assert_int_equal(s.free_count, 1);
  assert_int_equal(s.bytes_in_use, 0);
  const gpumem_pool_info_t info = pool_info_of(pool);
  assert_int_equal(info.pending_bytes, 0);
  unsigned char* again = gpumem_cupy_alloc(&target, SIZE, 0);
  assert_ptr_equal(again, p);
  gpumem_cupy_free(&target, again, 0);
  destroy_pool(pool, upstream);
}

/* A target from a newer gpumem is read as far as this library knows while the fields it does not
 * know are zero, and refused once one is set. */
static void test_cupy_entry_points_accept_a_larger_target(void** state) {
  (void)state;
  gpumem_allocator_t* upstream = NULL;
  gpumem_allocator_t* pool = host_pool(&upstream);
  struct {
    gpumem_cupy_target_t known;
    uint64_t newer_field;
  } newer = {target_of(pool, NULL), 0};
  newer.known.struct_size = sizeof newer;
  void* p = gpumem_cupy_alloc(&newer, 100, 0);
  assert_non_null(p);
  assert_int_equal(stats_of(pool).bytes_in_use, 512);
  gpumem_cupy_free(&newer, p, 0);
  assert_int_equal(stats_of(pool).bytes_in_use, 0);

  newer.newer_field = 42;
  assert_null(gpumem_cupy_alloc(&newer, 100, 0));
  assert_detail_contains("target->struct_size is 32, more than the 24 bytes of gpumem_cupy_target_t");
  assert_detail_contains("byte 24 is not zero");
  assert_int_equal(stats_of(pool).alloc_count, 1); /* the first only */
  destroy_pool(pool, upstream);
}

static void test_cupy_entry_points_bad_input(void** state) {
  (void)state;
  gpumem_allocator_t* upstream = NULL;
  gpumem_allocator_t* pool = host_pool(&upstream);
  gpumem_cupy_target_t target = target_of(pool, NULL);

  set_known_detail();
  assert_null(gpumem_cupy_alloc(NULL, 1024, 0));
  assert_detail_contains("target is NULL");
  assert_null(gpumem_cupy_alloc(&target, 0, 0));
  assert_detail_contains("size is 0");
  gpumem_cupy_target_t short_target = target;
  short_target.struct_size = sizeof(size_t);
  assert_null(gpumem_cupy_alloc(&short_target, 1024, 0));
  assert_detail_contains("target->struct_size is 8");

  gpumem_cupy_target_t huge_target = target;
  huge_target.struct_size = 65537;
  assert_null(gpumem_cupy_alloc(&huge_target, 1024, 0));
  assert_detail_contains("target->struct_size is 65537, more than any gpumem struct");
  assert_int_equal(stats_of(pool).alloc_count, 0);

  void* p = gpumem_cupy_alloc(&target, 1024, 0);
  assert_non_null(p);
  set_known_detail();
  gpumem_cupy_free(NULL, p, 0);
  assert_detail_contains("target is NULL");
  set_known_detail();
  gpumem_cupy_free(&short_target, p, 0);
  assert_detail_contains("target->struct_size is 8");
  assert_int_equal(stats_of(pool).bytes_in_use, 1024);

  /* A pointer the pool did not hand out, and a double free, are refused and change nothing. */
  static char foreign[1024];
  set_known_detail();
  gpumem_cupy_free(&target, foreign, 0);
  assert_detail_contains("was not allocated by this pool");
  gpumem_cupy_free(&target, p, 0);
  set_known_detail();
  gpumem_cupy_free(&target, p, 0);
  assert_detail_contains("was not allocated by this pool");
  assert_int_equal(stats_of(pool).free_count, 1);

  /* NULL is a free of nothing: no failure, so the earlier detail stays. */
  set_known_detail();
  gpumem_cupy_free(&target, NULL, 0);
  assert_detail_contains("size is 0");
  destroy_pool(pool, upstream);
}

static void test_cupy_entry_points_default_allocator_needs_device(void** state) {
  (void)state;
  gpumem_cupy_target_t target = target_of(NULL, NULL);
  set_known_detail();
  assert_null(gpumem_cupy_alloc(&target, 1024, -1));
  assert_detail_contains("device is -1");
  if (gpu_available()) return;
  set_known_detail();
  assert_null(gpumem_cupy_alloc(&target, 1024, 0));
  assert_true(strstr(gpumem_last_error_detail(), "size is 0") == NULL);
  assert_true(gpumem_last_error_detail()[0] != '\0');
}

/* ---- On a GPU ---- */

static void test_cupy_entry_points_default_allocator(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_allocator_get_default(0, &pool));
  const gpumem_allocator_stats_t before = stats_of(pool);
  gpumem_cupy_target_t target = target_of(NULL, GPUMEM_STREAM_PER_THREAD);

  enum { SIZE = 1000 };
  unsigned char* p = gpumem_cupy_alloc(&target, SIZE, 0);
  assert_non_null(p);
  assert_int_equal(stats_of(pool).bytes_in_use, before.bytes_in_use + 1024);
  assert_ok(gpumem_memset(p, 0x5a, 1, SIZE));
  unsigned char host[SIZE];
  memset(host, 0, sizeof host);
  assert_ok(gpumem_copy(host, p, SIZE));
  for (size_t i = 0; i < SIZE; ++i) assert_int_equal(host[i], 0x5a);
  gpumem_cupy_free(&target, p, 0);
  const gpumem_allocator_stats_t s = stats_of(pool);
  assert_int_equal(s.free_count, before.free_count + 1);
  assert_int_equal(s.bytes_in_use, before.bytes_in_use);

  set_known_detail();
  assert_null(gpumem_cupy_alloc(&target, 1024, gpu_count()));
  assert_detail_contains("does not exist");
}

int main(void) {
  /* The device pool's limit would otherwise come from the environment. */
  unsetenv("GPUMEM_GPU_MEMORY_LIMIT");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cupy_entry_points_alloc_from_target),
      cmocka_unit_test(test_cupy_entry_points_accept_a_larger_target),
      cmocka_unit_test(test_cupy_entry_points_bad_input),
      cmocka_unit_test(test_cupy_entry_points_default_allocator_needs_device),
      cmocka_unit_test(test_cupy_entry_points_default_allocator),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
