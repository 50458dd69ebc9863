/* Fault injection: an upstream given as C functions that fails at random (out of memory, driver
 * errors, frees that fail), backed by malloc with its own ledger of live blocks. A pool over it,
 * and the raw functions allocator itself, are driven through thousands of seeded random
 * operations; after every one the statistics must match a model exactly, and the ledger must match
 * what the allocator says it holds: nothing leaks, nothing is counted twice, and a failed free
 * leaves the block where it was. */
#include <stdlib.h>

#include "test_util.h"

#define KIB ((size_t)1024)
#define ROUND ((size_t)512)
#define MAX_BLOCKS 1024
#define MAX_LIVE 256

static const gpumem_stream_t streams[] = {NULL, GPUMEM_STREAM_PER_THREAD, (gpumem_stream_t)(uintptr_t)0x1000,
                                          (gpumem_stream_t)(uintptr_t)0x2000};

/* xorshift64*: the same sequence on every run. */
static uint64_t next_random(uint64_t* state) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return *state * 0x2545f4914f6cdd1dULL;
}

static size_t random_below(uint64_t* state, size_t n) { return (size_t)(next_random(state) >> 11) % n; }

/* What the faulty upstream did and holds. */
struct faulty {
  uint64_t rng;
  unsigned oom_percent, driver_percent, free_fail_percent;
  /* Outcomes to give first, in order, before the random ones (GPUMEM_SUCCESS means "no fault"). */
  gpumem_status_t forced[8];
  size_t forced_count;
  bool null_success_next; /* the next alloc returns success and no memory */
  void* ptrs[MAX_BLOCKS];
  size_t sizes[MAX_BLOCKS];
  size_t count;
  uint64_t bytes;
  /* Every call and its outcome. */
  uint64_t alloc_calls, alloc_ok, alloc_oom, alloc_driver, free_calls, free_ok, free_failed;
  gpumem_status_t last_alloc_status;
  bool unknown_free; /* the allocator freed something the upstream never gave it */
  bool size_mismatch;
  int destroyed;
};

static gpumem_status_t faulty_alloc(void* context, size_t size, int32_t device, gpumem_stream_t stream,
                                    void** out_ptr) {
  struct faulty* f = context;
  (void)stream;
  ++f->alloc_calls;
  gpumem_status_t st = GPUMEM_SUCCESS;
  if (f->forced_count) {
    st = f->forced[0];
    memmove(f->forced, f->forced + 1, --f->forced_count * sizeof f->forced[0]);
  } else {
    const unsigned r = (unsigned)random_below(&f->rng, 100);
    if (r < f->oom_percent)
      st = GPUMEM_ERROR_OUT_OF_MEMORY;
    else if (r < f->oom_percent + f->driver_percent)
      st = GPUMEM_ERROR_DRIVER;
  }
  if (st == GPUMEM_SUCCESS && f->null_success_next) {
    f->null_success_next = false;
    *out_ptr = NULL;
    f->last_alloc_status = GPUMEM_SUCCESS;
    return GPUMEM_SUCCESS;
  }
  void* p = NULL;
  if (st == GPUMEM_SUCCESS && (device != -1 || f->count == MAX_BLOCKS || (p = malloc(size)) == NULL))
    st = GPUMEM_ERROR_OUT_OF_MEMORY;
  f->last_alloc_status = st;
  if (st == GPUMEM_ERROR_OUT_OF_MEMORY) ++f->alloc_oom;
  if (st == GPUMEM_ERROR_DRIVER) ++f->alloc_driver;
  if (st != GPUMEM_SUCCESS) return st;
  f->ptrs[f->count] = p;
  f->sizes[f->count] = size;
  ++f->count;
  f->bytes += size;
  ++f->alloc_ok;
  *out_ptr = p;
  return GPUMEM_SUCCESS;
}

static gpumem_status_t faulty_free(void* context, void* ptr, size_t size, int32_t device, gpumem_stream_t stream) {
  struct faulty* f = context;
  (void)device;
  (void)stream;
  ++f->free_calls;
  size_t i = 0;
  while (i < f->count && f->ptrs[i] != ptr) ++i;
  if (i == f->count) {
    f->unknown_free = true;
    return GPUMEM_ERROR_INVALID_ARGUMENT;
  }
  if (f->sizes[i] != size) f->size_mismatch = true;
  if (random_below(&f->rng, 100) < f->free_fail_percent) {
    ++f->free_failed;
    return GPUMEM_ERROR_DRIVER;
  }
  free(ptr);
  f->bytes -= f->sizes[i];
  --f->count;
  f->ptrs[i] = f->ptrs[f->count];
  f->sizes[i] = f->sizes[f->count];
  ++f->free_ok;
  return GPUMEM_SUCCESS;
}

static void faulty_destroy(void* context) { ++((struct faulty*)context)->destroyed; }

static gpumem_allocator_t* create_faulty(struct faulty* f, uint64_t seed) {
  memset(f, 0, sizeof *f);
  f->rng = seed;
  gpumem_allocator_functions_t fns;
  memset(&fns, 0, sizeof fns);
  fns.struct_size = sizeof fns;
  fns.context = f;
  fns.device = -1;
  fns.alloc = faulty_alloc;
  fns.free = faulty_free;
  fns.destroy = faulty_destroy;
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_allocator_create_functions(&fns, &a));
  assert_non_null(a);
  return a;
}

static gpumem_allocator_t* create_pool(gpumem_allocator_t* upstream, uint64_t limit) {
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = upstream;
  params.limit = limit;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&params, &pool));
  assert_non_null(pool);
  return pool;
}

/* Destroys the pool and the upstream: every block back, the context released once. */
static void destroy_all(gpumem_allocator_t* pool, gpumem_allocator_t* upstream, struct faulty* f) {
  if (pool) assert_ok(gpumem_allocator_destroy(pool));
  assert_int_equal(f->count, 0);
  assert_ok(gpumem_allocator_destroy(upstream));
  assert_int_equal(f->destroyed, 1);
  assert_false(f->unknown_free);
  assert_false(f->size_mismatch);
}

struct live {
  unsigned char* ptr;
  size_t size;
  unsigned char pattern;
};

/* The model of what the caller holds from an allocator, and what the allocator must report. */
struct model {
  struct live live[MAX_LIVE];
  size_t count;
  uint64_t in_use, requested, peak_in_use, allocs, frees, ooms, retries;
  unsigned serial;
};

static size_t round_up(size_t size) { return (size + ROUND - 1) / ROUND * ROUND; }

static void model_add(struct model* m, void* p, size_t size, size_t accounted) {
  assert_true(m->count < MAX_LIVE);
  struct live* l = &m->live[m->count++];
  l->ptr = p;
  l->size = size;
  l->pattern = (unsigned char)(0xa5 ^ ++m->serial * 37);
  l->ptr[0] = l->pattern;
  l->ptr[size - 1] = l->pattern;
  ++m->allocs;
  m->in_use += accounted;
  m->requested += size;
  if (m->in_use > m->peak_in_use) m->peak_in_use = m->in_use;
}

static void model_check_contents(const struct model* m) {
  for (size_t i = 0; i < m->count; ++i) {
    const struct live* l = &m->live[i];
    if (l->ptr[0] != l->pattern || l->ptr[l->size - 1] != l->pattern) {
      print_error("the block at %p (%zu bytes) lost its contents\n", (void*)l->ptr, l->size);
      fail();
    }
  }
}

/* The upstream's own statistics against its ledger: what the raw allocator holds is what the
 * functions gave and did not take back. */
static void check_upstream(gpumem_allocator_t* upstream, const struct faulty* f) {
  const gpumem_allocator_stats_t u = stats_of(upstream);
  assert_int_equal(u.bytes_in_use, f->bytes);
  assert_int_equal(u.bytes_reserved, f->bytes);
  assert_int_equal(u.bytes_requested, f->bytes);
  assert_int_equal(u.alloc_count, f->alloc_ok);
  assert_int_equal(u.free_count, f->free_ok);
  assert_int_equal(u.upstream_alloc_count, f->alloc_ok);
  assert_int_equal(u.upstream_free_count, f->free_ok);
  /* Out of memory counts only the function's refusals: a driver error is not one. */
  assert_int_equal(u.oom_count, f->alloc_oom);
  assert_false(f->unknown_free);
  assert_false(f->size_mismatch);
}

static void check_pool(gpumem_allocator_t* pool, gpumem_allocator_t* upstream, const struct model* m,
                       const struct faulty* f, uint64_t limit) {
  const gpumem_allocator_stats_t s = stats_of(pool);
  assert_int_equal(s.bytes_in_use, m->in_use);
  assert_int_equal(s.bytes_requested, m->requested);
  assert_int_equal(s.peak_bytes_in_use, m->peak_in_use);
  assert_int_equal(s.alloc_count, m->allocs);
  assert_int_equal(s.free_count, m->frees);
  assert_int_equal(s.oom_count, m->ooms);
  assert_int_equal(s.retry_count, m->retries);
  /* Every byte the upstream gave and did not take back is the pool's, and no other. */
  assert_int_equal(s.bytes_reserved, f->bytes);
  assert_int_equal(s.upstream_alloc_count, f->alloc_ok);
  assert_int_equal(s.upstream_free_count, f->free_ok);
  const gpumem_pool_info_t i = pool_info_of(pool);
  assert_int_equal(i.used_bytes, m->in_use);
  assert_int_equal(i.total_bytes, f->bytes);
  assert_int_equal(i.used_bytes + i.free_bytes, i.total_bytes);
  if (limit) assert_true(i.total_bytes <= limit);
  check_upstream(upstream, f);
  model_check_contents(m);
}

static size_t random_size(uint64_t* rng) {
  switch (random_below(rng, 4)) {
    case 0:
      return 1 + random_below(rng, 512);
    case 1:
      return 1 + random_below(rng, 8 * KIB);
    case 2:
      return (1 + random_below(rng, 64)) * ROUND;
    default:
      return 1 + random_below(rng, 256 * KIB);
  }
}

/* One allocation from the pool; its outcome must follow from what the upstream answered. */
static void pool_alloc(gpumem_allocator_t* pool, struct model* m, struct faulty* f, uint64_t* rng) {
  const size_t size = random_size(rng);
  const gpumem_stream_t stream = streams[random_below(rng, 4)];
  const uint64_t calls_before = f->alloc_calls, retries_before = stats_of(pool).retry_count;
  void* p = (void*)0x1;
  const gpumem_status_t st = gpumem_alloc(pool, size, stream, &p);
  const uint64_t calls = f->alloc_calls - calls_before;
  const uint64_t retried = stats_of(pool).retry_count - retries_before;
  /* A grow, then at most one retry after returning cached blocks: no reclaim callbacks here. */
  assert_true(calls <= 2);
  assert_true(retried <= 1);
  m->retries += retried;
  if (calls) {
    const gpumem_status_t upstream_said = f->last_alloc_status;
    /* An upstream error other than out of memory ends the allocation at once, unchanged. */
    if (upstream_said == GPUMEM_ERROR_DRIVER) {
      assert_status(st, GPUMEM_ERROR_DRIVER);
      assert_detail_contains("returned GPUMEM_ERROR_DRIVER");
    } else if (upstream_said == GPUMEM_ERROR_OUT_OF_MEMORY) {
      /* Refused: the pool returned its cached blocks and retried before giving up. */
      assert_int_equal(retried, 1);
      if (st != GPUMEM_SUCCESS) assert_status(st, GPUMEM_ERROR_OUT_OF_MEMORY);
    } else {
      assert_ok(st);
    }
  }
  if (st == GPUMEM_SUCCESS) {
    assert_non_null(p);
    model_add(m, p, size, round_up(size));
    return;
  }
  assert_null(p);
  if (st == GPUMEM_ERROR_OUT_OF_MEMORY) {
    assert_true(retried == 1);
    assert_detail_contains("out of memory allocating");
    ++m->ooms;
  } else {
    assert_status(st, GPUMEM_ERROR_DRIVER);
  }
}

static void model_free(gpumem_allocator_t* a, struct model* m, size_t index, size_t accounted, gpumem_stream_t stream) {
  struct live l = m->live[index];
  assert_ok(gpumem_free(a, l.ptr, stream));
  m->live[index] = m->live[--m->count];
  ++m->frees;
  m->in_use -= accounted;
  m->requested -= l.size;
}

/* Returns cached blocks; a block the upstream refuses to take back stays in the pool. */
static void pool_release(gpumem_allocator_t* pool, struct faulty* f, gpumem_stream_t stream, uint32_t flags) {
  const uint64_t failed_before = f->free_failed;
  const gpumem_pool_info_t before = pool_info_of(pool);
  const gpumem_status_t st = gpumem_pool_release(pool, stream, flags);
  if (f->free_failed != failed_before) {
    assert_status(st, GPUMEM_ERROR_DRIVER);
    assert_detail_contains("returned GPUMEM_ERROR_DRIVER");
  } else {
    assert_ok(st);
  }
  const gpumem_pool_info_t after = pool_info_of(pool);
  assert_int_equal(after.used_bytes, before.used_bytes);
  assert_true(after.total_bytes <= before.total_bytes);
}

static void run_pool(uint64_t seed, uint64_t limit, unsigned oom, unsigned driver, unsigned free_fail, int ops) {
  struct faulty f;
  gpumem_allocator_t* upstream = create_faulty(&f, seed);
  f.oom_percent = oom;
  f.driver_percent = driver;
  f.free_fail_percent = free_fail;
  gpumem_allocator_t* pool = create_pool(upstream, limit);
  static struct model m;
  memset(&m, 0, sizeof m);
  uint64_t rng = seed * 0x9e3779b97f4a7c15ULL + 1;
  uint64_t driver_errors = 0, oom_errors = 0;
  for (int op = 0; op < ops; ++op) {
    const size_t r = random_below(&rng, 100);
    if (r < 55 && m.count < MAX_LIVE) {
      const uint64_t ooms = m.ooms, drivers = f.alloc_driver;
      pool_alloc(pool, &m, &f, &rng);
      oom_errors += m.ooms - ooms;
      driver_errors += f.alloc_driver - drivers;
    } else if (r < 90 && m.count) {
      const size_t i = random_below(&rng, m.count);
      model_free(pool, &m, i, round_up(m.live[i].size), streams[random_below(&rng, 4)]);
    } else if (r < 97) {
      const size_t s = random_below(&rng, 5);
      pool_release(pool, &f, s < 4 ? streams[s] : NULL, s < 4 ? 0 : GPUMEM_POOL_RELEASE_ALL_STREAMS);
    } else {
      /* A pointer freed already, or never the pool's: refused, nothing changed. */
      static char foreign[64];
      assert_status(gpumem_free(pool, foreign + random_below(&rng, 64), NULL), GPUMEM_ERROR_NOT_OWNED);
      assert_detail_contains("not allocated by this pool");
    }
    check_pool(pool, upstream, &m, &f, limit);
  }
  /* The faults have to have happened for the test to mean anything. */
  assert_true(oom_errors > 0);
  assert_true(driver_errors > 0);
  if (free_fail) assert_true(f.free_failed > 0);

  /* Everything back: blocks whose free failed were kept, and go now that frees work. */
  while (m.count) model_free(pool, &m, m.count - 1, round_up(m.live[m.count - 1].size), NULL);
  f.free_fail_percent = 0;
  assert_ok(gpumem_pool_release(pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  check_pool(pool, upstream, &m, &f, limit);
  assert_int_equal(f.count, 0);
  assert_int_equal(f.bytes, 0);
  assert_int_equal(pool_info_of(pool).total_bytes, 0);
  destroy_all(pool, upstream, &f);
}

static void test_fault_injection_pool_random_faults(void** state) {
  (void)state;
  for (uint64_t seed = 1; seed <= 3; ++seed) run_pool(seed, 0, 20, 5, 25, 3000);
}

static void test_fault_injection_pool_random_faults_with_limit(void** state) {
  (void)state;
  /* A limit near what the operations hold, so the limit also refuses, and blocks are returned often. */
  for (uint64_t seed = 11; seed <= 13; ++seed) run_pool(seed, 4 * 1024 * KIB, 20, 5, 25, 3000);
}

static void test_fault_injection_pool_oom_count_exact(void** state) {
  (void)state;
  struct faulty f;
  gpumem_allocator_t* upstream = create_faulty(&f, 1);
  gpumem_allocator_t* pool = create_pool(upstream, 0);
  /* Refused twice: the first try and the retry after returning cached blocks (none here). */
  f.forced[0] = GPUMEM_ERROR_OUT_OF_MEMORY;
  f.forced[1] = GPUMEM_ERROR_OUT_OF_MEMORY;
  f.forced_count = 2;
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(pool, 1000, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  assert_detail_contains("out of memory allocating 1,000 bytes");
  assert_int_equal(f.alloc_calls, 2);
  gpumem_allocator_stats_t s = stats_of(pool);
  assert_int_equal(s.oom_count, 1);
  assert_int_equal(s.retry_count, 1);
  assert_int_equal(s.alloc_count, 0);
  assert_int_equal(s.bytes_reserved, 0);
  assert_int_equal(s.upstream_alloc_count, 0);
  assert_int_equal(stats_of(upstream).oom_count, 2);

  /* A driver error is passed through at once: not out of memory, no retry. */
  f.forced[0] = GPUMEM_ERROR_DRIVER;
  f.forced_count = 1;
  p = (void*)0x1;
  assert_status(gpumem_alloc(pool, 1000, NULL, &p), GPUMEM_ERROR_DRIVER);
  assert_null(p);
  assert_detail_contains("the caller's alloc function returned GPUMEM_ERROR_DRIVER");
  assert_int_equal(f.alloc_calls, 3);
  s = stats_of(pool);
  assert_int_equal(s.oom_count, 1);
  assert_int_equal(s.retry_count, 1);
  assert_int_equal(stats_of(upstream).oom_count, 2);

  /* Out of memory, then a driver error on the retry: the driver error is what the caller gets. */
  f.forced[0] = GPUMEM_ERROR_OUT_OF_MEMORY;
  f.forced[1] = GPUMEM_ERROR_DRIVER;
  f.forced_count = 2;
  p = (void*)0x1;
  assert_status(gpumem_alloc(pool, 1000, NULL, &p), GPUMEM_ERROR_DRIVER);
  assert_null(p);
  assert_int_equal(f.alloc_calls, 5);
  s = stats_of(pool);
  assert_int_equal(s.oom_count, 1);
  assert_int_equal(s.retry_count, 2);

  /* Refused once: the retry succeeds, and nothing counts as out of memory. */
  f.forced[0] = GPUMEM_ERROR_OUT_OF_MEMORY;
  f.forced_count = 1;
  assert_ok(gpumem_alloc(pool, 1000, NULL, &p));
  assert_non_null(p);
  assert_int_equal(f.alloc_calls, 7);
  s = stats_of(pool);
  assert_int_equal(s.oom_count, 1);
  assert_int_equal(s.retry_count, 3);
  assert_int_equal(s.bytes_reserved, 1024);
  assert_int_equal(f.bytes, 1024);
  assert_ok(gpumem_free(pool, p, NULL));
  assert_ok(gpumem_pool_release(pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  destroy_all(pool, upstream, &f);
}

static void test_fault_injection_pool_failed_free_stays_cached(void** state) {
  (void)state;
  struct faulty f;
  gpumem_allocator_t* upstream = create_faulty(&f, 1);
  gpumem_allocator_t* pool = create_pool(upstream, 0);
  void* a = NULL;
  void* b = NULL;
  assert_ok(gpumem_alloc(pool, 4096, NULL, &a));
  assert_ok(gpumem_alloc(pool, 8192, streams[2], &b));
  assert_ok(gpumem_free(pool, a, NULL));
  assert_ok(gpumem_free(pool, b, NULL));
  assert_int_equal(f.count, 2);

  f.free_fail_percent = 100;
  assert_status(gpumem_pool_release(pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS), GPUMEM_ERROR_DRIVER);
  assert_detail_contains("the caller's free function returned GPUMEM_ERROR_DRIVER");
  assert_int_equal(f.free_calls, 2);
  /* Both still the pool's, cached and counted, and still reusable. */
  gpumem_pool_info_t i = pool_info_of(pool);
  assert_int_equal(i.total_bytes, 4096 + 8192);
  assert_int_equal(i.free_bytes, 4096 + 8192);
  assert_int_equal(i.free_block_count, 2);
  gpumem_allocator_stats_t s = stats_of(pool);
  assert_int_equal(s.bytes_reserved, 4096 + 8192);
  assert_int_equal(s.upstream_free_count, 0);
  check_upstream(upstream, &f);
  void* again = NULL;
  assert_ok(gpumem_alloc(pool, 4096, NULL, &again));
  assert_ptr_equal(again, a);
  assert_int_equal(f.alloc_calls, 2);
  assert_ok(gpumem_free(pool, again, NULL));

  /* A later release returns them. */
  f.free_fail_percent = 0;
  assert_ok(gpumem_pool_release(pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  assert_int_equal(f.count, 0);
  i = pool_info_of(pool);
  assert_int_equal(i.total_bytes, 0);
  assert_int_equal(i.free_block_count, 0);
  s = stats_of(pool);
  assert_int_equal(s.upstream_free_count, 2);
  check_upstream(upstream, &f);
  destroy_all(pool, upstream, &f);
}

static void test_fault_injection_pool_retry_survives_failed_free(void** state) {
  (void)state;
  struct faulty f;
  gpumem_allocator_t* upstream = create_faulty(&f, 1);
  gpumem_allocator_t* pool = create_pool(upstream, 0);
  void* a = NULL;
  assert_ok(gpumem_alloc(pool, 4096, NULL, &a));
  assert_ok(gpumem_free(pool, a, NULL));
  /* The grow is refused, the cached block will not go back, and the retry still succeeds. */
  f.forced[0] = GPUMEM_ERROR_OUT_OF_MEMORY;
  f.forced_count = 1;
  f.free_fail_percent = 100;
  void* b = NULL;
  assert_ok(gpumem_alloc(pool, 8192, NULL, &b));
  assert_int_equal(f.alloc_calls, 3);
  assert_int_equal(f.free_failed, 1);
  assert_int_equal(f.count, 2);
  gpumem_pool_info_t i = pool_info_of(pool);
  assert_int_equal(i.total_bytes, 4096 + 8192);
  assert_int_equal(i.used_bytes, 8192);
  assert_int_equal(i.free_bytes, 4096);
  gpumem_allocator_stats_t s = stats_of(pool);
  assert_int_equal(s.retry_count, 1);
  assert_int_equal(s.oom_count, 0);
  assert_int_equal(s.upstream_free_count, 0);
  check_upstream(upstream, &f);
  f.free_fail_percent = 0;
  assert_ok(gpumem_free(pool, b, NULL));
  assert_ok(gpumem_pool_release(pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  destroy_all(pool, upstream, &f);
}

/* The raw functions allocator under the same faults: its statistics and refusals follow the
 * functions' answers one for one, and a failed free leaves the allocation live. */
static void test_fault_injection_raw_functions_random_faults(void** state) {
  (void)state;
  struct faulty f;
  gpumem_allocator_t* a = create_faulty(&f, 7);
  f.oom_percent = 20;
  f.driver_percent = 5;
  f.free_fail_percent = 20;
  static struct model m;
  memset(&m, 0, sizeof m);
  uint64_t rng = 99;
  uint64_t null_successes = 0;
  for (int op = 0; op < 5000; ++op) {
    const size_t r = random_below(&rng, 100);
    if (r < 55 && m.count < MAX_LIVE) {
      const size_t size = random_size(&rng);
      const bool null_success = random_below(&rng, 50) == 0;
      f.null_success_next = null_success;
      const uint64_t calls = f.alloc_calls;
      void* p = (void*)0x1;
      const gpumem_status_t st = gpumem_alloc(a, size, streams[random_below(&rng, 4)], &p);
      assert_int_equal(f.alloc_calls, calls + 1);
      if (f.last_alloc_status == GPUMEM_SUCCESS && !null_success) {
        assert_ok(st);
        assert_non_null(p);
        model_add(&m, p, size, size);
      } else if (f.last_alloc_status == GPUMEM_SUCCESS) {
        /* Success with no memory is out of memory, counted as such. */
        assert_status(st, GPUMEM_ERROR_OUT_OF_MEMORY);
        assert_null(p);
        assert_detail_contains("success but no memory");
        ++f.alloc_oom;
        ++null_successes;
      } else {
        assert_status(st, f.last_alloc_status);
        assert_null(p);
        assert_detail_contains(f.last_alloc_status == GPUMEM_ERROR_DRIVER ? "returned GPUMEM_ERROR_DRIVER"
                                                                          : "returned GPUMEM_ERROR_OUT_OF_MEMORY");
      }
      f.null_success_next = false;
    } else if (r < 95 && m.count) {
      const size_t i = random_below(&rng, m.count);
      const uint64_t failed = f.free_failed;
      const gpumem_allocator_stats_t before = stats_of(a);
      const gpumem_status_t st = gpumem_free(a, m.live[i].ptr, NULL);
      if (f.free_failed != failed) {
        /* Still live, still counted: the caller can free it again. */
        assert_status(st, GPUMEM_ERROR_DRIVER);
        assert_detail_contains("the caller's free function returned GPUMEM_ERROR_DRIVER");
        const gpumem_allocator_stats_t after = stats_of(a);
        assert_memory_equal(&after, &before, sizeof after);
      } else {
        assert_ok(st);
        struct live l = m.live[i];
        m.live[i] = m.live[--m.count];
        ++m.frees;
        m.in_use -= l.size;
        m.requested -= l.size;
      }
    } else {
      static char foreign[64];
      const gpumem_allocator_stats_t before = stats_of(a);
      assert_status(gpumem_free(a, foreign + random_below(&rng, 64), NULL), GPUMEM_ERROR_NOT_OWNED);
      assert_detail_contains("was not allocated by this caller's allocator");
      const gpumem_allocator_stats_t after = stats_of(a);
      assert_memory_equal(&after, &before, sizeof after);
    }
    const gpumem_allocator_stats_t s = stats_of(a);
    assert_int_equal(s.bytes_in_use, m.in_use);
    assert_int_equal(s.bytes_requested, m.requested);
    assert_int_equal(s.peak_bytes_in_use, m.peak_in_use);
    assert_int_equal(s.alloc_count, m.allocs);
    assert_int_equal(s.free_count, m.frees);
    check_upstream(a, &f);
    model_check_contents(&m);
  }
  assert_true(f.alloc_oom > 0);
  assert_true(f.alloc_driver > 0);
  assert_true(f.free_failed > 0);
  assert_true(null_successes > 0);

  /* A live allocation keeps it from being destroyed; freeing everything empties the ledger. */
  if (m.count) {
    assert_status(gpumem_allocator_destroy(a), GPUMEM_ERROR_BUSY);
    assert_detail_contains("live allocation");
    assert_int_equal(f.destroyed, 0);
  }
  f.free_fail_percent = 0;
  while (m.count) {
    assert_ok(gpumem_free(a, m.live[m.count - 1].ptr, NULL));
    --m.count;
  }
  check_upstream(a, &f);
  destroy_all(NULL, a, &f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fault_injection_pool_random_faults),
      cmocka_unit_test(test_fault_injection_pool_random_faults_with_limit),
      cmocka_unit_test(test_fault_injection_pool_oom_count_exact),
      cmocka_unit_test(test_fault_injection_pool_failed_free_stays_cached),
      cmocka_unit_test(test_fault_injection_pool_retry_survives_failed_free),
      cmocka_unit_test(test_fault_injection_raw_functions_random_faults),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
