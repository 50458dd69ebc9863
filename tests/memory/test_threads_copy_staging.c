/* Staged copies under many threads: eight threads each copy their own 24 MiB through plain host
 * memory to the device and back, synchronously and on their own streams, more than the staging
 * buffers can serve at once, while one thread watches the staging memory held and another
 * releases it now and then. Every copy must arrive whole, and the memory held must never pass
 * GPUMEM_COPY_STAGING_LIMIT. Shared test state is behind a mutex, so ThreadSanitizer has only the
 * library to look at. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "test_bytes.h"
#include "test_cuda.h"

#define THREADS 8
#define BYTES ((size_t)24 << 20)
#define ROUNDS 4

struct shared {
  pthread_barrier_t start;
  pthread_mutex_t lock;
  int workers_running; /* under lock */
  test_cu_fn_stream stream_sync;
};

struct worker {
  struct shared* shared;
  int index;
  gpumem_stream_t stream;
  unsigned char* dev;
  unsigned char* src_block;
  unsigned char* dst_block;
  unsigned char* src; /* inside src_block, at an odd offset */
  unsigned char* dst; /* inside dst_block, likewise */
  int copies;
  char error[256];
};

struct watcher {
  struct shared* shared;
  long polls;
  size_t most_held;
  long releases;
  char error[256];
};

static void record(char* error, size_t size, const char* what, gpumem_status_t status) {
  if (error[0] == '\0')
    snprintf(error, size, "%s (%s: %s)", what, gpumem_status_name(status), gpumem_last_error_detail());
}

static bool workers_running(struct shared* s) {
  pthread_mutex_lock(&s->lock);
  const bool running = s->workers_running > 0;
  pthread_mutex_unlock(&s->lock);
  return running;
}

static void pause_for(long nanoseconds) {
  struct timespec t = {0, nanoseconds};
  nanosleep(&t, NULL);
}

/* The thread's own pattern, changed by a different non-zero byte before each copy, so that bytes
 * left from the copy before, on the device or in the host destination, never pass as this one's. */
static void* copy_loop(void* arg) {
  struct worker* w = arg;
  fill_pattern(w->src, BYTES, (unsigned)w->index);
  pthread_barrier_wait(&w->shared->start);
  for (int i = 0; i < 2 * ROUNDS && w->error[0] == '\0'; i++) {
    const bool on_stream = i % 2 == 1;
    const unsigned char delta = (unsigned char)(0x11 * (i % 15 + 1));
    for (size_t k = 0; k < BYTES; k++) w->src[k] ^= delta;
    gpumem_status_t st;
    if (on_stream) {
      st = gpumem_copy_async(w->dev, w->src, BYTES, w->stream);
      if (st != GPUMEM_SUCCESS) {
        record(w->error, sizeof w->error, "stream copy to the device failed", st);
        break;
      }
      st = gpumem_copy_async(w->dst, w->dev, BYTES, w->stream);
      if (st != GPUMEM_SUCCESS) {
        record(w->error, sizeof w->error, "stream copy from the device failed", st);
        break;
      }
      const int r = w->shared->stream_sync(w->stream);
      if (r != 0) {
        snprintf(w->error, sizeof w->error, "cuStreamSynchronize returned %d", r);
        break;
      }
    } else {
      st = gpumem_copy(w->dev, w->src, BYTES);
      if (st != GPUMEM_SUCCESS) {
        record(w->error, sizeof w->error, "copy to the device failed", st);
        break;
      }
      st = gpumem_copy(w->dst, w->dev, BYTES);
      if (st != GPUMEM_SUCCESS) {
        record(w->error, sizeof w->error, "copy from the device failed", st);
        break;
      }
    }
    const size_t k = first_difference(w->dst, w->src, BYTES);
    if (k != BYTES) {
      snprintf(w->error, sizeof w->error, "%s copy %d: byte %zu came back 0x%02x, expected 0x%02x",
               on_stream ? "stream" : "synchronous", i, k, w->dst[k], w->src[k]);
      break;
    }
    w->copies++;
  }
  pthread_mutex_lock(&w->shared->lock);
  w->shared->workers_running--;
  pthread_mutex_unlock(&w->shared->lock);
  return NULL;
}

static void* poll_held(void* arg) {
  struct watcher* p = arg;
  pthread_barrier_wait(&p->shared->start);
  while (workers_running(p->shared)) {
    size_t held = 0;
    const gpumem_status_t st = gpumem_copy_staging_get_held(&held);
    if (st != GPUMEM_SUCCESS) {
      record(p->error, sizeof p->error, "gpumem_copy_staging_get_held failed", st);
      break;
    }
    if (held > GPUMEM_COPY_STAGING_LIMIT && p->error[0] == '\0')
      snprintf(p->error, sizeof p->error, "%zu bytes of staging memory held, more than the limit of %zu", held,
               GPUMEM_COPY_STAGING_LIMIT);
    if (held > p->most_held) p->most_held = held;
    p->polls++;
    pause_for(20 * 1000);
  }
  return NULL;
}

static void* release_now_and_then(void* arg) {
  struct watcher* r = arg;
  pthread_barrier_wait(&r->shared->start);
  while (workers_running(r->shared)) {
    pause_for(2 * 1000 * 1000);
    const gpumem_status_t st = gpumem_copy_staging_release();
    if (st != GPUMEM_SUCCESS) {
      record(r->error, sizeof r->error, "gpumem_copy_staging_release failed", st);
      break;
    }
    r->releases++;
  }
  return NULL;
}

static void test_threads_copy_staging_pageable_copies_within_limit(void** state) {
  (void)state;
  struct shared shared;
  memset(&shared, 0, sizeof shared);
  assert_int_equal(pthread_barrier_init(&shared.start, NULL, THREADS + 2), 0);
  assert_int_equal(pthread_mutex_init(&shared.lock, NULL), 0);
  shared.workers_running = THREADS;
  shared.stream_sync = (test_cu_fn_stream)test_cu_symbol("cuStreamSynchronize");

  static struct worker workers[THREADS];
  for (int t = 0; t < THREADS; t++) {
    struct worker* w = &workers[t];
    memset(w, 0, sizeof *w);
    w->shared = &shared;
    w->index = t;
    w->stream = test_stream_create(0);
    void* dev = NULL;
    assert_ok(gpumem_device_alloc(0, BYTES, &dev));
    w->dev = dev;
    w->src_block = malloc(BYTES + 8);
    w->dst_block = malloc(BYTES + 8);
    assert_non_null(w->src_block);
    assert_non_null(w->dst_block);
    w->src = w->src_block + 1 + t % 7;
    w->dst = w->dst_block + 7 - t % 7;
  }
  struct watcher poller;
  struct watcher releaser;
  memset(&poller, 0, sizeof poller);
  memset(&releaser, 0, sizeof releaser);
  poller.shared = &shared;
  releaser.shared = &shared;

  pthread_t threads[THREADS + 2];
  for (int t = 0; t < THREADS; t++) assert_int_equal(pthread_create(&threads[t], NULL, copy_loop, &workers[t]), 0);
  assert_int_equal(pthread_create(&threads[THREADS], NULL, poll_held, &poller), 0);
  assert_int_equal(pthread_create(&threads[THREADS + 1], NULL, release_now_and_then, &releaser), 0);
  for (int t = 0; t < THREADS + 2; t++) assert_int_equal(pthread_join(threads[t], NULL), 0);

  bool failed = false;
  for (int t = 0; t < THREADS; t++) {
    if (workers[t].error[0] != '\0') {
      print_error("thread %d: %s\n", t, workers[t].error);
      failed = true;
    } else if (workers[t].copies != 2 * ROUNDS) {
      print_error("thread %d: %d copies checked, expected %d\n", t, workers[t].copies, 2 * ROUNDS);
      failed = true;
    }
  }
  if (poller.error[0] != '\0') {
    print_error("poller: %s\n", poller.error);
    failed = true;
  }
  if (releaser.error[0] != '\0') {
    print_error("releaser: %s\n", releaser.error);
    failed = true;
  }
  if (failed) fail();
  print_message("%ld polls, at most %zu bytes held; %ld releases\n", poller.polls, poller.most_held, releaser.releases);
  /* The copies were staged at all, else the limit was never put to the test. */
  assert_true(poller.polls > 0);
  assert_true(poller.most_held > 0);

  for (int t = 0; t < THREADS; t++) {
    test_stream_destroy(workers[t].stream);
    assert_ok(gpumem_device_free(workers[t].dev));
    free(workers[t].src_block);
    free(workers[t].dst_block);
  }
  assert_ok(gpumem_copy_staging_release());
  size_t held = (size_t)-1;
  assert_ok(gpumem_copy_staging_get_held(&held));
  assert_int_equal(held, 0);
  pthread_mutex_destroy(&shared.lock);
  pthread_barrier_destroy(&shared.start);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_copy_staging_pageable_copies_within_limit),
  };
  if (!gpu_available()) {
    printf("all tests need a GPU: %s\n", gpumem_last_error_detail());
    return 77;
  }
  return cmocka_run_group_tests(tests, NULL, NULL);
}
