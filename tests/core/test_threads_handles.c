/* Handles made and destroyed on some threads while others use theirs and check stale ones: the
 * handle check takes no lock, and the space handles live in grows under the threads' feet. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>

#include "test_util.h"

#define THREADS 8
#define ROUNDS 2000

struct worker {
  int index;
  pthread_barrier_t* barrier;
  gpumem_allocator_t* shared; /* a pool every thread allocates from */
  gpumem_allocator_t* stale;  /* destroyed before the threads start */
  char error[256];
};

static void* run(void* arg) {
  struct worker* w = arg;
  pthread_barrier_wait(w->barrier);
  for (int round = 0; round < ROUNDS && w->error[0] == '\0'; ++round) {
    if (w->index % 2 == 0) { /* makes and destroys handles, so the space grows */
      gpumem_allocator_t* a = NULL;
      if (gpumem_allocator_create_host(0, &a) != GPUMEM_SUCCESS || gpumem_allocator_destroy(a) != GPUMEM_SUCCESS)
        snprintf(w->error, sizeof w->error, "round %d: create or destroy failed: %s", round,
                 gpumem_last_error_detail());
    }
    void* p = NULL;
    if (gpumem_alloc(w->shared, 64 + (size_t)round, NULL, &p) != GPUMEM_SUCCESS ||
        gpumem_free(w->shared, p, NULL) != GPUMEM_SUCCESS)
      snprintf(w->error, sizeof w->error, "round %d: the shared pool failed: %s", round, gpumem_last_error_detail());
    if (gpumem_alloc(w->stale, 64, NULL, &p) != GPUMEM_ERROR_INVALID_HANDLE || p != NULL ||
        !strstr(gpumem_last_error_detail(), "it was destroyed"))
      snprintf(w->error, sizeof w->error, "round %d: the stale handle was not refused: %s", round,
               gpumem_last_error_detail());
  }
  return NULL;
}

static void test_threads_handles_check_while_others_create(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_allocator_t* pool = pool_over(host);
  gpumem_allocator_t* stale = NULL;
  assert_ok(gpumem_allocator_create_host(0, &stale));
  assert_ok(gpumem_allocator_destroy(stale));
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, THREADS);
  struct worker workers[THREADS];
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; ++i) {
    workers[i] = (struct worker){i, &barrier, pool, stale, ""};
    assert_int_equal(pthread_create(&threads[i], NULL, run, &workers[i]), 0);
  }
  for (int i = 0; i < THREADS; ++i) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&barrier);
  for (int i = 0; i < THREADS; ++i)
    if (workers[i].error[0]) fail_msg("thread %d: %s", i, workers[i].error);
  assert_int_equal(pool_info_of(pool).used_bytes, 0);
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(host));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_handles_check_while_others_create),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
