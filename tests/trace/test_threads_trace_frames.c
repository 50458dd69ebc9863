/* Caller frames from several threads at once: each record carries the frames of the thread that
 * allocated, and stopping a recording returns once no thread is inside its callback, after which
 * the callback never runs again. Needs no GPU. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

#define WORKERS 4

static char path[256];
static pthread_key_t worker_key; /* the worker's number + 1 */
static atomic_int inside, calls, after_stop;
static atomic_bool stop_returned, done;

static void sleep_us(long us) {
  const struct timespec t = {us / 1000000, (us % 1000000) * 1000L};
  nanosleep(&t, NULL);
}

static size_t write_frames(char* buffer, size_t capacity, void* user_data) {
  (void)user_data;
  atomic_fetch_add(&inside, 1);
  atomic_fetch_add(&calls, 1);
  if (atomic_load(&stop_returned)) atomic_fetch_add(&after_stop, 1);
  sleep_us(200); /* long enough for a stop to find threads in here */
  const int id = (int)(intptr_t)pthread_getspecific(worker_key) - 1;
  const int n = snprintf(buffer, capacity, "worker.py:%d run", id);
  atomic_fetch_sub(&inside, 1);
  return n < 0 ? 0 : (size_t)n;
}

struct worker {
  gpumem_allocator_t* allocator;
  int id;
};

/* Allocates 64 * (id + 1) bytes and frees them until told to stop: the size says whose it was. */
static void* work(void* arg) {
  const struct worker* w = arg;
  pthread_setspecific(worker_key, (void*)(intptr_t)(w->id + 1));
  while (!atomic_load(&done)) {
    void* p = NULL;
    if (gpumem_alloc(w->allocator, 64 * (size_t)(w->id + 1), NULL, &p) == GPUMEM_SUCCESS)
      (void)gpumem_free(w->allocator, p, NULL);
  }
  return NULL;
}

static int setup(void** state) {
  (void)state;
  temp_path(path, sizeof path, "threads_frames", "trace");
  return pthread_key_create(&worker_key, NULL);
}

static int teardown(void** state) {
  (void)state;
  remove(path);
  return 0;
}

/* Runs WORKERS threads over a recording with caller frames until the callback has run `enough`
 * times, then stops it; returns the allocator, for the caller to destroy. */
static gpumem_allocator_t* record_workers(int enough) {
  atomic_store(&inside, 0);
  atomic_store(&calls, 0);
  atomic_store(&after_stop, 0);
  atomic_store(&stop_returned, false);
  atomic_store(&done, false);
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_trace_params_t params = GPUMEM_TRACE_PARAMS_INIT;
  params.frames = write_frames;
  gpumem_trace_t* t = NULL;
  assert_ok(gpumem_trace_start_with_params(host, path, &params, &t));
  pthread_t threads[WORKERS];
  struct worker workers[WORKERS];
  for (int i = 0; i < WORKERS; ++i) {
    workers[i] = (struct worker){host, i};
    assert_int_equal(pthread_create(&threads[i], NULL, work, &workers[i]), 0);
  }
  while (atomic_load(&calls) < enough) sleep_us(100);
  assert_ok(gpumem_trace_stop(t));
  /* Returned once no thread was inside the callback, and none may enter it again. */
  assert_int_equal(atomic_load(&inside), 0);
  atomic_store(&stop_returned, true);
  sleep_us(5000);
  atomic_store(&done, true);
  for (int i = 0; i < WORKERS; ++i) assert_int_equal(pthread_join(threads[i], NULL), 0);
  assert_int_equal(atomic_load(&after_stop), 0);
  return host;
}

static void test_threads_trace_frames_stop_waits_for_the_callback(void** state) {
  (void)state;
  for (int round = 0; round < 5; ++round) assert_ok(gpumem_allocator_destroy(record_workers(8)));
}

static void test_threads_trace_frames_each_record_has_its_own(void** state) {
  (void)state;
  gpumem_allocator_t* host = record_workers(400);
  assert_ok(gpumem_allocator_destroy(host));
  gpumem_trace_reader_t* r = NULL;
  assert_ok(gpumem_trace_reader_open(path, &r));
  gpumem_trace_record_t rec = trace_record();
  bool has = false;
  int allocs = 0;
  while (gpumem_trace_reader_next(r, &rec, &has) == GPUMEM_SUCCESS && has) {
    if (rec.event != GPUMEM_TRACE_ALLOC) continue;
    ++allocs;
    assert_int_equal(rec.frame_count, 1);
    gpumem_trace_frame_t f;
    memset(&f, 0, sizeof f);
    f.struct_size = sizeof f;
    assert_ok(gpumem_trace_reader_get_frame(r, 0, &f));
    char want[64];
    snprintf(want, sizeof want, "worker.py:%d run", (int)(rec.size / 64) - 1);
    assert_string_equal(f.text, want);
  }
  assert_true(allocs >= 300);
  assert_ok(gpumem_trace_reader_close(r));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_threads_trace_frames_stop_waits_for_the_callback, teardown),
      cmocka_unit_test_teardown(test_threads_trace_frames_each_record_has_its_own, teardown),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
