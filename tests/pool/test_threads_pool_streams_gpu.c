/* One pool over device memory under many threads and streams at once, with random sizes. Each
 * thread has two streams of its own and shares two more with every other thread. Every buffer is
 * filled with a 32-bit pattern that no other buffer has, and is read back before its free: a word
 * of any other value means memory reached a second owner while the first owner's work could still
 * write it, that is, a fence the pool should have set is missing. Memory moves between streams
 * in each way the pool orders: a free on the allocating stream, a free on another stream after
 * work there, and work on another stream named by gpumem_pool_record_stream(); busy streams
 * keep frees pending while other threads allocate, and borrow. The test never synchronizes the
 * device, only the stream that wrote a buffer and only before reading it back, so a missing
 * fence is not hidden. Afterwards the statistics add up exactly and a release gives every byte
 * back. Run with each choice of gpumem_pool_set_stream_reuse(). Test state shared between
 * threads is only read while they run, so ThreadSanitizer has only the library to look at. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

#include "test_cuda.h"
#include "test_util.h"

#define MAX_THREADS 8
#define OPS 2000
#define SLOTS 16
/* Streams a thread uses: its own two, then the two that all threads share. */
#define OWN_STREAMS 2
#define SHARED_STREAMS 2
#define STREAMS (OWN_STREAMS + SHARED_STREAMS)
/* Sizes are log-uniform from 512 bytes to 4 MiB, in whole 32-bit words. */
#define MIN_SIZE_LOG2 9
#define MAX_SIZE_LOG2 22
/* Buffers up to this size are read back whole; larger ones at both ends and at sampled words. */
#define WHOLE_LIMIT 4096
#define EDGE 256
#define SAMPLES 8
#define STAGING_WORDS (WHOLE_LIMIT / 4)
/* The most bytes of work queued to keep a stream busy past a free, and the most operations. */
#define BUSY_BYTES ((size_t)32 << 20)
#define BUSY_MAX_OPS 16
/* The pool's rounding, for the bytes a buffer holds in the statistics. */
#define POOL_ROUND 512

/* How a buffer goes back to the pool. */
enum retire_mode {
  FREE_HOME,      /* on the stream it was allocated on, sometimes with that stream kept busy */
  FREE_ELSEWHERE, /* on another stream, after work there: the free must be fenced */
  FREE_RECORDED,  /* on its own stream, after work on another named by gpumem_pool_record_stream() */
  MODES
};

struct fixture {
  int threads;
  gpumem_stream_t own[MAX_THREADS][OWN_STREAMS];
  gpumem_stream_t shared[SHARED_STREAMS];
};

struct shared {
  gpumem_allocator_t* pool;
  pthread_barrier_t start;
  test_cu_fn_stream stream_sync;
  int threads;
};

struct buffer {
  uint32_t* ptr;
  size_t size;
  uint32_t pattern;
  uint32_t serial;
  int home; /* index of the stream it was allocated on */
};

struct worker {
  struct shared* shared;
  int index;
  uint32_t round;
  uint32_t random;
  gpumem_stream_t streams[STREAMS];
  uint32_t* staging;               /* pinned, STAGING_WORDS words */
  size_t staged_at[STAGING_WORDS]; /* byte offset in the buffer of each staged word */
  uint32_t serial;
  size_t last_freed_size;
  uint64_t allocs, frees, checks;
  uint64_t by_mode[MODES];
  uint64_t live_bytes, peak_live_bytes; /* rounded as the pool counts them */
  char error[512];
};

static uint32_t next_random(uint32_t* state) {
  uint32_t x = *state;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *state = x;
}

static uint64_t rounded(size_t size) { return ((uint64_t)size + POOL_ROUND - 1) / POOL_ROUND * POOL_ROUND; }

/* Round (1 to 3) in the top 4 bits, then the thread in 8 bits and the thread's serial number in 20,
 * so the pattern is never 0, nor the same in two rounds, threads or buffers, and a wrong word says
 * whose it was. */
static uint32_t pattern_of(uint32_t round, int thread, uint32_t serial) {
  return round << 28 | (uint32_t)thread << 20 | (serial & 0xfffffu);
}

static void describe(const struct shared* shared, uint32_t word, char* out, size_t size) {
  const uint32_t round = word >> 28;
  const uint32_t thread = (word >> 20) & 0xffu;
  if (round >= 1 && round <= 3 && thread < (uint32_t)shared->threads)
    snprintf(out, size, "the pattern of thread %u's buffer %u in round %u", thread, word & 0xfffffu, round);
  else
    snprintf(out, size, "no buffer's pattern");
}

static const char* stream_name(int index) {
  static const char* const names[STREAMS] = {"own stream 0", "own stream 1", "shared stream 0", "shared stream 1"};
  return names[index];
}

static void record(struct worker* w, const char* what, gpumem_status_t status) {
  if (w->error[0] == '\0')
    snprintf(w->error, sizeof w->error, "thread %d: %s failed (%s: %s)", w->index, what, gpumem_status_name(status),
             gpumem_last_error_detail());
}

static void record_sync(struct worker* w, int stream, int result) {
  if (w->error[0] == '\0')
    snprintf(w->error, sizeof w->error, "thread %d: cuStreamSynchronize of %s returned %d", w->index,
             stream_name(stream), result);
}

/* Log-uniform, with a quarter of the sizes repeated exactly: the size this thread freed last, or
 * one of a few sizes every thread asks for, so freed chunks are taken again whole, by this thread
 * and by others. */
static size_t pick_size(struct worker* w) {
  static const size_t common[] = {512, 4000, 65536, 200004, (size_t)1 << 20, 3000000};
  const uint32_t r = next_random(&w->random);
  if (r % 8 == 0 && w->last_freed_size != 0) return w->last_freed_size;
  if (r % 8 == 1) return common[(r >> 3) % (sizeof common / sizeof common[0])];
  const unsigned octave = MIN_SIZE_LOG2 + next_random(&w->random) % (MAX_SIZE_LOG2 - MIN_SIZE_LOG2);
  const size_t base = (size_t)1 << octave;
  return (base + next_random(&w->random) % base) & ~(size_t)3;
}

/* Queues work on a stream that rewrites the buffer with its own pattern: memsets, and copies of its
 * first half onto its second, which read it too. Only called once the pattern is in place (the
 * stream that wrote it is this one, or has been synchronized), so the copies copy the pattern. */
static void keep_busy(struct worker* w, const struct buffer* b, int stream) {
  const gpumem_stream_t s = w->streams[stream];
  size_t ops = BUSY_BYTES / b->size;
  if (ops < 2) ops = 2;
  if (ops > BUSY_MAX_OPS) ops = BUSY_MAX_OPS;
  const size_t half = b->size / 8 * 4;
  for (size_t i = 0; i < ops; i++) {
    gpumem_status_t st = i % 2 == 1 ? gpumem_copy_async((char*)b->ptr + half, b->ptr, half, s)
                                    : gpumem_memset_async(b->ptr, b->pattern, 4, b->size / 4, s);
    if (st != GPUMEM_SUCCESS) {
      record(w, i % 2 == 1 ? "gpumem_copy_async within a buffer" : "gpumem_memset_async", st);
      return;
    }
  }
}

static bool stage(struct worker* w, const struct buffer* b, size_t word, size_t offset, size_t bytes) {
  for (size_t k = 0; k < bytes / 4; k++) w->staged_at[word + k] = offset + 4 * k;
  gpumem_status_t st = gpumem_copy_async(w->staging + word, (const char*)b->ptr + offset, bytes, w->streams[b->home]);
  if (st != GPUMEM_SUCCESS) record(w, "gpumem_copy_async to pinned memory", st);
  return st == GPUMEM_SUCCESS;
}

/* Reads the buffer back on the stream that filled it, synchronizing that stream alone. Any
 * overlap with another owner's chunk holds the first word of one of the two, and chunks start on
 * multiples of 512 bytes, so besides both ends the samples are mostly at such offsets. */
static void check(struct worker* w, const struct buffer* b) {
  size_t words = 0;
  if (b->size <= WHOLE_LIMIT) {
    if (!stage(w, b, 0, 0, b->size)) return;
    words = b->size / 4;
  } else {
    if (!stage(w, b, 0, 0, EDGE) || !stage(w, b, EDGE / 4, b->size - EDGE, EDGE)) return;
    words = 2 * EDGE / 4;
    for (int k = 0; k < SAMPLES; k++) {
      const uint32_t r = next_random(&w->random);
      const size_t offset = k % 4 == 3 ? (r % (b->size / 4)) * 4 : (r % ((b->size - 1) / POOL_ROUND + 1)) * POOL_ROUND;
      if (!stage(w, b, words++, offset, 4)) return;
    }
  }
  const int result = w->shared->stream_sync(w->streams[b->home]);
  if (result != 0) {
    record_sync(w, b->home, result);
    return;
  }
  w->checks++;
  for (size_t k = 0; k < words; k++) {
    if (w->staging[k] == b->pattern) continue;
    if (w->error[0] == '\0') {
      char whose[96];
      describe(w->shared, w->staging[k], whose, sizeof whose);
      snprintf(w->error, sizeof w->error,
               "thread %d: buffer %u of %zu bytes at %p, allocated on %s: the word at offset %zu is 0x%08x (%s), "
               "expected 0x%08x: another owner wrote into it",
               w->index, b->serial, b->size, (void*)b->ptr, stream_name(b->home), w->staged_at[k], w->staging[k], whose,
               b->pattern);
    }
    return;
  }
}

static void acquire(struct worker* w, struct buffer* b) {
  const size_t size = pick_size(w);
  const int home = (int)(next_random(&w->random) % STREAMS);
  void* p = NULL;
  gpumem_status_t st = gpumem_alloc(w->shared->pool, size, w->streams[home], &p);
  if (st != GPUMEM_SUCCESS) {
    char what[96];
    snprintf(what, sizeof what, "gpumem_alloc of %zu bytes on %s", size, stream_name(home));
    record(w, what, st);
    return;
  }
  w->allocs++;
  w->live_bytes += rounded(size);
  if (w->live_bytes > w->peak_live_bytes) w->peak_live_bytes = w->live_bytes;
  b->ptr = p;
  b->size = size;
  b->home = home;
  b->serial = w->serial++;
  b->pattern = pattern_of(w->round, w->index, b->serial);
  st = gpumem_memset_async(p, b->pattern, 4, size / 4, w->streams[home]);
  if (st != GPUMEM_SUCCESS) record(w, "gpumem_memset_async", st);
  if (next_random(&w->random) % 8 == 0) keep_busy(w, b, home);
}

/* Checks the buffer, then frees it one of the three ways. The only work queued after the check is
 * on the stream the pool must order the memory's next use after (the freeing stream, or the
 * recorded one), and it rewrites the pattern, so a second owner that sees it was not fenced. */
static void retire(struct worker* w, struct buffer* b) {
  check(w, b);
  const uint32_t r = next_random(&w->random);
  const enum retire_mode mode = r % 10 < 4 ? FREE_HOME : r % 10 < 7 ? FREE_ELSEWHERE : FREE_RECORDED;
  const bool busy = (r >> 8) % 4 == 0;
  const int other = (b->home + 1 + (int)((r >> 12) % (STREAMS - 1))) % STREAMS;
  int free_on = b->home;
  gpumem_status_t st = GPUMEM_SUCCESS;
  switch (mode) {
    case FREE_HOME:
      if (busy) keep_busy(w, b, b->home);
      break;
    case FREE_ELSEWHERE:
      free_on = other;
      if (busy)
        keep_busy(w, b, other);
      else if ((st = gpumem_memset_async(b->ptr, b->pattern, 4, b->size / 4, w->streams[other])) != GPUMEM_SUCCESS)
        record(w, "gpumem_memset_async", st);
      break;
    case FREE_RECORDED:
      if ((st = gpumem_pool_record_stream(w->shared->pool, b->ptr, w->streams[other])) != GPUMEM_SUCCESS) {
        record(w, "gpumem_pool_record_stream", st);
        break;
      }
      if (busy)
        keep_busy(w, b, other);
      else if ((st = gpumem_memset_async(b->ptr, b->pattern, 4, b->size / 4, w->streams[other])) != GPUMEM_SUCCESS)
        record(w, "gpumem_memset_async", st);
      break;
    case MODES:
      break;
  }
  st = gpumem_free(w->shared->pool, b->ptr, w->streams[free_on]);
  if (st != GPUMEM_SUCCESS) {
    record(w, "gpumem_free", st);
  } else {
    w->frees++;
    w->by_mode[mode]++;
    w->live_bytes -= rounded(b->size);
    w->last_freed_size = b->size;
  }
  b->ptr = NULL;
}

static void* stress(void* arg) {
  struct worker* w = arg;
  struct buffer live[SLOTS];
  memset(live, 0, sizeof live);
  pthread_barrier_wait(&w->shared->start);
  for (int op = 0; op < OPS && w->error[0] == '\0'; op++) {
    struct buffer* b = &live[next_random(&w->random) % SLOTS];
    if (b->ptr)
      retire(w, b);
    else
      acquire(w, b);
  }
  for (int i = 0; i < SLOTS; i++)
    if (live[i].ptr) retire(w, &live[i]);
  return NULL;
}

static int gpu_setup(void** state) {
  static struct fixture f;
  memset(&f, 0, sizeof f);
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  f.threads = cpus < 2 ? 2 : cpus > MAX_THREADS ? MAX_THREADS : (int)cpus;
  for (int t = 0; t < f.threads; t++)
    for (int s = 0; s < OWN_STREAMS; s++) f.own[t][s] = test_stream_create(0);
  for (int s = 0; s < SHARED_STREAMS; s++) f.shared[s] = test_stream_create(0);
  *state = &f;
  return 0;
}

/* Each round's pool is destroyed before this: a pool may record events on a stream it holds memory for. */
static int gpu_teardown(void** state) {
  struct fixture* f = *state;
  for (int t = 0; t < f->threads; t++)
    for (int s = 0; s < OWN_STREAMS; s++) {
      test_stream_sync(f->own[t][s]);
      test_stream_destroy(f->own[t][s]);
    }
  for (int s = 0; s < SHARED_STREAMS; s++) {
    test_stream_sync(f->shared[s]);
    test_stream_destroy(f->shared[s]);
  }
  return 0;
}

static void run_round(struct fixture* f, int32_t reuse, uint32_t round) {
  gpumem_allocator_t* device = NULL;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_allocator_create_device(0, &device));
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = device;
  /* Far above what the threads hold at once, and set so that GPUMEM_GPU_MEMORY_LIMIT is not read. */
  params.limit = (uint64_t)16 << 30;
  assert_ok(gpumem_pool_create(&params, &pool));
  assert_ok(gpumem_pool_set_stream_reuse(pool, reuse));

  struct shared shared;
  memset(&shared, 0, sizeof shared);
  shared.pool = pool;
  shared.threads = f->threads;
  shared.stream_sync = (test_cu_fn_stream)test_cu_symbol("cuStreamSynchronize");
  assert_int_equal(pthread_barrier_init(&shared.start, NULL, (unsigned)f->threads), 0);

  static struct worker workers[MAX_THREADS];
  pthread_t threads[MAX_THREADS];
  for (int t = 0; t < f->threads; t++) {
    struct worker* w = &workers[t];
    memset(w, 0, sizeof *w);
    w->shared = &shared;
    w->index = t;
    w->round = round;
    w->random = (0x9e3779b9u * (uint32_t)(t + 1) + 0x7f4a7c15u * round) | 1u; /* xorshift stays at 0 */
    for (int s = 0; s < OWN_STREAMS; s++) w->streams[s] = f->own[t][s];
    for (int s = 0; s < SHARED_STREAMS; s++) w->streams[OWN_STREAMS + s] = f->shared[s];
    void* staging = NULL;
    assert_ok(gpumem_host_alloc(STAGING_WORDS * 4, 0, &staging));
    w->staging = staging;
  }
  for (int t = 0; t < f->threads; t++) assert_int_equal(pthread_create(&threads[t], NULL, stress, &workers[t]), 0);
  for (int t = 0; t < f->threads; t++) assert_int_equal(pthread_join(threads[t], NULL), 0);
  pthread_barrier_destroy(&shared.start);

  bool failed = false;
  uint64_t allocs = 0, most_live = 0, sum_of_peaks = 0;
  for (int t = 0; t < f->threads; t++) {
    struct worker* w = &workers[t];
    assert_ok(gpumem_host_free(w->staging));
    if (w->error[0] != '\0') {
      print_error("%s\n", w->error);
      failed = true;
    }
    allocs += w->allocs;
    sum_of_peaks += w->peak_live_bytes;
    if (w->peak_live_bytes > most_live) most_live = w->peak_live_bytes;
  }
  if (failed) fail();
  for (int t = 0; t < f->threads; t++) {
    const struct worker* w = &workers[t];
    /* Every buffer was checked before its free, and each way of freeing was used often. */
    assert_int_equal(w->frees, w->allocs);
    assert_int_equal(w->checks, w->allocs);
    assert_int_equal(w->live_bytes, 0);
    assert_true(w->allocs > OPS / 4);
    for (int m = 0; m < MODES; m++) assert_true(w->by_mode[m] > OPS / 40);
  }

  /* Exact, before any stream is done: a pending free is a free. */
  gpumem_allocator_stats_t s = stats_of(pool);
  assert_int_equal(s.alloc_count, allocs);
  assert_int_equal(s.free_count, allocs);
  assert_int_equal(s.bytes_in_use, 0);
  assert_int_equal(s.bytes_requested, 0);
  assert_int_equal(s.oom_count, 0);
  /* When a thread held its most, the pool held at least that; with threads allocating at once the
   * peak may be over by up to 16 MiB per arena (docs/pool.md), never more. */
  const uint64_t arenas = (uint64_t)(f->threads * OWN_STREAMS + SHARED_STREAMS);
  assert_true(s.peak_bytes_in_use >= most_live);
  assert_true(s.peak_bytes_in_use <= sum_of_peaks + arenas * (16u << 20));
  gpumem_pool_info_t info = pool_info_of(pool);
  assert_int_equal(info.used_bytes, 0);
  assert_int_equal(info.free_bytes + info.pending_bytes, info.total_bytes);
  assert_int_equal(info.total_bytes, s.bytes_reserved);
  assert_int_equal(info.arena_count, (uint32_t)(f->threads * OWN_STREAMS + SHARED_STREAMS));
  assert_int_equal(stats_of(device).bytes_in_use, info.total_bytes);

  /* Once every stream is done, nothing is left pending: a release gives every block back. */
  for (int t = 0; t < f->threads; t++)
    for (int k = 0; k < OWN_STREAMS; k++) test_stream_sync(f->own[t][k]);
  for (int k = 0; k < SHARED_STREAMS; k++) test_stream_sync(f->shared[k]);
  assert_ok(gpumem_pool_release(pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  info = pool_info_of(pool);
  assert_int_equal(info.total_bytes, 0);
  assert_int_equal(info.free_bytes, 0);
  assert_int_equal(info.free_block_count, 0);
  s = stats_of(pool);
  assert_int_equal(s.bytes_reserved, 0);
  assert_int_equal(s.upstream_free_count, s.upstream_alloc_count);
  gpumem_allocator_stats_t d = stats_of(device);
  assert_int_equal(d.bytes_in_use, 0);
  assert_int_equal(d.free_count, d.alloc_count);

  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(device));
}

static void test_threads_pool_streams_gpu_fenced_lending_keeps_owners_apart(void** state) {
  run_round(*state, GPUMEM_STREAM_REUSE_FENCE, 1);
}

static void test_threads_pool_streams_gpu_host_wait_lending_keeps_owners_apart(void** state) {
  run_round(*state, GPUMEM_STREAM_REUSE_HOST_WAIT, 2);
}

static void test_threads_pool_streams_gpu_no_lending_keeps_owners_apart(void** state) {
  run_round(*state, GPUMEM_STREAM_REUSE_NEVER, 3);
}

int main(void) {
  if (!gpu_available()) {
    printf("all tests need a GPU: %s\n", gpumem_last_error_detail());
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_pool_streams_gpu_fenced_lending_keeps_owners_apart),
      cmocka_unit_test(test_threads_pool_streams_gpu_host_wait_lending_keeps_owners_apart),
      cmocka_unit_test(test_threads_pool_streams_gpu_no_lending_keeps_owners_apart),
  };
  return cmocka_run_group_tests(tests, gpu_setup, gpu_teardown);
}
