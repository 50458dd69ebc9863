/* Staged copies from 16 threads at once, more than the two staging sets can serve: each thread has
 * sizes of its own (1 MiB + thread * 4099 bytes, up to about 20 MiB), its own device buffer, host
 * buffers at odd offsets and its own stream, and runs rounds of copies in both directions, in turn
 * synchronous and on its stream (half the threads on their streams at any time). Each direction is
 * checked on its own, whole buffers and their margins: the device buffer is written and read
 * through the thread's pinned memory, which is never staged, so a fault of the staged path cannot
 * hide behind the other direction; the source must be left as it was. Shared test state is behind
 * a mutex, so ThreadSanitizer has only the library to look at. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "test_bytes.h"
#include "test_cuda.h"

#define MIB ((size_t)1 << 20)
#define THREADS 16
#define ROUNDS 4
/* Bytes of poison before and after each region, on the device and in host memory. */
#define MARGIN 64

struct shared {
  pthread_barrier_t start;
  pthread_mutex_t lock;
  int copies_checked; /* under lock */
  test_cu_fn_stream stream_sync;
};

struct worker {
  struct shared* shared;
  int index;
  size_t n;      /* bytes each copy moves */
  size_t offset; /* odd: the host regions start at MARGIN + offset */
  gpumem_stream_t stream;
  unsigned char* dev;      /* MARGIN + n + MARGIN bytes, the region at MARGIN */
  unsigned char* pinned;   /* as large: the device buffer is written and read through it */
  unsigned char* src;      /* MARGIN + offset + n + MARGIN bytes of plain host memory */
  unsigned char* dst;      /* likewise */
  unsigned char* expected; /* as large as the largest of these */
  char error[256];
};

static size_t dev_bytes(const struct worker* w) { return MARGIN + w->n + MARGIN; }
static size_t host_bytes(const struct worker* w) { return MARGIN + w->offset + w->n + MARGIN; }

static bool ok(struct worker* w, gpumem_status_t st, const char* what, int round) {
  if (st != GPUMEM_SUCCESS)
    snprintf(w->error, sizeof w->error, "round %d: %s returned %s (%s)", round, what, gpumem_status_name(st),
             gpumem_last_error_detail());
  return st == GPUMEM_SUCCESS;
}

static bool same(struct worker* w, const unsigned char* got, const unsigned char* want, size_t n, const char* what,
                 int round) {
  const size_t k = first_difference(got, want, n);
  if (k != n)
    snprintf(w->error, sizeof w->error, "round %d, %s: byte %zu of %zu is 0x%02x, expected 0x%02x", round, what, k, n,
             got[k], want[k]);
  return k == n;
}

/* The copy under test: on the thread's stream, then waited for, or synchronous. */
static bool staged(struct worker* w, void* dst, const void* src, bool on_stream, const char* what, int round) {
  if (!on_stream) return ok(w, gpumem_copy(dst, src, w->n), what, round);
  if (!ok(w, gpumem_copy_async(dst, src, w->n, w->stream), what, round)) return false;
  const int r = w->shared->stream_sync(w->stream);
  if (r != 0) snprintf(w->error, sizeof w->error, "round %d: cuStreamSynchronize returned %d", round, r);
  return r == 0;
}

/* Plain host memory to the device: every byte of the region differs from what it held before. */
static bool up(struct worker* w, int round, bool on_stream, unsigned seed) {
  const size_t dn = dev_bytes(w), hn = host_bytes(w);
  unsigned char* region = w->src + MARGIN + w->offset;
  fill_pattern(w->src, hn, seed);
  fill_pattern(w->pinned, dn, seed + 1);
  for (size_t i = 0; i < w->n; i++) w->pinned[MARGIN + i] = (unsigned char)~region[i];
  memcpy(w->expected, w->pinned, dn);
  memcpy(w->expected + MARGIN, region, w->n);
  if (!ok(w, gpumem_copy(w->dev, w->pinned, dn), "writing the device through pinned memory", round)) return false;
  if (!staged(w, w->dev + MARGIN, region, on_stream, "the copy to the device", round)) return false;
  if (!ok(w, gpumem_copy(w->pinned, w->dev, dn), "reading the device through pinned memory", round)) return false;
  if (!same(w, w->pinned, w->expected, dn, "the device buffer after the copy to it", round)) return false;
  fill_pattern(w->expected, hn, seed);
  return same(w, w->src, w->expected, hn, "the host source after the copy", round);
}

/* The device to plain host memory, likewise. */
static bool down(struct worker* w, int round, bool on_stream, unsigned seed) {
  const size_t dn = dev_bytes(w), hn = host_bytes(w);
  unsigned char* region = w->dst + MARGIN + w->offset;
  fill_pattern(w->pinned, dn, seed);
  if (!ok(w, gpumem_copy(w->dev, w->pinned, dn), "writing the device through pinned memory", round)) return false;
  fill_pattern(w->dst, hn, seed + 1);
  for (size_t i = 0; i < w->n; i++) region[i] = (unsigned char)~w->pinned[MARGIN + i];
  memcpy(w->expected, w->dst, hn);
  memcpy(w->expected + MARGIN + w->offset, w->pinned + MARGIN, w->n);
  if (!staged(w, region, w->dev + MARGIN, on_stream, "the copy from the device", round)) return false;
  if (!same(w, w->dst, w->expected, hn, "the host buffer after the copy to it", round)) return false;
  fill_pattern(w->expected, dn, seed);
  if (!ok(w, gpumem_copy(w->pinned, w->dev, dn), "reading the device through pinned memory", round)) return false;
  return same(w, w->pinned, w->expected, dn, "the device source after the copy", round);
}

static void* copy_rounds(void* arg) {
  struct worker* w = arg;
  pthread_barrier_wait(&w->shared->start);
  int checked = 0;
  for (int round = 0; round < ROUNDS; round++) {
    const bool on_stream = (round + w->index) % 2 == 1;
    const unsigned seed = 1000u * (unsigned)w->index + 4u * (unsigned)round;
    if (!up(w, round, on_stream, seed) || !down(w, round, on_stream, seed + 2)) break;
    checked += 2;
  }
  pthread_mutex_lock(&w->shared->lock);
  w->shared->copies_checked += checked;
  pthread_mutex_unlock(&w->shared->lock);
  return NULL;
}

static void worker_make(struct worker* w, struct shared* shared, int t) {
  memset(w, 0, sizeof *w);
  w->shared = shared;
  w->index = t;
  w->n = MIB + (size_t)t * 4099 + (size_t)t * (19 * MIB / (THREADS - 1));
  w->offset = 1 + 2 * (size_t)(t % 4);
  w->stream = test_stream_create(0);
  w->dev = memory_alloc(KIND_DEVICE, 0, dev_bytes(w));
  w->pinned = memory_alloc(KIND_PINNED, 0, dev_bytes(w));
  w->src = checked_malloc(host_bytes(w));
  w->dst = checked_malloc(host_bytes(w));
  w->expected = checked_malloc(host_bytes(w));
}

static void worker_free(struct worker* w) {
  test_stream_destroy(w->stream);
  memory_free(KIND_DEVICE, w->dev);
  memory_free(KIND_PINNED, w->pinned);
  free(w->src);
  free(w->dst);
  free(w->expected);
}

static void test_threads_copy_staging_edges_sizes_of_their_own(void** state) {
  (void)state;
  require_gpu();
  struct shared shared;
  memset(&shared, 0, sizeof shared);
  assert_int_equal(pthread_barrier_init(&shared.start, NULL, THREADS), 0);
  assert_int_equal(pthread_mutex_init(&shared.lock, NULL), 0);
  shared.stream_sync = (test_cu_fn_stream)test_cu_symbol("cuStreamSynchronize");
  static struct worker workers[THREADS];
  for (int t = 0; t < THREADS; t++) worker_make(&workers[t], &shared, t);
  assert_ok(gpumem_copy_staging_release());

  pthread_t threads[THREADS];
  for (int t = 0; t < THREADS; t++) assert_int_equal(pthread_create(&threads[t], NULL, copy_rounds, &workers[t]), 0);
  for (int t = 0; t < THREADS; t++) assert_int_equal(pthread_join(threads[t], NULL), 0);

  bool failed = false;
  for (int t = 0; t < THREADS; t++) {
    if (workers[t].error[0] == '\0') continue;
    print_error("thread %d (%zu bytes a copy): %s\n", t, workers[t].n, workers[t].error);
    failed = true;
  }
  if (failed) fail();
  assert_int_equal(shared.copies_checked, THREADS * ROUNDS * 2);
  /* Some of the copies were staged, and the memory held kept within the limit. */
  size_t held = 0;
  assert_ok(gpumem_copy_staging_get_held(&held));
  print_message("%zu bytes of staging memory held after the copies\n", held);
  assert_true(held > 0 && held <= GPUMEM_COPY_STAGING_LIMIT);

  for (int t = 0; t < THREADS; t++) worker_free(&workers[t]);
  assert_ok(gpumem_copy_staging_release());
  assert_ok(gpumem_copy_staging_get_held(&held));
  assert_int_equal(held, 0);
  pthread_mutex_destroy(&shared.lock);
  pthread_barrier_destroy(&shared.start);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_copy_staging_edges_sizes_of_their_own),
  };
  const int failed = cmocka_run_group_tests(tests, NULL, NULL);
  /* Every test needs a GPU: without one, CTest is told they were skipped. */
  return failed == 0 && !gpu_available() ? 77 : failed;
}
