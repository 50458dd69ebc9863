/* PyTorch's pluggable allocator (gpumem_torch_alloc, gpumem_torch_free): the default allocator of
 * the device PyTorch names serves it, a size of 0 gets the smallest block, and failures answer
 * NULL or nothing while leaving their detail. Bad input and the no-driver answer run in CI; the
 * rest needs a GPU. */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdlib.h>

#include "test_util.h"

static gpumem_allocator_t* default_of(int32_t device) {
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_allocator_get_default(device, &a));
  assert_non_null(a);
  return a;
}

/* ---- No driver needed ---- */

static void test_torch_entry_points_bad_input(void** state) {
  (void)state;
  set_known_detail();
  assert_null(gpumem_torch_alloc(-1, 0, NULL));
  assert_detail_contains("size is -1");
  assert_null(gpumem_torch_alloc(1024, -1, NULL));
  assert_detail_contains("device is -1");
  set_known_detail();
  gpumem_torch_free((void*)0x10000, 1024, -1, NULL);
  assert_detail_contains("device is -1");
  /* NULL is PyTorch's free of nothing: no failure, so the earlier detail stays. */
  gpumem_torch_free(NULL, 0, 0, NULL);
  assert_detail_contains("device is -1");
}

static void test_torch_entry_points_without_gpu_return_null(void** state) {
  (void)state;
  if (gpu_available()) skip();
  set_known_detail();
  assert_null(gpumem_torch_alloc(1024, 0, NULL));
  assert_true(strstr(gpumem_last_error_detail(), "size is 0") == NULL);
  assert_true(gpumem_last_error_detail()[0] != '\0');
  set_known_detail();
  gpumem_torch_free((void*)0x10000, 1024, 0, NULL);
  assert_true(strstr(gpumem_last_error_detail(), "size is 0") == NULL);
  assert_true(gpumem_last_error_detail()[0] != '\0');
}

/* ---- On a GPU ---- */

static void test_torch_entry_points_alloc_from_default(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* pool = default_of(0);
  gpumem_allocator_t* device_pool = NULL;
  assert_ok(gpumem_pool_get_device(0, &device_pool));
  assert_ptr_equal(pool, device_pool);
  const gpumem_allocator_stats_t before = stats_of(pool);

  enum { SIZE = 1000 };
  unsigned char* p = gpumem_torch_alloc(SIZE, 0, NULL);
  assert_non_null(p);
  gpumem_allocator_stats_t s = stats_of(pool);
  assert_int_equal(s.alloc_count, before.alloc_count + 1);
  assert_int_equal(s.bytes_requested, before.bytes_requested + SIZE);
  assert_int_equal(s.bytes_in_use, before.bytes_in_use + 1024);

  assert_ok(gpumem_memset(p, 0x5a, 1, SIZE));
  unsigned char host[SIZE];
  memset(host, 0, sizeof host);
  assert_ok(gpumem_copy(host, p, SIZE));
  for (size_t i = 0; i < SIZE; ++i) assert_int_equal(host[i], 0x5a);

  gpumem_torch_free(p, SIZE, 0, NULL);
  s = stats_of(pool);
  assert_int_equal(s.free_count, before.free_count + 1);
  assert_int_equal(s.bytes_requested, before.bytes_requested);
  assert_int_equal(s.bytes_in_use, before.bytes_in_use);
}

static void test_torch_entry_points_size_zero_gets_smallest_block(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* pool = default_of(0);
  const gpumem_allocator_stats_t before = stats_of(pool);
  void* p = gpumem_torch_alloc(0, 0, NULL);
  assert_non_null(p);
  void* q = gpumem_torch_alloc(0, 0, NULL);
  assert_non_null(q);
  assert_ptr_not_equal(p, q);
  gpumem_allocator_stats_t s = stats_of(pool);
  assert_int_equal(s.alloc_count, before.alloc_count + 2);
  assert_int_equal(s.bytes_requested, before.bytes_requested + 2);
  assert_int_equal(s.bytes_in_use, before.bytes_in_use + 2 * 512);
  gpumem_torch_free(p, 0, 0, NULL);
  gpumem_torch_free(q, 0, 0, NULL);
  s = stats_of(pool);
  assert_int_equal(s.free_count, before.free_count + 2);
  assert_int_equal(s.bytes_in_use, before.bytes_in_use);
}

static void test_torch_entry_points_stream_ordered(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* pool = default_of(0);
  const gpumem_allocator_stats_t before = stats_of(pool);
  void* p = gpumem_torch_alloc(1 << 20, 0, GPUMEM_STREAM_PER_THREAD);
  assert_non_null(p);
  assert_ok(gpumem_memset_async(p, 0, 4, (1 << 20) / 4, GPUMEM_STREAM_PER_THREAD));
  gpumem_torch_free(p, 1 << 20, 0, GPUMEM_STREAM_PER_THREAD);
  const gpumem_allocator_stats_t s = stats_of(pool);
  assert_int_equal(s.free_count, before.free_count + 1);
  assert_int_equal(s.bytes_in_use, before.bytes_in_use);
}

static void test_torch_entry_points_free_of_foreign_pointer_leaves_detail(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* pool = default_of(0);
  void* foreign = NULL;
  assert_ok(gpumem_device_alloc(0, 4096, &foreign));
  const gpumem_allocator_stats_t before = stats_of(pool);
  set_known_detail();
  gpumem_torch_free(foreign, 4096, 0, NULL);
  assert_detail_contains("was not allocated by this pool");
  const gpumem_allocator_stats_t s = stats_of(pool);
  assert_int_equal(s.free_count, before.free_count);
  assert_int_equal(s.bytes_in_use, before.bytes_in_use);
  assert_ok(gpumem_device_free(foreign));

  /* A double free is refused alike, and the memory stays the pool's to hand out. */
  void* p = gpumem_torch_alloc(100, 0, NULL);
  assert_non_null(p);
  gpumem_torch_free(p, 100, 0, NULL);
  set_known_detail();
  gpumem_torch_free(p, 100, 0, NULL);
  assert_detail_contains("was not allocated by this pool");
  assert_int_equal(stats_of(pool).free_count, before.free_count + 1);
}

static void test_torch_entry_points_invalid_device(void** state) {
  (void)state;
  require_gpu();
  const int32_t count = gpu_count();
  set_known_detail();
  assert_null(gpumem_torch_alloc(1024, count, NULL));
  assert_detail_contains("does not exist");
  set_known_detail();
  gpumem_torch_free((void*)0x10000, 1024, count, NULL);
  assert_detail_contains("does not exist");
}

/* The process default of the device, whatever it is set to, serves both. */
static void test_torch_entry_points_follow_set_default(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* upstream = NULL;
  assert_ok(gpumem_allocator_create_device(0, &upstream));
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = upstream;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&params, &pool));
  assert_ok(gpumem_allocator_set_default(0, pool));

  void* p = gpumem_torch_alloc(4096, 0, NULL);
  assert_non_null(p);
  assert_int_equal(stats_of(pool).alloc_count, 1);
  assert_int_equal(stats_of(pool).bytes_in_use, 4096);
  gpumem_torch_free(p, 4096, 0, NULL);
  assert_int_equal(stats_of(pool).free_count, 1);
  assert_int_equal(stats_of(pool).bytes_in_use, 0);

  assert_ok(gpumem_allocator_set_default(0, NULL));
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(upstream));
}

int main(void) {
  /* The device pool's limit would otherwise come from the environment. */
  unsetenv("GPUMEM_GPU_MEMORY_LIMIT");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_torch_entry_points_bad_input),
      cmocka_unit_test(test_torch_entry_points_without_gpu_return_null),
      cmocka_unit_test(test_torch_entry_points_alloc_from_default),
      cmocka_unit_test(test_torch_entry_points_size_zero_gets_smallest_block),
      cmocka_unit_test(test_torch_entry_points_stream_ordered),
      cmocka_unit_test(test_torch_entry_points_free_of_foreign_pointer_leaves_detail),
      cmocka_unit_test(test_torch_entry_points_invalid_device),
      cmocka_unit_test(test_torch_entry_points_follow_set_default),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
