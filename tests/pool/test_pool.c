/* The caching pool's algorithm, over plain host memory: rounding, reuse, best fit, split and
 * merge, arenas per stream, release, refusals. The host upstream's own statistics show exactly
 * what the pool holds from it, and pointers show where each allocation was carved from. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <unistd.h>

#include "test_util.h"

#include "pool_fixture.h"

static void assert_stats_equal(const gpumem_allocator_stats_t* a, const gpumem_allocator_stats_t* b) {
  assert_int_equal(a->bytes_in_use, b->bytes_in_use);
  assert_int_equal(a->peak_bytes_in_use, b->peak_bytes_in_use);
  assert_int_equal(a->bytes_requested, b->bytes_requested);
  assert_int_equal(a->bytes_reserved, b->bytes_reserved);
  assert_int_equal(a->peak_bytes_reserved, b->peak_bytes_reserved);
  assert_int_equal(a->alloc_count, b->alloc_count);
  assert_int_equal(a->free_count, b->free_count);
  assert_int_equal(a->upstream_alloc_count, b->upstream_alloc_count);
  assert_int_equal(a->upstream_free_count, b->upstream_free_count);
  assert_int_equal(a->retry_count, b->retry_count);
  assert_int_equal(a->oom_count, b->oom_count);
}

static void assert_info_equal(const gpumem_pool_info_t* a, const gpumem_pool_info_t* b) {
  assert_int_equal(a->used_bytes, b->used_bytes);
  assert_int_equal(a->free_bytes, b->free_bytes);
  assert_int_equal(a->total_bytes, b->total_bytes);
  assert_int_equal(a->free_block_count, b->free_block_count);
  assert_int_equal(a->limit, b->limit);
  assert_int_equal(a->arena_count, b->arena_count);
  assert_int_equal(a->pending_bytes, b->pending_bytes);
}

/* What the pool says it holds is what its upstream has handed out, to the byte. */
static void assert_holds(const struct fixture* f, uint64_t total) {
  gpumem_pool_info_t info = pool_info_of(f->pool);
  assert_int_equal(info.total_bytes, total);
  assert_int_equal(info.used_bytes + info.free_bytes, total);
  assert_int_equal(info.pending_bytes, 0); /* host memory: no free waits for a stream */
  assert_int_equal(stats_of(f->pool).bytes_reserved, total);
  assert_int_equal(stats_of(f->host).bytes_in_use, total);
}

/* A snapshot of everything a failing call must leave alone. */
struct snapshot {
  gpumem_allocator_stats_t pool, host;
  gpumem_pool_info_t info;
};

static struct snapshot snap(const struct fixture* f) {
  struct snapshot s;
  s.pool = stats_of(f->pool);
  s.host = stats_of(f->host);
  s.info = pool_info_of(f->pool);
  return s;
}

static void assert_unchanged(const struct fixture* f, const struct snapshot* before) {
  struct snapshot now = snap(f);
  assert_stats_equal(&now.pool, &before->pool);
  assert_stats_equal(&now.host, &before->host);
  assert_info_equal(&now.info, &before->info);
}

static char* at(void* base, size_t offset) { return (char*)base + offset; }

static void test_pool_rounds_to_512(void** state) {
  struct fixture* f = *state;
  void* a = alloc_ok(f->pool, 1, NULL);
  gpumem_allocator_stats_t s = stats_of(f->pool);
  assert_int_equal(s.bytes_in_use, 512);
  assert_int_equal(s.bytes_requested, 1);
  assert_holds(f, 512);

  void* b = alloc_ok(f->pool, 513, NULL);
  s = stats_of(f->pool);
  assert_int_equal(s.bytes_in_use, 512 + 1024);
  assert_int_equal(s.bytes_requested, 1 + 513);
  assert_holds(f, 1536);

  void* c = alloc_ok(f->pool, 512, NULL);
  s = stats_of(f->pool);
  assert_int_equal(s.bytes_in_use, 2048);
  assert_int_equal(s.bytes_requested, 1026);
  assert_int_equal(s.alloc_count, 3);
  assert_int_equal(pool_info_of(f->pool).used_bytes, 2048);
  /* Each came from the upstream at exactly its rounded size. */
  gpumem_allocator_stats_t h = stats_of(f->host);
  assert_int_equal(h.alloc_count, 3);
  assert_int_equal(h.bytes_requested, 2048);
  assert_int_equal((uintptr_t)a % 512, 0);
  assert_int_equal((uintptr_t)b % 512, 0);
  assert_int_equal((uintptr_t)c % 512, 0);

  assert_ok(gpumem_free(f->pool, a, NULL));
  assert_ok(gpumem_free(f->pool, b, NULL));
  assert_ok(gpumem_free(f->pool, c, NULL));
  s = stats_of(f->pool);
  assert_int_equal(s.bytes_in_use, 0);
  assert_int_equal(s.bytes_requested, 0);
  assert_int_equal(s.free_count, 3);
  gpumem_pool_info_t info = pool_info_of(f->pool);
  assert_int_equal(info.free_bytes, 2048);
  assert_int_equal(info.free_block_count, 3);
  assert_holds(f, 2048); /* cached, not returned */
}

static void test_pool_reuses_freed_block(void** state) {
  struct fixture* f = *state;
  void* p = alloc_ok(f->pool, 4096, NULL);
  memset(p, 0xab, 4096);
  assert_ok(gpumem_free(f->pool, p, NULL));
  /* 4000 rounds to the same 4096. */
  void* q = alloc_ok(f->pool, 4000, NULL);
  assert_ptr_equal(q, p);
  assert_int_equal(stats_of(f->host).alloc_count, 1);
  gpumem_allocator_stats_t s = stats_of(f->pool);
  assert_int_equal(s.upstream_alloc_count, 1);
  assert_int_equal(s.alloc_count, 2);
  assert_int_equal(s.bytes_requested, 4000);
  gpumem_pool_info_t info = pool_info_of(f->pool);
  assert_int_equal(info.used_bytes, 4096);
  assert_int_equal(info.free_block_count, 0);
  assert_holds(f, 4096);
  assert_ok(gpumem_free(f->pool, q, NULL));
}

static void test_pool_best_fit(void** state) {
  struct fixture* f = *state;
  void* a = alloc_ok(f->pool, 4 * KIB, NULL);
  void* g1 = alloc_ok(f->pool, 512, NULL);
  void* b = alloc_ok(f->pool, 8 * KIB, NULL);
  void* g2 = alloc_ok(f->pool, 512, NULL);
  void* c = alloc_ok(f->pool, 16 * KIB, NULL);
  void* g3 = alloc_ok(f->pool, 512, NULL);
  /* Freed neither smallest-first nor largest-first, so neither the first nor the last freed block
   * that fits is the best one for both requests below. */
  assert_ok(gpumem_free(f->pool, b, NULL));
  assert_ok(gpumem_free(f->pool, a, NULL));
  assert_ok(gpumem_free(f->pool, c, NULL));
  gpumem_pool_info_t info = pool_info_of(f->pool);
  assert_int_equal(info.free_block_count, 3);
  assert_int_equal(info.free_bytes, 28 * KIB);

  void* six = alloc_ok(f->pool, 6 * KIB, NULL);
  assert_ptr_equal(six, b);
  info = pool_info_of(f->pool);
  assert_int_equal(info.free_block_count, 3); /* 4 KiB, the 2 KiB remainder, 16 KiB */
  assert_int_equal(info.free_bytes, (4 + 2 + 16) * KIB);

  /* Best fit for 3 KiB is the 4 KiB block, not the 16 KiB one or the 2 KiB remainder. */
  void* three = alloc_ok(f->pool, 3 * KIB, NULL);
  assert_ptr_equal(three, a);
  /* The remainder of the 8 KiB block fits 2 KiB exactly. */
  void* two = alloc_ok(f->pool, 2 * KIB, NULL);
  assert_ptr_equal(two, at(b, 6 * KIB));
  info = pool_info_of(f->pool);
  assert_int_equal(info.free_block_count, 2); /* 1 KiB after the 3 KiB, and 16 KiB */
  assert_int_equal(info.free_bytes, 17 * KIB);
  assert_int_equal(stats_of(f->host).alloc_count, 6);
  assert_holds(f, 28 * KIB + 3 * 512);

  void* all[] = {six, three, two, g1, g2, g3};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) assert_ok(gpumem_free(f->pool, all[i], NULL));
}

static void test_pool_splits_block(void** state) {
  struct fixture* f = *state;
  void* base = alloc_ok(f->pool, MIB, NULL);
  assert_ok(gpumem_free(f->pool, base, NULL));
  void* p1 = alloc_ok(f->pool, 256 * KIB, NULL);
  void* p2 = alloc_ok(f->pool, 256 * KIB, NULL);
  void* p3 = alloc_ok(f->pool, 256 * KIB, NULL);
  assert_ptr_equal(p1, base);
  assert_ptr_equal(p2, at(base, 256 * KIB));
  assert_ptr_equal(p3, at(base, 512 * KIB));
  /* A byte rounds to 512 and comes next. */
  void* p4 = alloc_ok(f->pool, 1, NULL);
  assert_ptr_equal(p4, at(base, 768 * KIB));
  memset(p1, 1, 256 * KIB);
  memset(p2, 2, 256 * KIB);
  memset(p3, 3, 256 * KIB);
  memset(p4, 4, 512);
  assert_int_equal(*at(p1, 256 * KIB - 1), 1);
  assert_int_equal(*at(p2, 256 * KIB - 1), 2);

  assert_int_equal(stats_of(f->host).alloc_count, 1);
  gpumem_pool_info_t info = pool_info_of(f->pool);
  assert_int_equal(info.used_bytes, 768 * KIB + 512);
  assert_int_equal(info.free_bytes, 256 * KIB - 512);
  assert_int_equal(info.free_block_count, 1);
  assert_holds(f, MIB);

  assert_ok(gpumem_free(f->pool, p1, NULL));
  assert_ok(gpumem_free(f->pool, p2, NULL));
  assert_ok(gpumem_free(f->pool, p3, NULL));
  assert_ok(gpumem_free(f->pool, p4, NULL));
}

static void test_pool_merges_on_free(void** state) {
  struct fixture* f = *state;
  void* base = alloc_ok(f->pool, MIB, NULL);
  assert_ok(gpumem_free(f->pool, base, NULL));
  void* p[4];
  for (int i = 0; i < 4; ++i) {
    p[i] = alloc_ok(f->pool, 256 * KIB, NULL);
    assert_ptr_equal(p[i], at(base, (size_t)i * 256 * KIB));
  }
  assert_int_equal(pool_info_of(f->pool).free_block_count, 0);

  /* Two apart: no merge. */
  assert_ok(gpumem_free(f->pool, p[1], NULL));
  assert_ok(gpumem_free(f->pool, p[3], NULL));
  gpumem_pool_info_t info = pool_info_of(f->pool);
  assert_int_equal(info.free_block_count, 2);
  assert_int_equal(info.free_bytes, 512 * KIB);
  /* Between two free neighbours: all three become one. */
  assert_ok(gpumem_free(f->pool, p[2], NULL));
  info = pool_info_of(f->pool);
  assert_int_equal(info.free_block_count, 1);
  assert_int_equal(info.free_bytes, 768 * KIB);
  /* Before a free neighbour: the whole block again. */
  assert_ok(gpumem_free(f->pool, p[0], NULL));
  info = pool_info_of(f->pool);
  assert_int_equal(info.free_block_count, 1);
  assert_int_equal(info.free_bytes, MIB);
  assert_int_equal(info.used_bytes, 0);

  /* Whole: 1 MiB fits in it without a new upstream block. */
  void* again = alloc_ok(f->pool, MIB, NULL);
  assert_ptr_equal(again, base);
  assert_int_equal(stats_of(f->host).alloc_count, 1);
  assert_ok(gpumem_free(f->pool, again, NULL));

  assert_ok(gpumem_pool_release(f->pool, NULL, 0));
  gpumem_allocator_stats_t h = stats_of(f->host);
  assert_int_equal(h.bytes_in_use, 0);
  assert_int_equal(h.free_count, 1);
  gpumem_allocator_stats_t s = stats_of(f->pool);
  assert_int_equal(s.bytes_reserved, 0);
  assert_int_equal(s.upstream_free_count, 1);
  info = pool_info_of(f->pool);
  assert_int_equal(info.total_bytes, 0);
  assert_int_equal(info.free_bytes, 0);
  assert_int_equal(info.free_block_count, 0);
}

static void test_pool_release_keeps_split_blocks(void** state) {
  struct fixture* f = *state;
  void* small = alloc_ok(f->pool, 64 * KIB, NULL);
  void* big = alloc_ok(f->pool, MIB, NULL);
  assert_ok(gpumem_free(f->pool, small, NULL));
  assert_ok(gpumem_free(f->pool, big, NULL));
  /* Best fit puts one live byte in the 64 KiB block; the 1 MiB block stays whole. */
  void* live = alloc_ok(f->pool, 1, NULL);
  assert_ptr_equal(live, small);

  assert_ok(gpumem_pool_release(f->pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  assert_holds(f, 64 * KIB);
  gpumem_pool_info_t info = pool_info_of(f->pool);
  assert_int_equal(info.used_bytes, 512);
  assert_int_equal(info.free_bytes, 64 * KIB - 512);
  assert_int_equal(info.free_block_count, 1);
  assert_int_equal(stats_of(f->host).free_count, 1);

  /* Once the live chunk is freed the block is whole, and goes too. */
  assert_ok(gpumem_free(f->pool, live, NULL));
  assert_ok(gpumem_pool_release(f->pool, NULL, 0));
  assert_holds(f, 0);
  assert_int_equal(stats_of(f->host).free_count, 2);
}

static void test_pool_arena_per_stream(void** state) {
  struct fixture* f = *state;
  void* pa = alloc_ok(f->pool, 4 * KIB, STREAM_A);
  assert_ok(gpumem_free(f->pool, pa, STREAM_A));
  /* A's cached block is not B's to take. */
  void* pb = alloc_ok(f->pool, 4 * KIB, STREAM_B);
  assert_ptr_not_equal(pb, pa);
  assert_int_equal(stats_of(f->host).alloc_count, 2);
  assert_int_equal(pool_info_of(f->pool).arena_count, 2);
  assert_ok(gpumem_free(f->pool, pb, STREAM_B));

  assert_ptr_equal(alloc_ok(f->pool, 4 * KIB, STREAM_A), pa);
  assert_ptr_equal(alloc_ok(f->pool, 4 * KIB, STREAM_B), pb);
  assert_int_equal(stats_of(f->host).alloc_count, 2);

  /* Memory goes back to the arena it was allocated on, whatever stream the free names. */
  assert_ok(gpumem_free(f->pool, pa, STREAM_B));
  assert_ok(gpumem_free(f->pool, pb, STREAM_B));
  assert_ptr_equal(alloc_ok(f->pool, 4 * KIB, STREAM_A), pa);
  assert_ptr_equal(alloc_ok(f->pool, 4 * KIB, STREAM_B), pb);
  assert_int_equal(stats_of(f->host).alloc_count, 2);
  assert_int_equal(pool_info_of(f->pool).arena_count, 2);
  assert_ok(gpumem_free(f->pool, pa, STREAM_A));
  assert_ok(gpumem_free(f->pool, pb, STREAM_B));
}

static void test_pool_default_streams_share_arena(void** state) {
  struct fixture* f = *state;
  void* p = alloc_ok(f->pool, 4 * KIB, NULL);
  assert_ok(gpumem_free(f->pool, p, NULL));
  assert_ptr_equal(alloc_ok(f->pool, 4 * KIB, GPUMEM_STREAM_LEGACY), p);
  assert_ok(gpumem_free(f->pool, p, GPUMEM_STREAM_LEGACY));
  assert_ptr_equal(alloc_ok(f->pool, 4 * KIB, NULL), p);
  assert_ok(gpumem_free(f->pool, p, NULL));
  assert_int_equal(pool_info_of(f->pool).arena_count, 1);
  assert_int_equal(stats_of(f->host).alloc_count, 1);

  /* The per-thread default stream is another stream, also on the main thread. */
  void* q = alloc_ok(f->pool, 4 * KIB, GPUMEM_STREAM_PER_THREAD);
  assert_ptr_not_equal(q, p);
  assert_int_equal(pool_info_of(f->pool).arena_count, 2);
  assert_int_equal(stats_of(f->host).alloc_count, 2);
  assert_ok(gpumem_free(f->pool, q, GPUMEM_STREAM_PER_THREAD));
}

struct per_thread_run {
  gpumem_allocator_t* pool;
  void* first;
  void* second;
  gpumem_status_t status;
  uint32_t arenas;
};

static void* per_thread_worker(void* arg) {
  struct per_thread_run* r = arg;
  r->status = gpumem_alloc(r->pool, 4 * KIB, GPUMEM_STREAM_PER_THREAD, &r->first);
  if (r->status == GPUMEM_SUCCESS) r->status = gpumem_free(r->pool, r->first, GPUMEM_STREAM_PER_THREAD);
  if (r->status == GPUMEM_SUCCESS) r->status = gpumem_alloc(r->pool, 4 * KIB, GPUMEM_STREAM_PER_THREAD, &r->second);
  if (r->status == GPUMEM_SUCCESS) r->status = gpumem_free(r->pool, r->second, GPUMEM_STREAM_PER_THREAD);
  gpumem_pool_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (r->status == GPUMEM_SUCCESS) r->status = gpumem_pool_get_info(r->pool, &info);
  r->arenas = info.arena_count;
  return NULL;
}

static void test_pool_per_thread_stream_per_thread(void** state) {
  struct fixture* f = *state;
  void* p = alloc_ok(f->pool, 4 * KIB, GPUMEM_STREAM_PER_THREAD);
  assert_ok(gpumem_free(f->pool, p, GPUMEM_STREAM_PER_THREAD));
  assert_int_equal(pool_info_of(f->pool).arena_count, 1);

  struct per_thread_run r = {f->pool, NULL, NULL, GPUMEM_ERROR_INTERNAL, 0};
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, per_thread_worker, &r), 0);
  assert_int_equal(pthread_join(thread, NULL), 0);
  assert_ok(r.status);
  /* The thread had its own arena: the main thread's cached block was not its to take, but its own
   * freed block came back to it. */
  assert_ptr_not_equal(r.first, p);
  assert_ptr_equal(r.second, r.first);
  assert_int_equal(r.arenas, 2);
  assert_int_equal(stats_of(f->host).alloc_count, 2);

  assert_ptr_equal(alloc_ok(f->pool, 4 * KIB, GPUMEM_STREAM_PER_THREAD), p);
  assert_ok(gpumem_free(f->pool, p, GPUMEM_STREAM_PER_THREAD));
  assert_int_equal(stats_of(f->host).alloc_count, 2);
}

/* Caches 4 KiB on A, 8 KiB on B and 16 KiB on the default stream, each its own upstream block. */
static void cache_three_arenas(struct fixture* f, void** pa, void** pb, void** pn) {
  *pa = alloc_ok(f->pool, 4 * KIB, STREAM_A);
  *pb = alloc_ok(f->pool, 8 * KIB, STREAM_B);
  *pn = alloc_ok(f->pool, 16 * KIB, NULL);
  assert_ok(gpumem_free(f->pool, *pa, STREAM_A));
  assert_ok(gpumem_free(f->pool, *pb, STREAM_B));
  assert_ok(gpumem_free(f->pool, *pn, NULL));
  assert_holds(f, 28 * KIB);
  assert_int_equal(pool_info_of(f->pool).free_block_count, 3);
}

static void test_pool_release_one_stream(void** state) {
  struct fixture* f = *state;
  void *pa, *pb, *pn;
  cache_three_arenas(f, &pa, &pb, &pn);

  assert_ok(gpumem_pool_release(f->pool, STREAM_A, 0));
  assert_holds(f, 24 * KIB);
  assert_int_equal(pool_info_of(f->pool).free_block_count, 2);
  assert_int_equal(stats_of(f->host).free_count, 1);

  /* NULL names the legacy stream's arena, as it does for allocation. */
  assert_ok(gpumem_pool_release(f->pool, GPUMEM_STREAM_LEGACY, 0));
  assert_holds(f, 8 * KIB);
  assert_int_equal(stats_of(f->host).free_count, 2);

  /* B's block is still cached for B. */
  assert_ptr_equal(alloc_ok(f->pool, 8 * KIB, STREAM_B), pb);
  assert_int_equal(stats_of(f->host).alloc_count, 3);
  assert_ok(gpumem_free(f->pool, pb, STREAM_B));
  (void)pn;
}

static void test_pool_release_all_streams(void** state) {
  struct fixture* f = *state;
  void *pa, *pb, *pn;
  cache_three_arenas(f, &pa, &pb, &pn);
  /* The stream is ignored with the flag. */
  assert_ok(gpumem_pool_release(f->pool, STREAM_A, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  assert_holds(f, 0);
  gpumem_pool_info_t info = pool_info_of(f->pool);
  assert_int_equal(info.free_block_count, 0);
  assert_int_equal(info.free_bytes, 0);
  gpumem_allocator_stats_t h = stats_of(f->host);
  assert_int_equal(h.free_count, 3);
  assert_int_equal(h.free_count, h.alloc_count);
  assert_int_equal(stats_of(f->pool).upstream_free_count, 3);
}

/* Memory no stream's work touches: the setting is taken, frees on other streams are not fenced,
 * and a recorded stream changes nothing; bad input is refused all the same. */
static void test_pool_stream_reuse_and_record_stream_on_host_memory(void** state) {
  struct fixture* f = *state;
  assert_ok(gpumem_pool_set_stream_reuse(f->pool, GPUMEM_STREAM_REUSE_NEVER));
  assert_ok(gpumem_pool_set_stream_reuse(f->pool, GPUMEM_STREAM_REUSE_HOST_WAIT));
  assert_ok(gpumem_pool_set_stream_reuse(f->pool, GPUMEM_STREAM_REUSE_FENCE));
  assert_status(gpumem_pool_set_stream_reuse(f->pool, 3), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("stream reuse 3");
  assert_status(gpumem_pool_set_stream_reuse(f->host, GPUMEM_STREAM_REUSE_NEVER), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a pool");

  void* p = NULL;
  assert_ok(gpumem_alloc(f->pool, 1000, STREAM_A, &p));
  assert_status(gpumem_pool_record_stream(f->pool, p, GPUMEM_STREAM_PER_THREAD), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("per-thread default stream");
  assert_status(gpumem_pool_record_stream(f->pool, (char*)p + 512, STREAM_B), GPUMEM_ERROR_NOT_OWNED);
  assert_status(gpumem_pool_record_stream(f->host, p, STREAM_B), GPUMEM_ERROR_INVALID_HANDLE);
  assert_ok(gpumem_pool_record_stream(f->pool, p, STREAM_B));
  assert_ok(gpumem_free(f->pool, p, STREAM_B));
  void* q = NULL;
  assert_ok(gpumem_alloc(f->pool, 1000, STREAM_A, &q));
  assert_ptr_equal(q, p); /* not held back: nothing to wait for */
  assert_status(gpumem_pool_record_stream(f->pool, p, STREAM_B), GPUMEM_SUCCESS);
  assert_ok(gpumem_free(f->pool, q, STREAM_A));
  assert_status(gpumem_pool_record_stream(f->pool, p, STREAM_B), GPUMEM_ERROR_NOT_OWNED);
}

static void test_pool_release_unknown_flags(void** state) {
  struct fixture* f = *state;
  void *pa, *pb, *pn;
  cache_three_arenas(f, &pa, &pb, &pn);
  struct snapshot before = snap(f);
  assert_status(gpumem_pool_release(f->pool, NULL, 0x2), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("unknown release flags 0x2");
  assert_status(gpumem_pool_release(f->pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS | 0x80000000u),
                GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("0x80000000");
  assert_unchanged(f, &before);
}

static void test_pool_free_not_owned(void** state) {
  struct fixture* f = *state;
  void* base = alloc_ok(f->pool, MIB, NULL);
  void* q = alloc_ok(f->pool, 4 * KIB, NULL);
  assert_ok(gpumem_free(f->pool, q, NULL));
  void* upstream_own = NULL;
  assert_ok(gpumem_alloc(f->host, 4 * KIB, NULL, &upstream_own));
  static char foreign[64];
  struct snapshot before = snap(f);

  assert_status(gpumem_free(f->pool, foreign, NULL), GPUMEM_ERROR_NOT_OWNED);
  assert_detail_contains("was not allocated by this pool");
  assert_unchanged(f, &before);

  assert_status(gpumem_free(f->pool, at(base, 512), NULL), GPUMEM_ERROR_NOT_OWNED);
  assert_detail_contains("was not allocated by this pool");
  assert_unchanged(f, &before);

  assert_status(gpumem_free(f->pool, q, NULL), GPUMEM_ERROR_NOT_OWNED);
  assert_detail_contains("or is freed already");
  assert_unchanged(f, &before);

  /* The upstream's own allocation is not the pool's. */
  assert_status(gpumem_free(f->pool, upstream_own, NULL), GPUMEM_ERROR_NOT_OWNED);
  assert_unchanged(f, &before);

  assert_ok(gpumem_free(f->host, upstream_own, NULL));
  assert_ok(gpumem_free(f->pool, base, NULL));
  /* NULL is nothing to free. */
  assert_ok(gpumem_free(f->pool, NULL, NULL));
}

static void test_pool_destroy_with_live_allocations_busy(void** state) {
  struct fixture* f = *state;
  void* p = alloc_ok(f->pool, 4 * KIB, NULL);
  void* q = alloc_ok(f->pool, 8 * KIB, NULL);
  struct snapshot before = snap(f);
  assert_status(gpumem_allocator_destroy(f->pool), GPUMEM_ERROR_BUSY);
  assert_detail_contains("2 live allocations (12,288 bytes)");
  assert_unchanged(f, &before);
  /* Still a working pool. */
  memset(p, 1, 4 * KIB);
  assert_ok(gpumem_free(f->pool, p, NULL));
  assert_status(gpumem_allocator_destroy(f->pool), GPUMEM_ERROR_BUSY);
  assert_detail_contains("1 live allocation (8,192 bytes)");
  assert_ok(gpumem_free(f->pool, q, NULL));

  assert_ok(gpumem_allocator_destroy(f->pool));
  f->pool = NULL;
  /* Destroying the pool returned its cached blocks. */
  gpumem_allocator_stats_t h = stats_of(f->host);
  assert_int_equal(h.bytes_in_use, 0);
  assert_int_equal(h.free_count, 2);
}

static void test_pool_destroy_force_returns_everything(void** state) {
  struct fixture* f = *state;
  void* base = alloc_ok(f->pool, MIB, NULL);
  void* other = alloc_ok(f->pool, 64 * KIB, STREAM_A);
  assert_ok(gpumem_free(f->pool, base, NULL));
  /* Live chunks inside a split block, a live whole block on another arena, a cached whole block. */
  assert_ptr_equal(alloc_ok(f->pool, 256 * KIB, NULL), base);
  assert_ptr_equal(alloc_ok(f->pool, 1000, NULL), at(base, 256 * KIB));
  void* cached = alloc_ok(f->pool, 2 * MIB, NULL);
  assert_ok(gpumem_free(f->pool, cached, NULL));
  assert_holds(f, 3 * MIB + 64 * KIB);
  (void)other;

  assert_ok(gpumem_allocator_destroy_force(f->pool));
  f->pool = NULL;
  gpumem_allocator_stats_t h = stats_of(f->host);
  assert_int_equal(h.bytes_in_use, 0);
  assert_int_equal(h.alloc_count, 3);
  assert_int_equal(h.free_count, 3);
}

static void test_pool_upstream_busy_while_pool_lives(void** state) {
  struct fixture* f = *state;
  void* p = alloc_ok(f->pool, 4 * KIB, NULL);
  const gpumem_allocator_stats_t before = stats_of(f->host);
  assert_status(gpumem_allocator_destroy(f->host), GPUMEM_ERROR_BUSY);
  assert_detail_contains("relied on 1 time:");
  assert_status(gpumem_allocator_destroy_force(f->host), GPUMEM_ERROR_BUSY);
  assert_detail_contains("upstream of a pool");

  gpumem_allocator_t* second = NULL;
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = f->host;
  assert_ok(gpumem_pool_create(&params, &second));
  assert_status(gpumem_allocator_destroy(f->host), GPUMEM_ERROR_BUSY);
  assert_detail_contains("relied on 2 times:");
  assert_ok(gpumem_allocator_destroy(second));

  /* Refused, so nothing was freed under the pool. */
  gpumem_allocator_stats_t after = stats_of(f->host);
  assert_stats_equal(&after, &before);
  memset(p, 7, 4 * KIB);
  assert_ok(gpumem_free(f->pool, p, NULL));
  /* The teardown destroys the pool, then the host, which must then succeed. */
}

static void test_pool_functions_reject_non_pool(void** state) {
  struct fixture* f = *state;
  assert_status(gpumem_pool_release(f->host, NULL, 0), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("is a host allocator, not a pool");

  gpumem_pool_info_t info;
  memset(&info, 0x5a, sizeof info);
  info.struct_size = sizeof info;
  assert_status(gpumem_pool_get_info(f->host, &info), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a pool");
  assert_int_equal(info.struct_size, sizeof info);
  assert_int_equal(info.used_bytes, 0);
  assert_int_equal(info.total_bytes, 0);
  assert_int_equal(info.limit, 0);
  assert_int_equal(info.arena_count, 0);

  assert_status(gpumem_pool_set_limit(f->host, MIB), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a pool");
  assert_status(gpumem_pool_set_limit_fraction(f->host, 0.5), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a pool");

  /* Pool functions take no NULL for a default. */
  assert_status(gpumem_pool_release(NULL, NULL, 0), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a live gpumem allocator");
  assert_status(gpumem_pool_get_info(NULL, &info), GPUMEM_ERROR_INVALID_HANDLE);
  assert_status(gpumem_pool_set_limit(NULL, MIB), GPUMEM_ERROR_INVALID_HANDLE);
  assert_status(gpumem_pool_set_limit_fraction(NULL, 0.5), GPUMEM_ERROR_INVALID_HANDLE);
}

static void test_pool_get_info_bad_input(void** state) {
  struct fixture* f = *state;
  assert_status(gpumem_pool_get_info(f->pool, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_info is NULL");

  gpumem_pool_info_t info;
  memset(&info, 0x5a, sizeof info);
  info.struct_size = offsetof(gpumem_pool_info_t, pending_bytes) - 8; /* below 0.1's size */
  assert_status(gpumem_pool_get_info(f->pool, &info), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains(
      "out_info->struct_size is 48, less than gpumem_pool_info_t had in gpumem 0.1, its first "
      "release (56 bytes)");
  assert_int_equal(info.used_bytes, 0);

  /* A newer caller's bigger struct: what this library does not know reads as 0. */
  struct {
    gpumem_pool_info_t info;
    uint64_t newer;
  } bigger;
  memset(&bigger, 0x5a, sizeof bigger);
  bigger.info.struct_size = sizeof bigger;
  void* p = alloc_ok(f->pool, 1, NULL);
  assert_ok(gpumem_pool_get_info(f->pool, &bigger.info));
  assert_int_equal(bigger.info.struct_size, sizeof bigger);
  assert_int_equal(bigger.info.used_bytes, 512);
  assert_int_equal(bigger.info.total_bytes, 512);
  assert_int_equal(bigger.newer, 0);
  assert_ok(gpumem_free(f->pool, p, NULL));
}

static void test_pool_create_bad_input(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = host;
  gpumem_allocator_t* pool = (gpumem_allocator_t*)0x1;

  assert_status(gpumem_pool_create(&params, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_pool is NULL");

  assert_status(gpumem_pool_create(NULL, &pool), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("params is NULL");
  assert_null(pool);

  pool = (gpumem_allocator_t*)0x1;
  params.upstream = NULL;
  assert_status(gpumem_pool_create(&params, &pool), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("params->upstream is NULL");
  assert_null(pool);
  params.upstream = host;

  pool = (gpumem_allocator_t*)0x1;
  params.struct_size = sizeof params - 1;
  assert_status(gpumem_pool_create(&params, &pool), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("params->struct_size is");
  assert_null(pool);
  params.struct_size = sizeof params;

  pool = (gpumem_allocator_t*)0x1;
  params.limit = MIB;
  params.limit_fraction = 0.5;
  assert_status(gpumem_pool_create(&params, &pool), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("both a limit (1,048,576 bytes) and a limit fraction");
  assert_null(pool);
  params.limit = 0;

  pool = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_pool_create(&params, &pool), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("needs a device");
  assert_null(pool);

  const double out_of_range[] = {1.5, -0.25};
  for (size_t i = 0; i < 2; ++i) {
    pool = (gpumem_allocator_t*)0x1;
    params.limit_fraction = out_of_range[i];
    assert_status(gpumem_pool_create(&params, &pool), GPUMEM_ERROR_INVALID_ARGUMENT);
    assert_detail_contains("is not in (0, 1]");
    assert_null(pool);
  }
  params.limit_fraction = 0;

  /* Not a handle gpumem made. */
  uint64_t not_a_handle[4] = {0, 0, 0, 0};
  pool = (gpumem_allocator_t*)0x1;
  params.upstream = (gpumem_allocator_t*)not_a_handle;
  assert_status(gpumem_pool_create(&params, &pool), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a live gpumem allocator");
  assert_null(pool);

  /* A newer caller's bigger params: accepted while its newer fields are zero, refused once one
   * is set, since this library cannot do what it asks. */
  struct {
    gpumem_pool_params_t params;
    uint64_t newer[2];
  } bigger;
  memset(&bigger, 0, sizeof bigger);
  bigger.params = (gpumem_pool_params_t)GPUMEM_POOL_PARAMS_INIT;
  bigger.params.struct_size = sizeof bigger;
  bigger.params.upstream = host;
  pool = NULL;
  assert_ok(gpumem_pool_create(&bigger.params, &pool));
  assert_ok(gpumem_allocator_destroy(pool));
  bigger.newer[1] = 7;
  pool = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_pool_create(&bigger.params, &pool), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("params->struct_size is 48, more than the 32 bytes of gpumem_pool_params_t");
  assert_detail_contains("and byte 40 is not zero");
  assert_null(pool);

  /* No failed create kept the upstream busy. */
  assert_ok(gpumem_allocator_destroy(host));
}

static void test_pool_params_init(void** state) {
  (void)state;
  gpumem_pool_params_t params;
  memset(&params, 0x5a, sizeof params);
  assert_ok(gpumem_pool_params_init(&params, sizeof params));
  assert_int_equal(params.struct_size, sizeof params);
  assert_null(params.upstream);
  assert_int_equal(params.limit, 0);
  assert_true(params.limit_fraction == 0.0);
  const gpumem_pool_params_t macro = GPUMEM_POOL_PARAMS_INIT;
  assert_int_equal(macro.struct_size, sizeof macro);
  assert_null(macro.upstream);
  assert_int_equal(macro.limit, 0);
  assert_true(macro.limit_fraction == 0.0);

  assert_status(gpumem_pool_params_init(NULL, sizeof params), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("params is NULL");
  assert_status(gpumem_pool_params_init(&params, 4), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("struct_size is 4");
}

static void test_pool_alloc_bad_size(void** state) {
  struct fixture* f = *state;
  struct snapshot before = snap(f);
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(f->pool, SIZE_MAX, NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("overflows rounding");
  assert_null(p);
  p = (void*)0x1;
  /* The largest size whose rounding overflows. */
  assert_status(gpumem_alloc(f->pool, SIZE_MAX - 510, NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("overflows rounding to 512 bytes");
  assert_null(p);
  p = (void*)0x1;
  assert_status(gpumem_alloc(f->pool, 0, NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("size is 0");
  assert_null(p);
  assert_status(gpumem_alloc(f->pool, 512, NULL, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_ptr is NULL");
  /* No out-of-memory counted, no arena made, nothing taken from the upstream. */
  assert_unchanged(f, &before);
}

struct upstream_events {
  int pre, post;
  size_t post_size, post_mem_size;
  void* post_ptr;
  gpumem_status_t post_status;
  gpumem_allocator_t* allocator;
};

static void count_upstream(const gpumem_hook_info_t* info, void* user_data) {
  struct upstream_events* e = user_data;
  e->allocator = info->allocator;
  if (info->event == GPUMEM_HOOK_UPSTREAM_ALLOC_PRE) ++e->pre;
  if (info->event == GPUMEM_HOOK_UPSTREAM_ALLOC_POST) {
    ++e->post;
    e->post_size = info->size;
    e->post_mem_size = info->mem_size;
    e->post_ptr = info->ptr;
    e->post_status = info->status;
  }
}

static void test_pool_upstream_hooks_only_when_growing(void** state) {
  struct fixture* f = *state;
  struct upstream_events e;
  memset(&e, 0, sizeof e);
  uint64_t id = 0;
  assert_ok(gpumem_allocator_add_hook(f->pool, GPUMEM_HOOK_UPSTREAM_ALLOC_PRE | GPUMEM_HOOK_UPSTREAM_ALLOC_POST,
                                      count_upstream, &e, &id));
  void* p = alloc_ok(f->pool, 1000, NULL);
  assert_int_equal(e.pre, 1);
  assert_int_equal(e.post, 1);
  assert_int_equal(e.post_mem_size, 1024);
  assert_ptr_equal(e.post_ptr, p);
  assert_int_equal(e.post_status, GPUMEM_SUCCESS);
  assert_ptr_equal(e.allocator, f->pool);
  assert_ok(gpumem_free(f->pool, p, NULL));
  /* Served from the cache: the upstream is not asked. */
  assert_ptr_equal(alloc_ok(f->pool, 1000, NULL), p);
  assert_int_equal(e.pre, 1);
  assert_int_equal(e.post, 1);
  assert_ok(gpumem_free(f->pool, p, NULL));
  assert_ok(gpumem_allocator_remove_hook(f->pool, id));
}

struct blocks_seen {
  gpumem_block_info_t blocks[8];
  size_t count;
};

static void collect_block(const gpumem_block_info_t* block, void* user_data) {
  struct blocks_seen* seen = user_data;
  if (seen->count < 8) seen->blocks[seen->count] = *block;
  seen->count++;
}

static const gpumem_block_info_t* block_at(const struct blocks_seen* seen, const void* address) {
  for (size_t i = 0; i < seen->count && i < 8; i++)
    if (seen->blocks[i].address == address) return &seen->blocks[i];
  fail_msg("no block at %p in the snapshot", address);
  return NULL;
}

static void test_pool_snapshot_lists_every_block(void** state) {
  struct fixture* f = *state;
  void* a = alloc_ok(f->pool, 1000, STREAM_A);
  void* b = alloc_ok(f->pool, 4 * KIB, STREAM_B);
  assert_ok(gpumem_free(f->pool, b, STREAM_B));
  void* c = alloc_ok(f->pool, 2 * KIB, STREAM_B); /* the first half of b's block */
  assert_ptr_equal(c, b);
  struct blocks_seen seen = {0};
  assert_ok(gpumem_pool_snapshot(f->pool, collect_block, &seen));
  assert_int_equal(seen.count, 3);
  const gpumem_block_info_t* x = block_at(&seen, a);
  assert_ptr_equal(x->segment, a);
  assert_int_equal(x->segment_size, KIB);
  assert_int_equal(x->size, KIB);
  assert_int_equal(x->requested, 1000);
  assert_int_equal(x->state, GPUMEM_BLOCK_IN_USE);
  assert_ptr_equal(x->stream, STREAM_A);
  x = block_at(&seen, c);
  assert_ptr_equal(x->segment, b);
  assert_int_equal(x->segment_size, 4 * KIB);
  assert_int_equal(x->size, 2 * KIB);
  assert_int_equal(x->state, GPUMEM_BLOCK_IN_USE);
  x = block_at(&seen, (char*)b + 2 * KIB);
  assert_ptr_equal(x->segment, b);
  assert_int_equal(x->size, 2 * KIB);
  assert_int_equal(x->requested, 0);
  assert_int_equal(x->state, GPUMEM_BLOCK_FREE);
  assert_ptr_equal(x->stream, STREAM_B);
  /* In order of address: each segment's blocks together, in order. */
  for (size_t i = 1; i < seen.count; i++)
    assert_true((uintptr_t)seen.blocks[i - 1].address < (uintptr_t)seen.blocks[i].address);

  char path[128];
  snprintf(path, sizeof path, "/tmp/gpumem_snapshot_%d.json", (int)getpid());
  assert_ok(gpumem_pool_snapshot_json(f->pool, path));
  FILE* file = fopen(path, "rb");
  assert_non_null(file);
  char text[4096];
  const size_t n = fread(text, 1, sizeof text - 1, file);
  fclose(file);
  remove(path);
  text[n] = '\0';
  assert_non_null(strstr(text,
                         "{\"format\": \"gpumem-pool-snapshot\", \"version\": 1, \"device\": -1, "
                         "\"used_bytes\": 3072, \"free_bytes\": 2048, \"pending_bytes\": 0, "
                         "\"total_bytes\": 5120, \"limit\": 0,"));
  char expect[256];
  snprintf(expect, sizeof expect,
           "{\"address\": %llu, \"size\": 2048, \"requested\": 0, \"state\": \"free\", "
           "\"stream\": %llu}]}",
           (unsigned long long)(uintptr_t)((char*)b + 2 * KIB), (unsigned long long)(uintptr_t)STREAM_B);
  assert_non_null(strstr(text, expect));
  size_t segments = 0;
  for (const char* p = text; (p = strstr(p, "\"blocks\": [")) != NULL; p++) segments++;
  assert_int_equal(segments, 2);
  assert_non_null(strstr(text, "\n]}\n"));
  assert_ok(gpumem_free(f->pool, a, STREAM_A));
  assert_ok(gpumem_free(f->pool, c, STREAM_B));
}

static void test_pool_snapshot_bad_input(void** state) {
  struct fixture* f = *state;
  struct blocks_seen seen = {0};
  assert_status(gpumem_pool_snapshot(f->pool, NULL, &seen), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("fn is NULL");
  assert_status(gpumem_pool_snapshot(f->host, collect_block, &seen), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a pool");
  assert_int_equal(seen.count, 0);
  assert_status(gpumem_pool_snapshot_json(f->pool, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_status(gpumem_pool_snapshot_json(f->pool, "/nonexistent-dir/s.json"), GPUMEM_ERROR_IO);
  assert_detail_contains("cannot create the snapshot file /nonexistent-dir/s.json");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_pool_rounds_to_512, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_reuses_freed_block, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_best_fit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_splits_block, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_merges_on_free, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_release_keeps_split_blocks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_arena_per_stream, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_default_streams_share_arena, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_per_thread_stream_per_thread, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_release_one_stream, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_release_all_streams, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_release_unknown_flags, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_stream_reuse_and_record_stream_on_host_memory, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_free_not_owned, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_destroy_with_live_allocations_busy, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_destroy_force_returns_everything, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_upstream_busy_while_pool_lives, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_functions_reject_non_pool, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_get_info_bad_input, setup, teardown),
      cmocka_unit_test(test_pool_create_bad_input),
      cmocka_unit_test(test_pool_params_init),
      cmocka_unit_test_setup_teardown(test_pool_alloc_bad_size, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_upstream_hooks_only_when_growing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_snapshot_lists_every_block, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_snapshot_bad_input, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
