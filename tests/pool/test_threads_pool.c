/* One pool under many threads: no two live allocations overlap, the statistics add up exactly
 * afterwards, arenas per stream and per thread, hooks added and removed while others allocate,
 * and a thread override per thread. Shared test state is behind mutexes, so ThreadSanitizer has
 * only the library to look at. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>

#include "test_util.h"

#define THREADS 8
#define OPS 4000
#define SLOTS 32
#define MAX_SIZE (256 * 1024)

struct shared {
  gpumem_allocator_t* pool;
  pthread_barrier_t barrier;
};

struct worker {
  struct shared* shared;
  int index;
  gpumem_stream_t stream;
  uint64_t allocs;
  char error[256];
};

static void record(struct worker* w, const char* what, gpumem_status_t status) {
  if (w->error[0] == '\0')
    snprintf(w->error, sizeof w->error, "thread %d: %s (%s: %s)", w->index, what, gpumem_status_name(status),
             gpumem_last_error_detail());
}

static uint32_t next_random(uint32_t* state) {
  uint32_t x = *state;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *state = x;
}

/* Every live allocation in the process gets its own byte (THREADS * SLOTS <= 256), so memory
 * handed to two owners at once shows up as a wrong byte in one of them. The pool's chunks start on
 * multiples of 512 bytes, so any overlap of two holds a byte at a multiple of 512 from both starts:
 * marking those bytes and the last one is enough, and keeps the test fast under sanitizers. */
#define STRIDE 512

static unsigned char pattern(int thread, int slot) { return (unsigned char)(thread * SLOTS + slot); }

static void mark(unsigned char* p, size_t size, unsigned char byte) {
  for (size_t i = 0; i < size; i += STRIDE) p[i] = byte;
  p[size - 1] = byte;
}

static bool marked(const unsigned char* p, size_t size, unsigned char byte) {
  for (size_t i = 0; i < size; i += STRIDE)
    if (p[i] != byte) return false;
  return p[size - 1] == byte;
}

struct slot {
  unsigned char* ptr;
  size_t size;
};

static void release_slot(struct worker* w, struct slot* s, int index) {
  if (!marked(s->ptr, s->size, pattern(w->index, index)) && w->error[0] == '\0')
    snprintf(w->error, sizeof w->error, "thread %d: %zu bytes at %p were written by another owner", w->index, s->size,
             (void*)s->ptr);
  gpumem_status_t st = gpumem_free(w->shared->pool, s->ptr, w->stream);
  if (st != GPUMEM_SUCCESS) record(w, "free failed", st);
  s->ptr = NULL;
}

static void* hammer(void* arg) {
  struct worker* w = arg;
  struct slot slots[SLOTS];
  memset(slots, 0, sizeof slots);
  uint32_t random = 0x9e3779b9u * (uint32_t)(w->index + 1);
  pthread_barrier_wait(&w->shared->barrier);
  for (int op = 0; op < OPS && w->error[0] == '\0'; ++op) {
    const int i = (int)(next_random(&random) % SLOTS);
    struct slot* s = &slots[i];
    if (s->ptr) {
      release_slot(w, s, i);
      continue;
    }
    /* Mostly small, some up to 256 KiB. */
    const uint32_t r = next_random(&random);
    const size_t size = 1 + (r % 4 == 0 ? (r >> 2) % MAX_SIZE : (r >> 2) % 4096);
    void* p = NULL;
    gpumem_status_t st = gpumem_alloc(w->shared->pool, size, w->stream, &p);
    if (st != GPUMEM_SUCCESS) {
      record(w, "alloc failed", st);
      break;
    }
    ++w->allocs;
    s->ptr = p;
    s->size = size;
    mark(p, size, pattern(w->index, i));
  }
  for (int i = 0; i < SLOTS; ++i)
    if (slots[i].ptr) release_slot(w, &slots[i], i);
  /* Nobody leaves before everyone is done, so per-thread streams of live threads are all distinct. */
  pthread_barrier_wait(&w->shared->barrier);
  return NULL;
}

/* Runs the hammer on THREADS threads, each on the stream stream_of gives it; returns the allocations made. */
static uint64_t run_hammer(gpumem_allocator_t* pool, gpumem_stream_t (*stream_of)(int)) {
  struct shared shared;
  shared.pool = pool;
  assert_int_equal(pthread_barrier_init(&shared.barrier, NULL, THREADS), 0);
  struct worker workers[THREADS];
  pthread_t threads[THREADS];
  for (int t = 0; t < THREADS; ++t) {
    memset(&workers[t], 0, sizeof workers[t]);
    workers[t].shared = &shared;
    workers[t].index = t;
    workers[t].stream = stream_of(t);
    assert_int_equal(pthread_create(&threads[t], NULL, hammer, &workers[t]), 0);
  }
  uint64_t allocs = 0;
  for (int t = 0; t < THREADS; ++t) {
    assert_int_equal(pthread_join(threads[t], NULL), 0);
    allocs += workers[t].allocs;
  }
  pthread_barrier_destroy(&shared.barrier);
  for (int t = 0; t < THREADS; ++t) {
    if (workers[t].error[0] != '\0') fail_msg("%s", workers[t].error);
    assert_true(workers[t].allocs > OPS / 4);
  }
  return allocs;
}

/* After every thread has freed everything: exact statistics, and release gives all back. */
static void assert_all_returned(gpumem_allocator_t* pool, gpumem_allocator_t* host, uint64_t allocs) {
  gpumem_allocator_stats_t s = stats_of(pool);
  assert_int_equal(s.bytes_in_use, 0);
  assert_int_equal(s.bytes_requested, 0);
  assert_int_equal(s.alloc_count, allocs);
  assert_int_equal(s.free_count, allocs);
  assert_int_equal(s.oom_count, 0);
  gpumem_pool_info_t info = pool_info_of(pool);
  assert_int_equal(info.used_bytes, 0);
  assert_int_equal(info.free_bytes, info.total_bytes);
  assert_int_equal(stats_of(host).bytes_in_use, info.total_bytes);
  /* Every cached chunk merged back into its whole block. */
  assert_int_equal(info.free_block_count, stats_of(host).alloc_count - stats_of(host).free_count);

  assert_ok(gpumem_pool_release(pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  gpumem_allocator_stats_t h = stats_of(host);
  assert_int_equal(h.bytes_in_use, 0);
  assert_int_equal(h.alloc_count, h.free_count);
  info = pool_info_of(pool);
  assert_int_equal(info.total_bytes, 0);
  assert_int_equal(info.free_block_count, 0);
}

static void make_pool(gpumem_allocator_t** host, gpumem_allocator_t** pool) {
  assert_ok(gpumem_allocator_create_host(0, host));
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = *host;
  assert_ok(gpumem_pool_create(&params, pool));
}

static void destroy_pool(gpumem_allocator_t* host, gpumem_allocator_t* pool) {
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(host));
}

static gpumem_stream_t default_stream(int thread) {
  (void)thread;
  return NULL;
}

static gpumem_stream_t own_stream(int thread) { return (gpumem_stream_t)(uintptr_t)(0x1000 + 0x100 * thread); }

static gpumem_stream_t per_thread_stream(int thread) {
  (void)thread;
  return GPUMEM_STREAM_PER_THREAD;
}

static void test_threads_pool_one_stream(void** state) {
  (void)state;
  gpumem_allocator_t *host, *pool;
  make_pool(&host, &pool);
  uint64_t allocs = run_hammer(pool, default_stream);
  assert_int_equal(pool_info_of(pool).arena_count, 1);
  assert_all_returned(pool, host, allocs);
  destroy_pool(host, pool);
}

static void test_threads_pool_own_streams(void** state) {
  (void)state;
  gpumem_allocator_t *host, *pool;
  make_pool(&host, &pool);
  uint64_t allocs = run_hammer(pool, own_stream);
  assert_int_equal(pool_info_of(pool).arena_count, THREADS);

  /* Releasing one thread's stream leaves the others' cached blocks. */
  const uint64_t total = pool_info_of(pool).total_bytes;
  assert_ok(gpumem_pool_release(pool, own_stream(0), 0));
  const uint64_t after = pool_info_of(pool).total_bytes;
  assert_true(after < total);
  assert_true(after > 0);
  assert_int_equal(stats_of(host).bytes_in_use, after);

  assert_all_returned(pool, host, allocs);
  destroy_pool(host, pool);
}

static void test_threads_pool_per_thread_stream(void** state) {
  (void)state;
  gpumem_allocator_t *host, *pool;
  make_pool(&host, &pool);
  uint64_t allocs = run_hammer(pool, per_thread_stream);
  assert_int_equal(pool_info_of(pool).arena_count, THREADS);
  assert_all_returned(pool, host, allocs);
  destroy_pool(host, pool);
}

/* Counts hook events; shared by the allocating threads. */
struct hook_counter {
  pthread_mutex_t mutex;
  gpumem_allocator_t* pool;
  uint64_t malloc_posts, free_posts, wrong;
};

static void count_hook(const gpumem_hook_info_t* info, void* user_data) {
  struct hook_counter* c = user_data;
  pthread_mutex_lock(&c->mutex);
  /* Only the pre-allocation events come before there is memory to point at. */
  const bool has_ptr = info->event == GPUMEM_HOOK_MALLOC_POST || info->event == GPUMEM_HOOK_FREE_PRE ||
                       info->event == GPUMEM_HOOK_FREE_POST || info->event == GPUMEM_HOOK_UPSTREAM_ALLOC_POST;
  if (info->allocator != c->pool || info->status != GPUMEM_SUCCESS || (has_ptr && info->ptr == NULL)) ++c->wrong;
  if (info->event == GPUMEM_HOOK_MALLOC_POST) ++c->malloc_posts;
  if (info->event == GPUMEM_HOOK_FREE_POST) ++c->free_posts;
  pthread_mutex_unlock(&c->mutex);
}

struct hook_churn {
  gpumem_allocator_t* pool;
  struct hook_counter* transient;
  pthread_mutex_t mutex;
  bool stop;
  int rounds;
  char error[256];
};

static bool churn_should_stop(struct hook_churn* h) {
  pthread_mutex_lock(&h->mutex);
  bool stop = h->stop;
  pthread_mutex_unlock(&h->mutex);
  return stop;
}

/* Adds and removes hooks of every kind while the hammer runs. */
static void* churn_hooks(void* arg) {
  struct hook_churn* h = arg;
  int rounds = 0;
  /* At least a few rounds even if the hammer finishes first. */
  while (rounds < 50 || !churn_should_stop(h)) {
    uint64_t ids[3] = {0, 0, 0};
    const uint32_t masks[3] = {GPUMEM_HOOK_MALLOC_POST, GPUMEM_HOOK_FREE_POST | GPUMEM_HOOK_FREE_PRE, GPUMEM_HOOK_ALL};
    for (int i = 0; i < 3; ++i)
      if (gpumem_allocator_add_hook(h->pool, masks[i], count_hook, h->transient, &ids[i]) != GPUMEM_SUCCESS &&
          h->error[0] == '\0')
        snprintf(h->error, sizeof h->error, "add_hook: %s", gpumem_last_error_detail());
    for (int i = 2; i >= 0; --i)
      if (gpumem_allocator_remove_hook(h->pool, ids[i]) != GPUMEM_SUCCESS && h->error[0] == '\0')
        snprintf(h->error, sizeof h->error, "remove_hook: %s", gpumem_last_error_detail());
    ++rounds;
  }
  h->rounds = rounds;
  return NULL;
}

static void test_threads_pool_hooks_change_while_allocating(void** state) {
  (void)state;
  gpumem_allocator_t *host, *pool;
  make_pool(&host, &pool);
  struct hook_counter steady, transient;
  memset(&steady, 0, sizeof steady);
  memset(&transient, 0, sizeof transient);
  assert_int_equal(pthread_mutex_init(&steady.mutex, NULL), 0);
  assert_int_equal(pthread_mutex_init(&transient.mutex, NULL), 0);
  steady.pool = pool;
  transient.pool = pool;
  uint64_t steady_id = 0;
  assert_ok(gpumem_allocator_add_hook(pool, GPUMEM_HOOK_MALLOC_POST | GPUMEM_HOOK_FREE_POST, count_hook, &steady,
                                      &steady_id));

  struct hook_churn churn;
  memset(&churn, 0, sizeof churn);
  churn.pool = pool;
  churn.transient = &transient;
  assert_int_equal(pthread_mutex_init(&churn.mutex, NULL), 0);
  pthread_t churner;
  assert_int_equal(pthread_create(&churner, NULL, churn_hooks, &churn), 0);
  uint64_t allocs = run_hammer(pool, own_stream);
  pthread_mutex_lock(&churn.mutex);
  churn.stop = true;
  pthread_mutex_unlock(&churn.mutex);
  assert_int_equal(pthread_join(churner, NULL), 0);
  if (churn.error[0] != '\0') fail_msg("%s", churn.error);
  assert_true(churn.rounds >= 50);
  assert_ok(gpumem_allocator_remove_hook(pool, steady_id));

  /* The hook present throughout saw every allocation and free, and only good ones. */
  assert_int_equal(steady.malloc_posts, allocs);
  assert_int_equal(steady.free_posts, allocs);
  assert_int_equal(steady.wrong, 0);
  assert_int_equal(transient.wrong, 0);
  /* Removed hooks are not run any more. */
  const uint64_t seen = transient.malloc_posts + transient.free_posts;
  void* p = NULL;
  assert_ok(gpumem_alloc(pool, 1, NULL, &p));
  assert_ok(gpumem_free(pool, p, NULL));
  assert_int_equal(transient.malloc_posts + transient.free_posts, seen);
  assert_int_equal(steady.malloc_posts, allocs);

  assert_all_returned(pool, host, allocs + 1);
  pthread_mutex_destroy(&churn.mutex);
  pthread_mutex_destroy(&steady.mutex);
  pthread_mutex_destroy(&transient.mutex);
  destroy_pool(host, pool);
}

struct override_worker {
  gpumem_allocator_t* pool;
  pthread_barrier_t* barrier;
  int allocs;
  char error[256];
};

/* With its own pool as the thread's override, a NULL allocator means that pool on this thread. */
static void* use_override(void* arg) {
  struct override_worker* w = arg;
  gpumem_allocator_t* previous = (gpumem_allocator_t*)0x1;
  gpumem_allocator_t* current = NULL;
  if (gpumem_allocator_set_thread(w->pool, &previous) != GPUMEM_SUCCESS || previous != NULL)
    snprintf(w->error, sizeof w->error, "set_thread: previous %p, %s", (void*)previous, gpumem_last_error_detail());
  pthread_barrier_wait(w->barrier);
  if (gpumem_allocator_get_thread(&current) != GPUMEM_SUCCESS || current != w->pool)
    snprintf(w->error, sizeof w->error, "get_thread gave %p, not %p", (void*)current, (void*)w->pool);
  void* live[16];
  for (int round = 0; round < 50 && w->error[0] == '\0'; ++round) {
    int n = 0;
    for (; n < 16; ++n) {
      if (gpumem_alloc(NULL, 512 * (size_t)(n + 1), NULL, &live[n]) != GPUMEM_SUCCESS) {
        snprintf(w->error, sizeof w->error, "alloc: %s", gpumem_last_error_detail());
        break;
      }
      ++w->allocs;
    }
    for (int i = 0; i < n; ++i)
      if (gpumem_free(NULL, live[i], NULL) != GPUMEM_SUCCESS)
        snprintf(w->error, sizeof w->error, "free: %s", gpumem_last_error_detail());
  }
  pthread_barrier_wait(w->barrier);
  if (gpumem_allocator_set_thread(NULL, &previous) != GPUMEM_SUCCESS || previous != w->pool)
    snprintf(w->error, sizeof w->error, "restoring: previous %p, not %p", (void*)previous, (void*)w->pool);
  return NULL;
}

static void test_threads_pool_thread_override(void** state) {
  (void)state;
  gpumem_allocator_t* host[THREADS];
  gpumem_allocator_t* pools[THREADS];
  struct override_worker workers[THREADS];
  pthread_t threads[THREADS];
  pthread_barrier_t barrier;
  assert_int_equal(pthread_barrier_init(&barrier, NULL, THREADS), 0);
  for (int t = 0; t < THREADS; ++t) {
    make_pool(&host[t], &pools[t]);
    memset(&workers[t], 0, sizeof workers[t]);
    workers[t].pool = pools[t];
    workers[t].barrier = &barrier;
    assert_int_equal(pthread_create(&threads[t], NULL, use_override, &workers[t]), 0);
  }
  for (int t = 0; t < THREADS; ++t) assert_int_equal(pthread_join(threads[t], NULL), 0);
  pthread_barrier_destroy(&barrier);
  /* The main thread's override was never touched. */
  gpumem_allocator_t* mine = (gpumem_allocator_t*)0x1;
  assert_ok(gpumem_allocator_get_thread(&mine));
  assert_null(mine);
  for (int t = 0; t < THREADS; ++t) {
    if (workers[t].error[0] != '\0') fail_msg("thread %d: %s", t, workers[t].error);
    /* Each thread's allocations went to its own pool and nowhere else. */
    gpumem_allocator_stats_t s = stats_of(pools[t]);
    assert_int_equal(s.alloc_count, (uint64_t)workers[t].allocs);
    assert_int_equal(s.alloc_count, 50 * 16);
    assert_int_equal(s.free_count, s.alloc_count);
    assert_int_equal(s.bytes_in_use, 0);
    /* No longer an override anywhere: destroy is allowed. */
    destroy_pool(host[t], pools[t]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_pool_one_stream),
      cmocka_unit_test(test_threads_pool_own_streams),
      cmocka_unit_test(test_threads_pool_per_thread_stream),
      cmocka_unit_test(test_threads_pool_hooks_change_while_allocating),
      cmocka_unit_test(test_threads_pool_thread_override),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
