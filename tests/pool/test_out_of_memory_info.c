/* gpumem_last_out_of_memory (gpumem/experimental.h): a pool's failed allocation leaves its figures
 * for the failing thread, the same numbers its detail text gives, and no other thread sees them. */
#include <gpumem/experimental.h>
#include <pthread.h>
#include <string.h>

#include "test_util.h"

static gpumem_out_of_memory_info_t last(void) {
  gpumem_out_of_memory_info_t info;
  memset(&info, 0xab, sizeof info);
  info.struct_size = sizeof info;
  assert_int_equal(gpumem_last_out_of_memory(&info), GPUMEM_SUCCESS);
  return info;
}

static void* other_thread(void* arg) {
  *(gpumem_out_of_memory_info_t*)arg = last();
  return NULL;
}

static void test_out_of_memory_info_none_yet(void** state) {
  (void)state;
  const gpumem_out_of_memory_info_t info = last();
  assert_int_equal(info.cause, GPUMEM_OOM_NONE);
  assert_int_equal(info.size, 0);
  assert_int_equal(info.pool_bytes, 0);
}

static void test_out_of_memory_info_of_a_limit(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  gpumem_allocator_t* pool = NULL;
  assert_int_equal(gpumem_allocator_create_host(0, &host), GPUMEM_SUCCESS);
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = host;
  params.limit = 4 << 20;
  assert_int_equal(gpumem_pool_create(&params, &pool), GPUMEM_SUCCESS);
  void* kept = NULL;
  void* refused = (void*)1;
  assert_int_equal(gpumem_alloc(pool, 3 << 20, NULL, &kept), GPUMEM_SUCCESS);
  assert_int_equal(gpumem_alloc(pool, 2 << 20, NULL, &refused), GPUMEM_ERROR_OUT_OF_MEMORY);
  const gpumem_out_of_memory_info_t info = last();
  assert_int_equal(info.device, -1);
  assert_int_equal(info.size, 2 << 20);
  assert_true(info.rounded >= info.size);
  assert_int_equal(info.limit, 4 << 20);
  assert_int_equal(info.in_use, 3 << 20);
  assert_true(info.pool_bytes >= info.in_use);
  assert_int_equal(info.pool_bytes, info.in_use + info.free_pieces + info.free_whole + info.pending);
  /* The limit is what stood in the way: one of at least what it names would have served. */
  assert_int_equal(info.cause, GPUMEM_OOM_LIMIT);
  assert_int_equal(info.would_serve, info.pool_bytes - info.free_whole + info.rounded);
  assert_true(info.would_serve > info.limit);

  /* Another thread has had no failure: it sees none of this one's. */
  gpumem_out_of_memory_info_t theirs;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, other_thread, &theirs), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(theirs.cause, GPUMEM_OOM_NONE);

  /* No release had a shorter struct: a smaller size is refused, naming the size to pass. */
  gpumem_out_of_memory_info_t small;
  small.struct_size = offsetof(gpumem_out_of_memory_info_t, pending);
  assert_int_equal(gpumem_last_out_of_memory(&small), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(gpumem_last_error_detail(), "96"));

  assert_int_equal(gpumem_free(pool, kept, NULL), GPUMEM_SUCCESS);
  assert_int_equal(gpumem_allocator_destroy(pool), GPUMEM_SUCCESS);
  assert_int_equal(gpumem_allocator_destroy(host), GPUMEM_SUCCESS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_out_of_memory_info_none_yet),
      cmocka_unit_test(test_out_of_memory_info_of_a_limit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
