/* Out of memory with reclaim callbacks: what the callbacks free is used wherever they free it, and
 * a callback's own allocation never runs the callbacks again. Over host memory. */
#define _POSIX_C_SOURCE 200809L

#include "test_util.h"

#include "pool_fixture.h"

struct reclaimer {
  gpumem_allocator_t* pool;
  int calls;
  void* garbage; /* freed by the callback, on garbage_stream */
  gpumem_stream_t garbage_stream;
  size_t inner_size; /* allocated by the callback from the pool, if not 0 */
  gpumem_status_t inner_status;
  char inner_detail[1024];
};

static void reclaim(int32_t device, size_t size, void* user_data) {
  (void)device;
  (void)size;
  struct reclaimer* r = user_data;
  ++r->calls;
  if (r->garbage) {
    assert_ok(gpumem_free(r->pool, r->garbage, r->garbage_stream));
    r->garbage = NULL;
  }
  if (r->inner_size) {
    void* p = NULL;
    r->inner_status = gpumem_alloc(r->pool, r->inner_size, NULL, &p);
    snprintf(r->inner_detail, sizeof r->inner_detail, "%s", gpumem_last_error_detail());
    if (p) assert_ok(gpumem_free(r->pool, p, NULL));
  }
}

static uint64_t add_reclaimer(struct reclaimer* r, gpumem_allocator_t* pool) {
  r->pool = pool;
  uint64_t id = 0;
  assert_ok(gpumem_reclaim_add(reclaim, r, &id));
  return id;
}

/* The callback frees a whole block that cannot serve the request; only returning it to the
 * upstream makes room under the limit. */
static void test_pool_reclaim_whole_block_returned(void** state) {
  struct fixture* f = *state;
  assert_ok(gpumem_pool_set_limit(f->pool, MIB));
  struct reclaimer r = {0};
  r.garbage = alloc_ok(f->pool, 512 * KIB, NULL);
  const uint64_t id = add_reclaimer(&r, f->pool);
  void* p = NULL;
  const gpumem_status_t st = gpumem_alloc(f->pool, 768 * KIB, NULL, &p);
  assert_ok(gpumem_reclaim_remove(id));
  assert_ok(st);
  assert_int_equal(r.calls, 1);
  assert_int_equal(pool_info_of(f->pool).total_bytes, 768 * KIB);
  assert_int_equal(stats_of(f->host).bytes_reserved, 768 * KIB);
  assert_ok(gpumem_free(f->pool, p, NULL));
}

/* The callback frees memory into another stream's arena, which does not lend over host memory:
 * the block goes back to the upstream and the pool grows on the asking stream. */
static void test_pool_reclaim_other_stream_used(void** state) {
  struct fixture* f = *state;
  assert_ok(gpumem_pool_set_limit(f->pool, MIB));
  struct reclaimer r = {0};
  r.garbage = alloc_ok(f->pool, 768 * KIB, STREAM_B);
  r.garbage_stream = STREAM_B;
  const uint64_t id = add_reclaimer(&r, f->pool);
  void* p = NULL;
  const gpumem_status_t st = gpumem_alloc(f->pool, 512 * KIB, STREAM_A, &p);
  assert_ok(gpumem_reclaim_remove(id));
  assert_ok(st);
  assert_int_equal(r.calls, 1);
  const gpumem_pool_info_t info = pool_info_of(f->pool);
  assert_int_equal(info.total_bytes, 512 * KIB);
  assert_int_equal(info.used_bytes, 512 * KIB);
  assert_int_equal(info.arena_count, 1); /* stream B's arena held nothing after: retired */
  assert_ok(gpumem_free(f->pool, p, STREAM_A));
}

/* A callback that allocates from the pool that is out of memory: its allocation fails at once,
 * saying why, instead of running the callbacks again without end. */
static void test_pool_reclaim_nested_allocation_fails(void** state) {
  struct fixture* f = *state;
  assert_ok(gpumem_pool_set_limit(f->pool, MIB));
  void* held = alloc_ok(f->pool, 768 * KIB, NULL);
  struct reclaimer r = {0};
  r.inner_size = 512 * KIB;
  r.inner_status = GPUMEM_SUCCESS;
  const uint64_t id = add_reclaimer(&r, f->pool);
  const gpumem_allocator_stats_t before = stats_of(f->pool);
  void* p = (void*)0x1;
  const gpumem_status_t st = gpumem_alloc(f->pool, 512 * KIB, NULL, &p);
  assert_ok(gpumem_reclaim_remove(id));
  assert_status(st, GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  assert_int_equal(r.calls, 1);
  assert_int_equal(r.inner_status, GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_non_null(strstr(r.inner_detail,
                         "the reclaim callbacks were not run, as this allocation is made from "
                         "inside one"));
  /* The outer call says what it tried. */
  assert_detail_contains("ran the reclaim callbacks");
  assert_detail_contains("returned 0 cached bytes");
  const gpumem_allocator_stats_t s = stats_of(f->pool);
  assert_int_equal(s.oom_count, before.oom_count + 2);
  assert_int_equal(pool_info_of(f->pool).used_bytes, 768 * KIB);
  assert_ok(gpumem_free(f->pool, held, NULL));
}

/* After a callback that frees nothing, the detail names each step. */
static void test_pool_reclaim_detail_says_what_was_tried(void** state) {
  struct fixture* f = *state;
  assert_ok(gpumem_pool_set_limit(f->pool, MIB));
  void* held = alloc_ok(f->pool, 768 * KIB, NULL);
  void* cached = alloc_ok(f->pool, 128 * KIB, STREAM_B);
  assert_ok(gpumem_free(f->pool, cached, STREAM_B));
  struct reclaimer r = {0};
  const uint64_t id = add_reclaimer(&r, f->pool);
  void* p = (void*)0x1;
  const gpumem_status_t st = gpumem_alloc(f->pool, 512 * KIB, NULL, &p);
  assert_ok(gpumem_reclaim_remove(id));
  assert_status(st, GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_detail_contains(
      "refused by the pool's limit; then the pool looked in other streams' arenas, waited for the "
      "pending frees, returned 131,072 cached bytes and tried again; ran the reclaim callbacks");
  assert_int_equal(r.calls, 1);
  assert_int_equal(pool_info_of(f->pool).total_bytes, 768 * KIB);
  assert_ok(gpumem_free(f->pool, held, NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_pool_reclaim_whole_block_returned, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_reclaim_other_stream_used, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_reclaim_nested_allocation_fails, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_reclaim_detail_says_what_was_tried, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
