/* The error detail and CUDA result are per thread, also while threads fail concurrently. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>

#include "test_util.h"

#define THREADS 8
#define ROUNDS 200
#define CUDA_ERROR_OUT_OF_MEMORY_VALUE 2 /* CUresult CUDA_ERROR_OUT_OF_MEMORY */

/* cmocka's assertions may only run on the test's own thread, so workers record what went wrong
 * and the test asserts after joining them. */
struct worker {
  int index;
  pthread_barrier_t* barrier;
  bool gpu; /* one worker makes the driver fail, so its CUDA result differs from the others' */
  char error[512];
};

static void record(struct worker* w, const char* what, int round, const char* detail) {
  if (w->error[0] == '\0')
    snprintf(w->error, sizeof w->error, "thread %d round %d: %s (detail \"%s\")", w->index, round, what, detail);
}

/* Each thread fails its own way; the fragment is unique to the call and, for the numbered ones, to
 * the thread and round, so a detail written by another thread cannot pass for this one's. */
static gpumem_status_t fail_own_way(int index, int round, char* fragment, size_t fragment_size) {
  void* p = (void*)0x1;
  gpumem_array_t* array = (gpumem_array_t*)0x1;
  gpumem_array_desc_t desc = GPUMEM_ARRAY_DESC_INIT;
  char buf[8];
  if (round % 2 == 1) {
    /* A fresh number every round: a stale detail from the previous round fails too. */
    desc.format = -(1000 + index * 10000 + round);
    desc.width = 16;
    snprintf(fragment, fragment_size, "unknown array format %d (", desc.format);
    return gpumem_array_create(&desc, &array);
  }
  switch (index % 8) {
    case 0:
      snprintf(fragment, fragment_size, "size is 0");
      return gpumem_device_alloc(0, 0, &p);
    case 1:
      snprintf(fragment, fragment_size, "out_ptr is NULL");
      return gpumem_device_alloc(0, 64, NULL);
    case 2:
      snprintf(fragment, fragment_size, "desc is NULL");
      return gpumem_array_create(NULL, &array);
    case 3:
      snprintf(fragment, fragment_size, "out_array is NULL");
      return gpumem_array_create(&desc, NULL);
    case 4:
      snprintf(fragment, fragment_size, "struct_size is 3,");
      return gpumem_array_desc_init(&desc, 3);
    case 5:
      snprintf(fragment, fragment_size, "dst is NULL");
      return gpumem_memset(NULL, 0, 1, 4);
    case 6:
      snprintf(fragment, fragment_size, "src is NULL");
      return gpumem_copy(buf, NULL, sizeof buf);
    default:
      snprintf(fragment, fragment_size, "both NULL");
      return gpumem_device_query_memory(0, NULL, NULL);
  }
}

static void check_own_failure(struct worker* w, int round, gpumem_status_t got, const char* fragment) {
  const char* detail = gpumem_last_error_detail();
  if (got != GPUMEM_ERROR_INVALID_ARGUMENT) record(w, "unexpected status", round, detail);
  if (strstr(detail, fragment) == NULL) record(w, fragment, round, detail);
  if (gpumem_last_cuda_result() != 0) record(w, "CUDA result is not 0", round, detail);
}

static void* run_worker(void* arg) {
  struct worker* w = arg;
  char fragment[128];
  for (int round = 0; round < ROUNDS; ++round) {
    pthread_barrier_wait(w->barrier);
    gpumem_status_t got;
    if (w->gpu) {
      void* p = (void*)0x1;
      got = gpumem_device_alloc(0, (size_t)1 << 50, &p);
    } else {
      got = fail_own_way(w->index, round, fragment, sizeof fragment);
    }
    /* Every thread has failed before any thread reads: a shared record would now hold one
     * thread's detail for all of them. */
    pthread_barrier_wait(w->barrier);
    if (w->gpu) {
      const char* detail = gpumem_last_error_detail();
      if (got != GPUMEM_ERROR_OUT_OF_MEMORY) record(w, "unexpected status", round, detail);
      if (strstr(detail, "out of memory allocating 1,125,899,906,842,624 bytes") == NULL)
        record(w, "not the out-of-memory detail", round, detail);
      if (gpumem_last_cuda_result() != CUDA_ERROR_OUT_OF_MEMORY_VALUE)
        record(w, "CUDA result is not CUDA_ERROR_OUT_OF_MEMORY", round, detail);
    } else {
      check_own_failure(w, round, got, fragment);
    }
    /* A success on this thread while others fail must not disturb this thread's record. */
    if (!w->gpu && gpumem_device_free(NULL) == GPUMEM_SUCCESS) check_own_failure(w, round, got, fragment);
  }
  return NULL;
}

static void run_workers(bool with_gpu_worker) {
  /* The main thread's own failure must survive everything the workers do. */
  assert_status(gpumem_array_desc_init(NULL, sizeof(gpumem_array_desc_t)), GPUMEM_ERROR_INVALID_ARGUMENT);
  char main_detail[512];
  snprintf(main_detail, sizeof main_detail, "%s", gpumem_last_error_detail());
  assert_non_null(strstr(main_detail, "desc is NULL"));

  pthread_barrier_t barrier;
  assert_int_equal(pthread_barrier_init(&barrier, NULL, THREADS), 0);
  struct worker workers[THREADS];
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; ++i) {
    workers[i].index = i;
    workers[i].barrier = &barrier;
    workers[i].gpu = with_gpu_worker && i == THREADS - 1;
    workers[i].error[0] = '\0';
    assert_int_equal(pthread_create(&threads[i], NULL, run_worker, &workers[i]), 0);
  }
  for (int i = 0; i < THREADS; ++i) assert_int_equal(pthread_join(threads[i], NULL), 0);
  pthread_barrier_destroy(&barrier);

  for (int i = 0; i < THREADS; ++i) {
    if (workers[i].error[0] != '\0') {
      print_error("%s\n", workers[i].error);
      fail();
    }
  }
  assert_string_equal(gpumem_last_error_detail(), main_detail);
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

static void test_threads_status_details_are_per_thread(void** state) {
  (void)state;
  run_workers(false);
}

/* GPU: one thread's driver failure (CUDA_ERROR_OUT_OF_MEMORY) does not leak its CUDA result to the
 * threads whose calls gpumem refused itself (0), nor theirs to it. */
static void test_threads_status_cuda_results_are_per_thread(void** state) {
  (void)state;
  require_gpu();
  run_workers(true);
}

struct fresh_worker {
  int index;
  pthread_barrier_t* barrier;
  char seen[256];
  int32_t cuda_result;
};

static void* run_fresh_worker(void* arg) {
  struct fresh_worker* w = arg;
  pthread_barrier_wait(w->barrier);
  if (w->index % 2 == 1) {
    void* p = (void*)0x1;
    gpumem_device_alloc(0, 0, &p);
  }
  pthread_barrier_wait(w->barrier);
  snprintf(w->seen, sizeof w->seen, "%s", gpumem_last_error_detail());
  w->cuda_result = gpumem_last_cuda_result();
  return NULL;
}

static void test_threads_status_fresh_threads_empty_while_others_fail(void** state) {
  (void)state;
  pthread_barrier_t barrier;
  assert_int_equal(pthread_barrier_init(&barrier, NULL, THREADS), 0);
  struct fresh_worker workers[THREADS];
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; ++i) {
    workers[i].index = i;
    workers[i].barrier = &barrier;
    assert_int_equal(pthread_create(&threads[i], NULL, run_fresh_worker, &workers[i]), 0);
  }
  for (int i = 0; i < THREADS; ++i) assert_int_equal(pthread_join(threads[i], NULL), 0);
  pthread_barrier_destroy(&barrier);
  for (int i = 0; i < THREADS; ++i) {
    if (i % 2 == 1)
      assert_non_null(strstr(workers[i].seen, "size is 0"));
    else
      assert_string_equal(workers[i].seen, "");
    assert_int_equal(workers[i].cuda_result, 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_status_details_are_per_thread),
      cmocka_unit_test(test_threads_status_cuda_results_are_per_thread),
      cmocka_unit_test(test_threads_status_fresh_threads_empty_while_others_fail),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
