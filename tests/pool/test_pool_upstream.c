/* A pool's upstream refuses to take back, from anyone but the pool, memory the pool holds: in use
 * or cached. Over host memory. */
#define _POSIX_C_SOURCE 200809L

#include "test_util.h"

#include "pool_fixture.h"

static void assert_refused_through_upstream(struct fixture* f, void* p) {
  assert_status(gpumem_free(f->host, p, NULL), GPUMEM_ERROR_NOT_OWNED);
  assert_detail_contains("is held by the pool");
  assert_detail_contains("free it through that pool");
}

static void test_pool_upstream_refuses_block_in_use(void** state) {
  struct fixture* f = *state;
  unsigned char* p = alloc_ok(f->pool, 4096, NULL);
  memset(p, 0xab, 4096);
  const gpumem_allocator_stats_t host_before = stats_of(f->host);
  assert_refused_through_upstream(f, p);
  /* Nothing changed: the upstream still holds it for the pool, and its bytes are intact. */
  const gpumem_allocator_stats_t host_after = stats_of(f->host);
  assert_int_equal(host_after.bytes_in_use, host_before.bytes_in_use);
  assert_int_equal(host_after.free_count, host_before.free_count);
  assert_int_equal(p[0], 0xab);
  assert_int_equal(p[4095], 0xab);
  assert_ok(gpumem_free(f->pool, p, NULL));
  assert_ok(gpumem_allocator_destroy(f->pool));
  f->pool = NULL;
  assert_int_equal(stats_of(f->host).bytes_in_use, 0);
}

static void test_pool_upstream_refuses_cached_block(void** state) {
  struct fixture* f = *state;
  void* p = alloc_ok(f->pool, 64 * KIB, STREAM_A);
  assert_ok(gpumem_free(f->pool, p, STREAM_A));
  assert_int_equal(pool_info_of(f->pool).free_bytes, 64 * KIB);
  assert_refused_through_upstream(f, p);
  /* The pool hands the cached block out again, and can be destroyed. */
  void* q = alloc_ok(f->pool, 64 * KIB, STREAM_A);
  assert_ptr_equal(q, p);
  assert_ok(gpumem_free(f->pool, q, STREAM_A));
  assert_ok(gpumem_allocator_destroy(f->pool));
  f->pool = NULL;
}

/* A piece of a split block is no upstream allocation at all: refused too. */
static void test_pool_upstream_refuses_piece(void** state) {
  struct fixture* f = *state;
  void* whole = alloc_ok(f->pool, 4096, NULL);
  assert_ok(gpumem_free(f->pool, whole, NULL));
  void* b = alloc_ok(f->pool, 512, NULL);
  void* c = alloc_ok(f->pool, 512, NULL);
  assert_ptr_equal(b, whole);
  assert_ptr_equal(c, (char*)whole + 512);
  assert_status(gpumem_free(f->host, c, NULL), GPUMEM_ERROR_NOT_OWNED);
  assert_ok(gpumem_free(f->pool, b, NULL));
  assert_ok(gpumem_free(f->pool, c, NULL));
}

/* Memory the upstream handed out directly is still its own to free, beside a pool on it. */
static void test_pool_upstream_frees_its_own(void** state) {
  struct fixture* f = *state;
  void* pooled = alloc_ok(f->pool, 4096, NULL);
  void* own = alloc_ok(f->host, 4096, NULL);
  assert_ok(gpumem_free(f->host, own, NULL));
  assert_ok(gpumem_free(f->pool, pooled, NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_pool_upstream_refuses_block_in_use, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_upstream_refuses_cached_block, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_upstream_refuses_piece, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_upstream_frees_its_own, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
