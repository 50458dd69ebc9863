/* A pool's limit and what it does when out of memory: release cached blocks and retry, ask the
 * reclaim callbacks and retry, then fail with the numbers. Over host memory, except for
 * GPUMEM_GPU_MEMORY_LIMIT, which only pools over device memory read. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>

#include "test_util.h"

#include "pool_fixture.h"

/* Asserts an allocation fails for want of memory, and clears its output. */
static void assert_out_of_memory(gpumem_allocator_t* pool, size_t size, gpumem_stream_t stream) {
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(pool, size, stream, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
}

static void test_pool_limit_refuses_beyond(void** state) {
  struct fixture* f = *state;
  assert_ok(gpumem_pool_set_limit(f->pool, MIB));
  assert_int_equal(pool_info_of(f->pool).limit, MIB);

  void* a = alloc_ok(f->pool, 512 * KIB, NULL);
  void* b = alloc_ok(f->pool, 256 * KIB, NULL);
  const gpumem_allocator_stats_t host_before = stats_of(f->host);
  const gpumem_allocator_stats_t before = stats_of(f->pool);

  /* 500,000 bytes round to 500,224: 786,432 + 500,224 is over 1,048,576. */
  assert_out_of_memory(f->pool, 500000, NULL);
  assert_detail_contains("allocating 500,000 bytes (rounded to 500,224)");
  assert_detail_contains("of host memory");
  assert_detail_contains("786,432 bytes in use");
  assert_detail_contains("pool holds 786,432 bytes");
  assert_detail_contains("limit 1,048,576");
  assert_detail_contains("the pool's limit");

  gpumem_allocator_stats_t s = stats_of(f->pool);
  assert_int_equal(s.oom_count, before.oom_count + 1);
  assert_true(s.retry_count > before.retry_count);
  assert_int_equal(s.alloc_count, before.alloc_count);
  assert_int_equal(s.bytes_in_use, before.bytes_in_use);
  assert_int_equal(s.bytes_reserved, before.bytes_reserved);
  gpumem_allocator_stats_t h = stats_of(f->host);
  assert_int_equal(h.alloc_count, host_before.alloc_count);
  assert_int_equal(h.bytes_in_use, 768 * KIB);

  /* Up to the limit exactly is within it. */
  void* c = alloc_ok(f->pool, 256 * KIB, NULL);
  assert_int_equal(stats_of(f->host).bytes_in_use, MIB);
  assert_out_of_memory(f->pool, 1, NULL);
  assert_int_equal(stats_of(f->pool).oom_count, before.oom_count + 2);

  /* Freed memory is cached, and reused within the limit. */
  assert_ok(gpumem_free(f->pool, a, NULL));
  void* d = alloc_ok(f->pool, 500000, NULL);
  assert_ptr_equal(d, a);
  assert_int_equal(stats_of(f->host).bytes_in_use, MIB);

  assert_ok(gpumem_free(f->pool, b, NULL));
  assert_ok(gpumem_free(f->pool, c, NULL));
  assert_ok(gpumem_free(f->pool, d, NULL));
}

static void test_pool_limit_larger_than_limit(void** state) {
  struct fixture* f = *state;
  assert_ok(gpumem_pool_set_limit(f->pool, 100000));
  /* Nothing cached, nothing held: a single allocation over the limit is still refused. */
  assert_out_of_memory(f->pool, 100001, NULL);
  assert_detail_contains("0 bytes in use");
  assert_detail_contains("pool holds 0 bytes");
  assert_detail_contains("limit 100,000");
  assert_int_equal(stats_of(f->host).alloc_count, 0);
  /* 99,500 rounds to 99,840, within 100,000. */
  void* p = alloc_ok(f->pool, 99500, NULL);
  assert_int_equal(stats_of(f->host).bytes_in_use, 99840);
  assert_ok(gpumem_free(f->pool, p, NULL));
  /* Refused at once: the cache is not given back for a request no release could make room for. */
  const gpumem_allocator_stats_t before = stats_of(f->pool);
  assert_out_of_memory(f->pool, 200000, NULL);
  assert_detail_contains("which the request alone exceeds");
  assert_int_equal(pool_info_of(f->pool).free_bytes, 99840);
  assert_int_equal(stats_of(f->host).bytes_in_use, 99840);
  assert_int_equal(stats_of(f->pool).retry_count, before.retry_count);
}

static void test_pool_limit_releases_cached_blocks(void** state) {
  struct fixture* f = *state;
  assert_ok(gpumem_pool_set_limit(f->pool, MIB));
  /* Four separate upstream blocks, cached whole on two arenas: they never merge. */
  void* p[4];
  for (int i = 0; i < 4; ++i) p[i] = alloc_ok(f->pool, 256 * KIB, i < 2 ? STREAM_A : NULL);
  for (int i = 0; i < 4; ++i) assert_ok(gpumem_free(f->pool, p[i], i < 2 ? STREAM_A : NULL));
  gpumem_pool_info_t info = pool_info_of(f->pool);
  assert_int_equal(info.free_block_count, 4);
  assert_int_equal(info.total_bytes, MIB);
  const gpumem_allocator_stats_t before = stats_of(f->pool);

  /* No cached block is big enough, and the limit leaves no room: the pool returns its cached
   * blocks, every arena's, and then has room. */
  void* big = alloc_ok(f->pool, 512 * KIB, STREAM_B);
  gpumem_allocator_stats_t s = stats_of(f->pool);
  assert_int_equal(s.retry_count, before.retry_count + 1);
  assert_int_equal(s.oom_count, before.oom_count);
  assert_int_equal(s.upstream_free_count, before.upstream_free_count + 4);
  gpumem_allocator_stats_t h = stats_of(f->host);
  assert_int_equal(h.free_count, 4);
  assert_int_equal(h.alloc_count, 5);
  assert_int_equal(h.bytes_in_use, 512 * KIB);
  info = pool_info_of(f->pool);
  assert_int_equal(info.total_bytes, 512 * KIB);
  assert_int_equal(info.free_block_count, 0);
  assert_ok(gpumem_free(f->pool, big, STREAM_B));
}

static void test_pool_limit_split_blocks_not_released(void** state) {
  struct fixture* f = *state;
  assert_ok(gpumem_pool_set_limit(f->pool, MIB));
  void* base = alloc_ok(f->pool, MIB, NULL);
  assert_ok(gpumem_free(f->pool, base, NULL));
  void* one = alloc_ok(f->pool, 1, NULL);
  assert_ptr_equal(one, base);
  /* The cached remainder is part of a block with a live chunk: it cannot go back. */
  assert_out_of_memory(f->pool, MIB, NULL);
  assert_detail_contains("512 bytes in use");
  assert_detail_contains("pool holds 1,048,576 bytes");
  assert_int_equal(stats_of(f->host).free_count, 0);
  assert_int_equal(stats_of(f->host).bytes_in_use, MIB);
  assert_ok(gpumem_free(f->pool, one, NULL));
  /* Whole again: reused at once. */
  assert_ptr_equal(alloc_ok(f->pool, MIB, NULL), base);
  assert_ok(gpumem_free(f->pool, base, NULL));
}

/* The detail of an out of memory says where the held bytes are and what would have served. */
static void test_pool_limit_out_of_memory_says_where_the_bytes_are(void** state) {
  struct fixture* f = *state;
  assert_ok(gpumem_pool_set_limit(f->pool, 4 * KIB));
  void* a = alloc_ok(f->pool, 2 * KIB, NULL);
  void* b = alloc_ok(f->pool, KIB, NULL);
  assert_ok(gpumem_free(f->pool, b, NULL)); /* a whole free block, returned before the retry */
  assert_out_of_memory(f->pool, 3 * KIB, NULL);
  assert_detail_contains(
      "Of what the pool holds: 2,048 in use, 0 free in pieces of split blocks, 0 in whole "
      "free blocks, 0 pending on other streams' work; it would have taken a limit of at "
      "least 5,120 bytes");
  assert_ok(gpumem_free(f->pool, a, NULL));
  assert_ok(gpumem_pool_release(f->pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));

  /* Free pieces that add up to the request but are apart: fragmentation, not the limit. */
  void* whole = alloc_ok(f->pool, 4 * KIB, NULL);
  assert_ok(gpumem_free(f->pool, whole, NULL));
  void* piece[4];
  for (int i = 0; i < 4; i++) piece[i] = alloc_ok(f->pool, KIB, NULL);
  assert_ok(gpumem_free(f->pool, piece[0], NULL));
  assert_ok(gpumem_free(f->pool, piece[2], NULL));
  assert_out_of_memory(f->pool, 2 * KIB, NULL);
  assert_detail_contains("2,048 in use, 2,048 free in pieces of split blocks, 0 in whole free blocks");
  assert_detail_contains(
      "it would have taken free memory in one piece: 2,048 bytes are free, the largest "
      "piece 1,024");
  assert_ok(gpumem_free(f->pool, piece[1], NULL));
  assert_ok(gpumem_free(f->pool, piece[3], NULL));
  assert_ok(gpumem_pool_release(f->pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));

  /* Room in another stream's arena, which a pool over host memory does not lend. */
  assert_ok(gpumem_pool_set_limit(f->pool, 8 * KIB));
  void* big = alloc_ok(f->pool, 8 * KIB, STREAM_A);
  assert_ok(gpumem_free(f->pool, big, STREAM_A));
  void* small = alloc_ok(f->pool, KIB, STREAM_A); /* A's block split: 7 KiB of it free */
  assert_out_of_memory(f->pool, 4 * KIB, STREAM_B);
  assert_detail_contains(
      "it would have taken the allocation on that stream (arenas over memory no stream uses "
      "do not lend): another stream's arena has 7,168 bytes free in one piece");
  assert_ok(gpumem_free(f->pool, small, STREAM_A));
}

static void test_pool_limit_below_what_pool_holds(void** state) {
  struct fixture* f = *state;
  void* base = alloc_ok(f->pool, MIB, NULL);
  assert_ok(gpumem_free(f->pool, base, NULL));
  assert_ok(gpumem_pool_set_limit(f->pool, 512 * KIB));
  assert_int_equal(pool_info_of(f->pool).limit, 512 * KIB);
  /* Cached memory is still used. */
  void* p = alloc_ok(f->pool, 768 * KIB, NULL);
  assert_ptr_equal(p, base);
  assert_out_of_memory(f->pool, 512 * KIB, NULL);
  assert_detail_contains("limit 524,288");
  assert_ok(gpumem_free(f->pool, p, NULL));
}

static void test_pool_limit_zero_removes_limit(void** state) {
  struct fixture* f = *state;
  assert_ok(gpumem_pool_set_limit(f->pool, 512 * KIB));
  assert_out_of_memory(f->pool, MIB, NULL);
  assert_ok(gpumem_pool_set_limit(f->pool, 0));
  assert_int_equal(pool_info_of(f->pool).limit, 0);
  void* p = alloc_ok(f->pool, MIB, NULL);
  assert_int_equal(stats_of(f->host).bytes_in_use, MIB);
  assert_ok(gpumem_free(f->pool, p, NULL));
}

static void test_pool_limit_at_create(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = host;
  params.limit = 64 * KIB;
  assert_ok(gpumem_pool_create(&params, &pool));
  assert_int_equal(pool_info_of(pool).limit, 64 * KIB);
  assert_out_of_memory(pool, 64 * KIB + 1, NULL);
  assert_detail_contains("limit 65,536");
  void* p = alloc_ok(pool, 64 * KIB, NULL);
  assert_ok(gpumem_free(pool, p, NULL));
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(host));
}

static void test_pool_limit_fraction_on_host_pool(void** state) {
  struct fixture* f = *state;
  assert_ok(gpumem_pool_set_limit(f->pool, MIB));
  assert_status(gpumem_pool_set_limit_fraction(f->pool, 0.5), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("holds host memory");
  const double bad[] = {0.0, -0.5, 1.5};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    assert_status(gpumem_pool_set_limit_fraction(f->pool, bad[i]), GPUMEM_ERROR_INVALID_ARGUMENT);
    assert_detail_contains("is not in (0, 1]");
  }
  /* The limit set before is untouched. */
  assert_int_equal(pool_info_of(f->pool).limit, MIB);
}

/* What a reclaim callback saw, and the garbage it may drop. */
struct reclaim_record {
  int calls;
  int32_t device;
  size_t size;
  gpumem_allocator_t* pool;
  void* garbage;
  gpumem_status_t free_status;
};

static void reclaim(int32_t device, size_t size, void* user_data) {
  struct reclaim_record* r = user_data;
  ++r->calls;
  r->device = device;
  r->size = size;
  if (r->garbage) {
    r->free_status = gpumem_free(r->pool, r->garbage, NULL);
    r->garbage = NULL;
  }
}

static void test_pool_limit_reclaim_frees_garbage(void** state) {
  struct fixture* f = *state;
  assert_ok(gpumem_pool_set_limit(f->pool, MIB));
  struct reclaim_record r;
  memset(&r, 0, sizeof r);
  r.pool = f->pool;
  r.free_status = GPUMEM_ERROR_INTERNAL;
  void* garbage = alloc_ok(f->pool, 768 * KIB, NULL);
  r.garbage = garbage;
  uint64_t id = 0;
  assert_ok(gpumem_reclaim_add(reclaim, &r, &id));
  assert_true(id != 0);
  const gpumem_allocator_stats_t before = stats_of(f->pool);

  /* Nothing cached to release; the callback drops its garbage and the retry reuses it. */
  void* p = NULL;
  gpumem_status_t st = gpumem_alloc(f->pool, 500000, NULL, &p);
  assert_ok(gpumem_reclaim_remove(id));
  assert_ok(st);
  assert_int_equal(r.calls, 1);
  assert_int_equal(r.device, -1);
  assert_int_equal(r.size, 500000);
  assert_ok(r.free_status);
  assert_ptr_equal(p, garbage);
  gpumem_allocator_stats_t s = stats_of(f->pool);
  assert_int_equal(s.oom_count, before.oom_count);
  /* One retry after releasing (nothing), one after reclaiming. */
  assert_int_equal(s.retry_count, before.retry_count + 2);
  assert_int_equal(s.upstream_alloc_count, before.upstream_alloc_count);
  assert_int_equal(stats_of(f->host).alloc_count, 1);
  assert_ok(gpumem_free(f->pool, p, NULL));
}

static void test_pool_limit_reclaim_not_called_when_cache_suffices(void** state) {
  struct fixture* f = *state;
  assert_ok(gpumem_pool_set_limit(f->pool, MIB));
  void* cached = alloc_ok(f->pool, MIB, STREAM_A);
  assert_ok(gpumem_free(f->pool, cached, STREAM_A));
  struct reclaim_record r;
  memset(&r, 0, sizeof r);
  uint64_t id = 0;
  assert_ok(gpumem_reclaim_add(reclaim, &r, &id));
  /* Releasing the other arena's cached block makes room before the callbacks are needed. */
  void* p = NULL;
  gpumem_status_t st = gpumem_alloc(f->pool, 512 * KIB, STREAM_B, &p);
  assert_ok(gpumem_reclaim_remove(id));
  assert_ok(st);
  assert_int_equal(r.calls, 0);
  assert_ok(gpumem_free(f->pool, p, STREAM_B));
}

static void test_pool_limit_removed_reclaim_not_called(void** state) {
  struct fixture* f = *state;
  assert_ok(gpumem_pool_set_limit(f->pool, 64 * KIB));
  struct reclaim_record kept, removed;
  memset(&kept, 0, sizeof kept);
  memset(&removed, 0, sizeof removed);
  uint64_t kept_id = 0, removed_id = 0;
  assert_ok(gpumem_reclaim_add(reclaim, &removed, &removed_id));
  assert_ok(gpumem_reclaim_add(reclaim, &kept, &kept_id));
  assert_true(kept_id != removed_id);
  assert_ok(gpumem_reclaim_remove(removed_id));

  /* Within the limit alone, but not beside what is in use: the callbacks are asked. */
  void* held = NULL;
  assert_ok(gpumem_alloc(f->pool, 48 * KIB, NULL, &held));
  const gpumem_allocator_stats_t before = stats_of(f->pool);
  void* p = (void*)0x1;
  gpumem_status_t st = gpumem_alloc(f->pool, 32 * KIB, NULL, &p);
  assert_ok(gpumem_reclaim_remove(kept_id));
  assert_ok(gpumem_free(f->pool, held, NULL));
  assert_int_equal(st, GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  gpumem_allocator_stats_t s = stats_of(f->pool);
  assert_int_equal(s.retry_count, before.retry_count + 2);
  assert_int_equal(s.oom_count, before.oom_count + 1);
  assert_int_equal(kept.calls, 1);
  assert_int_equal(kept.size, 32 * KIB);
  assert_int_equal(removed.calls, 0);

  /* Removed: no longer called. */
  assert_out_of_memory(f->pool, MIB, NULL);
  assert_int_equal(kept.calls, 1);
}

static void test_pool_limit_reclaim_bad_input(void** state) {
  (void)state;
  assert_status(gpumem_reclaim_remove(UINT64_MAX), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("no reclaim callback has id 18446744073709551615");
  assert_status(gpumem_reclaim_remove(0), GPUMEM_ERROR_INVALID_HANDLE);

  uint64_t id = 7;
  assert_status(gpumem_reclaim_add(NULL, NULL, &id), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("reclaim is NULL");
  assert_int_equal(id, 0);
  struct reclaim_record r;
  assert_status(gpumem_reclaim_add(reclaim, &r, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_id is NULL");

  /* Removing twice: the second time the id is unknown. */
  assert_ok(gpumem_reclaim_add(reclaim, &r, &id));
  assert_ok(gpumem_reclaim_remove(id));
  assert_status(gpumem_reclaim_remove(id), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("no reclaim callback has id");
}

/* A caller's upstream with a budget, to run out of memory without a limit on the pool. */
struct budget {
  size_t left;
  gpumem_status_t refusal;
};

static gpumem_status_t budget_alloc(void* context, size_t size, int32_t device, gpumem_stream_t stream,
                                    void** out_ptr) {
  struct budget* b = context;
  (void)device;
  (void)stream;
  if (size > b->left) return b->refusal;
  if (posix_memalign(out_ptr, 512, size) != 0) return GPUMEM_ERROR_OUT_OF_MEMORY;
  b->left -= size;
  return GPUMEM_SUCCESS;
}

static gpumem_status_t budget_free(void* context, void* ptr, size_t size, int32_t device, gpumem_stream_t stream) {
  struct budget* b = context;
  (void)device;
  (void)stream;
  free(ptr);
  b->left += size;
  return GPUMEM_SUCCESS;
}

static void test_pool_limit_upstream_out_of_memory(void** state) {
  (void)state;
  struct budget b = {MIB, GPUMEM_ERROR_OUT_OF_MEMORY};
  gpumem_allocator_functions_t fns;
  memset(&fns, 0, sizeof fns);
  fns.struct_size = sizeof fns;
  fns.context = &b;
  fns.device = -1;
  fns.alloc = budget_alloc;
  fns.free = budget_free;
  gpumem_allocator_t* upstream = NULL;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_allocator_create_functions(&fns, &upstream));
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = upstream;
  assert_ok(gpumem_pool_create(&params, &pool));

  void* p[4];
  for (int i = 0; i < 4; ++i) p[i] = alloc_ok(pool, 256 * KIB, NULL);
  for (int i = 0; i < 4; ++i) assert_ok(gpumem_free(pool, p[i], NULL));
  /* The upstream refuses; the pool gives back its cached blocks and the retry succeeds. */
  gpumem_allocator_stats_t before = stats_of(pool);
  void* big = alloc_ok(pool, 768 * KIB, NULL);
  gpumem_allocator_stats_t s = stats_of(pool);
  assert_int_equal(s.retry_count, before.retry_count + 1);
  assert_int_equal(s.upstream_free_count, 4);
  assert_int_equal(b.left, 256 * KIB);

  /* Refused with nothing to release: the detail says who refused. */
  assert_out_of_memory(pool, 512 * KIB, NULL);
  assert_detail_contains("pool holds 786,432 bytes, no limit");
  assert_detail_contains("the caller's alloc function returned");
  assert_int_equal(stats_of(pool).oom_count, before.oom_count + 1);

  /* An error other than out of memory is not retried: it reaches the caller as it is. */
  b.refusal = GPUMEM_ERROR_DRIVER;
  before = stats_of(pool);
  void* q = (void*)0x1;
  assert_status(gpumem_alloc(pool, 512 * KIB, NULL, &q), GPUMEM_ERROR_DRIVER);
  assert_null(q);
  s = stats_of(pool);
  assert_int_equal(s.retry_count, before.retry_count);
  assert_int_equal(s.oom_count, before.oom_count);

  assert_ok(gpumem_free(pool, big, NULL));
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(upstream));
  assert_int_equal(b.left, MIB);
}

static void test_pool_limit_environment_ignored_for_host(void** state) {
  (void)state;
  assert_int_equal(setenv("GPUMEM_GPU_MEMORY_LIMIT", "1KiB", 1), 0);
  gpumem_allocator_t* host = NULL;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = host;
  gpumem_status_t st = gpumem_pool_create(&params, &pool);
  unsetenv("GPUMEM_GPU_MEMORY_LIMIT");
  assert_ok(st);
  assert_int_equal(pool_info_of(pool).limit, 0);
  void* p = alloc_ok(pool, MIB, NULL);
  assert_ok(gpumem_free(pool, p, NULL));
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(host));
}

/* Creates a pool over dev with GPUMEM_GPU_MEMORY_LIMIT set to value (unset for NULL). */
static gpumem_status_t create_with_env(gpumem_allocator_t* dev, const char* value, gpumem_allocator_t** out_pool) {
  if (value)
    assert_int_equal(setenv("GPUMEM_GPU_MEMORY_LIMIT", value, 1), 0);
  else
    unsetenv("GPUMEM_GPU_MEMORY_LIMIT");
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = dev;
  gpumem_status_t st = gpumem_pool_create(&params, out_pool);
  unsetenv("GPUMEM_GPU_MEMORY_LIMIT");
  return st;
}

static uint64_t env_limit(gpumem_allocator_t* dev, const char* value) {
  gpumem_allocator_t* pool = NULL;
  assert_ok(create_with_env(dev, value, &pool));
  uint64_t limit = pool_info_of(pool).limit;
  assert_ok(gpumem_allocator_destroy(pool));
  return limit;
}

static void test_pool_limit_environment_device(void** state) {
  (void)state;
  require_gpu();
  gpumem_device_info_t dinfo;
  memset(&dinfo, 0, sizeof dinfo);
  dinfo.struct_size = sizeof dinfo;
  assert_ok(gpumem_device_get_info(0, &dinfo));
  const uint64_t total = dinfo.total_memory;
  gpumem_allocator_t* dev = NULL;
  assert_ok(gpumem_allocator_create_device(0, &dev));

  assert_int_equal(env_limit(dev, NULL), 0);
  assert_int_equal(env_limit(dev, ""), 0);
  assert_int_equal(env_limit(dev, "1073741824"), 1073741824u);
  assert_int_equal(env_limit(dev, "64MiB"), 67108864u);
  assert_int_equal(env_limit(dev, "8GB"), 8000000000u);
  assert_int_equal(env_limit(dev, "512MB"), 512000000u);
  assert_int_equal(env_limit(dev, "50%"), total / 2);
  assert_int_equal(env_limit(dev, "1073741824B"), 1073741824u);
  assert_int_equal(env_limit(dev, "1.5GiB"), 1610612736u);
  /* A space before the unit, and any case. */
  assert_int_equal(env_limit(dev, "8 gib"), 8589934592u);

  /* 0 is no limit only when unset: written out, it is refused. */
  const char* unreadable[] = {"lots", "12XB", "150%", "-5MiB", "0"};
  for (size_t i = 0; i < sizeof unreadable / sizeof unreadable[0]; ++i) {
    gpumem_allocator_t* pool = (gpumem_allocator_t*)0x1;
    assert_status(create_with_env(dev, unreadable[i], &pool), GPUMEM_ERROR_INVALID_ARGUMENT);
    char quoted[64];
    snprintf(quoted, sizeof quoted, "GPUMEM_GPU_MEMORY_LIMIT=\"%s\"", unreadable[i]);
    assert_detail_contains(quoted);
    assert_null(pool);
  }

  /* The limit is enforced on device memory, and gpumem_pool_set_limit overrides the variable. */
  gpumem_allocator_t* pool = NULL;
  assert_ok(create_with_env(dev, "1MiB", &pool));
  assert_int_equal(pool_info_of(pool).limit, MIB);
  void* p = alloc_ok(pool, 512 * KIB, NULL);
  assert_out_of_memory(pool, 768 * KIB, NULL);
  assert_detail_contains("on device 0");
  assert_detail_contains("limit 1,048,576");
  assert_ok(gpumem_pool_set_limit(pool, 2 * MIB));
  assert_int_equal(pool_info_of(pool).limit, 2 * MIB);
  void* q = alloc_ok(pool, 768 * KIB, NULL);
  assert_ok(gpumem_free(pool, p, NULL));
  assert_ok(gpumem_free(pool, q, NULL));
  assert_ok(gpumem_allocator_destroy(pool));

  /* A limit in the parameters takes precedence over the variable. */
  assert_int_equal(setenv("GPUMEM_GPU_MEMORY_LIMIT", "64MiB", 1), 0);
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = dev;
  params.limit = 2 * MIB;
  gpumem_status_t st = gpumem_pool_create(&params, &pool);
  unsetenv("GPUMEM_GPU_MEMORY_LIMIT");
  assert_ok(st);
  assert_int_equal(pool_info_of(pool).limit, 2 * MIB);
  assert_ok(gpumem_allocator_destroy(pool));

  assert_ok(gpumem_allocator_destroy(dev));
}

static void test_pool_limit_fraction_device(void** state) {
  (void)state;
  require_gpu();
  gpumem_device_info_t dinfo;
  memset(&dinfo, 0, sizeof dinfo);
  dinfo.struct_size = sizeof dinfo;
  assert_ok(gpumem_device_get_info(0, &dinfo));
  const uint64_t total = dinfo.total_memory;
  gpumem_allocator_t* dev = NULL;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_allocator_create_device(0, &dev));
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = dev;
  params.limit_fraction = 0.25;
  assert_ok(gpumem_pool_create(&params, &pool));
  assert_int_equal(pool_info_of(pool).limit, total / 4);
  assert_ok(gpumem_pool_set_limit_fraction(pool, 0.5));
  assert_int_equal(pool_info_of(pool).limit, total / 2);
  assert_status(gpumem_pool_set_limit_fraction(pool, 1.5), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("is not in (0, 1]");
  assert_int_equal(pool_info_of(pool).limit, total / 2);
  assert_ok(gpumem_pool_set_limit(pool, 0));
  assert_int_equal(pool_info_of(pool).limit, 0);
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(dev));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_pool_limit_refuses_beyond, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_limit_larger_than_limit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_limit_releases_cached_blocks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_limit_split_blocks_not_released, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_limit_out_of_memory_says_where_the_bytes_are, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_limit_below_what_pool_holds, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_limit_zero_removes_limit, setup, teardown),
      cmocka_unit_test(test_pool_limit_at_create),
      cmocka_unit_test_setup_teardown(test_pool_limit_fraction_on_host_pool, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_limit_reclaim_frees_garbage, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_limit_reclaim_not_called_when_cache_suffices, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_limit_removed_reclaim_not_called, setup, teardown),
      cmocka_unit_test(test_pool_limit_reclaim_bad_input),
      cmocka_unit_test(test_pool_limit_upstream_out_of_memory),
      cmocka_unit_test(test_pool_limit_environment_ignored_for_host),
      cmocka_unit_test(test_pool_limit_environment_device),
      cmocka_unit_test(test_pool_limit_fraction_device),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
