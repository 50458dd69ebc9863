/* Tenants of one pool (tenant.h): what one frees serves another at once, budgets hard and soft (and the pool's own soft
 * limit), the figures of each beside the pool's, and frees through the wrong allocator refused. Over a pool of host
 * memory: no GPU needed (the conformance suite runs over a tenant of the device allocator on a GPU). */
#include <stdlib.h>

#include "test_util.h"

#define KiB ((size_t)1024)
#define MiB (KiB * KiB)

static gpumem_allocator_t *host, *pool;

static int setup(void** state) {
  (void)state;
  if (gpumem_allocator_create_host(0, &host) != GPUMEM_SUCCESS) return 1;
  gpumem_pool_params_t p = GPUMEM_POOL_PARAMS_INIT;
  p.upstream = host;
  return gpumem_pool_create(&p, &pool) != GPUMEM_SUCCESS;
}

static int teardown(void** state) {
  (void)state;
  return gpumem_allocator_destroy(pool) != GPUMEM_SUCCESS || gpumem_allocator_destroy(host) != GPUMEM_SUCCESS;
}

static gpumem_allocator_t* tenant(const char* name, uint64_t limit, uint64_t soft_limit) {
  gpumem_tenant_params_t p = GPUMEM_TENANT_PARAMS_INIT;
  p.upstream = pool;
  p.name = name;
  p.limit = limit;
  p.soft_limit = soft_limit;
  gpumem_allocator_t* t = NULL;
  assert_ok(gpumem_tenant_create(&p, &t));
  return t;
}

static gpumem_tenant_info_t info_of(gpumem_allocator_t* t) {
  gpumem_tenant_info_t i;
  memset(&i, 0xab, sizeof i);
  i.struct_size = sizeof i;
  assert_ok(gpumem_tenant_get_info(t, &i));
  return i;
}

/* A block one tenant frees is the block the other gets next: the pool grows once. */
static void test_tenant_memory_one_frees_serves_another(void** state) {
  (void)state;
  gpumem_allocator_t* a = tenant("torch", 0, 0);
  gpumem_allocator_t* b = tenant("cupy", 0, 0);
  void *p = NULL, *q = NULL;
  assert_ok(gpumem_alloc(a, MiB, NULL, &p));
  const uint64_t reserved = stats_of(pool).bytes_reserved;
  assert_ok(gpumem_free(a, p, NULL));
  assert_ok(gpumem_alloc(b, MiB, NULL, &q));
  assert_ptr_equal(q, p);
  assert_int_equal(stats_of(pool).bytes_reserved, reserved);
  assert_int_equal(stats_of(a).bytes_in_use, 0);
  assert_int_equal(stats_of(b).bytes_in_use, MiB);
  assert_int_equal(stats_of(b).alloc_count, 1);
  assert_ok(gpumem_free(b, q, NULL));
  assert_ok(gpumem_allocator_destroy(a));
  assert_ok(gpumem_allocator_destroy(b));
}

/* The tenants' bytes add up to the pool's, with the pool's own caller beside them. */
static void test_tenant_figures_add_up_to_the_pool(void** state) {
  (void)state;
  gpumem_allocator_t* a = tenant("a", 0, 0);
  gpumem_allocator_t* b = tenant("b", 0, 0);
  void* p[30];
  for (int i = 0; i < 30; ++i) {
    gpumem_allocator_t* who = i % 3 == 0 ? a : i % 3 == 1 ? b : pool;
    assert_ok(gpumem_alloc(who, (size_t)(i + 1) * 1000, NULL, &p[i]));
    const uint64_t sum = stats_of(a).bytes_in_use + stats_of(b).bytes_in_use;
    assert_true(sum <= stats_of(pool).bytes_in_use);
  }
  uint64_t own = 0;
  for (int i = 2; i < 30; i += 3) own += ((size_t)(i + 1) * 1000 + 511) / 512 * 512;
  assert_int_equal(stats_of(a).bytes_in_use + stats_of(b).bytes_in_use + own, stats_of(pool).bytes_in_use);
  for (int i = 0; i < 30; ++i) assert_ok(gpumem_free(i % 3 == 0 ? a : i % 3 == 1 ? b : pool, p[i], NULL));
  assert_int_equal(stats_of(pool).bytes_in_use, 0);
  assert_ok(gpumem_allocator_destroy(a));
  assert_ok(gpumem_allocator_destroy(b));
}

/* Past the hard budget: out of memory naming the tenant and its budget, and nothing changed. */
static void test_tenant_hard_budget(void** state) {
  (void)state;
  gpumem_allocator_t* t = tenant("torch", MiB, 0);
  void *p = NULL, *q = (void*)1;
  assert_ok(gpumem_alloc(t, 512 * KiB, NULL, &p));
  const gpumem_allocator_stats_t before = stats_of(t);
  const uint64_t pool_before = stats_of(pool).bytes_in_use;
  assert_status(gpumem_alloc(t, 600 * KiB, NULL, &q), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_detail_contains("tenant 'torch'");
  assert_detail_contains("past its budget of 1,048,576 bytes");
  assert_null(q);
  assert_int_equal(stats_of(t).bytes_in_use, before.bytes_in_use);
  assert_int_equal(stats_of(t).oom_count, before.oom_count + 1);
  assert_int_equal(stats_of(pool).bytes_in_use, pool_before);
  gpumem_tenant_info_t i = info_of(t);
  assert_string_equal(i.name, "torch");
  assert_int_equal(i.limit, MiB);
  assert_int_equal(i.refused, 1);
  assert_ok(gpumem_alloc(t, 512 * KiB, NULL, &q)); /* exactly the budget */
  assert_ok(gpumem_free(t, p, NULL));
  assert_ok(gpumem_tenant_set_limits(t, 256 * KiB, 0)); /* below what it holds: nothing taken */
  assert_int_equal(info_of(t).bytes_in_use, 512 * KiB);
  assert_status(gpumem_alloc(t, 512, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_ok(gpumem_free(t, q, NULL));
  assert_ok(gpumem_alloc(t, 256 * KiB, NULL, &p));
  assert_ok(gpumem_free(t, p, NULL));
  assert_int_equal(info_of(t).peak_bytes_in_use, MiB);
  assert_ok(gpumem_allocator_destroy(t));
}

/* Past the soft budget: the pool gives back what it caches, and nothing is refused. */
static void test_tenant_soft_budget(void** state) {
  (void)state;
  gpumem_allocator_t* t = tenant("cupy", 0, MiB);
  void *cached = NULL, *p = NULL, *q = NULL;
  assert_ok(gpumem_pool_release(pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS)); /* what earlier tests cached */
  assert_ok(gpumem_alloc(pool, 256 * KiB, NULL, &cached));                     /* too small for what the tenant asks */
  assert_ok(gpumem_free(pool, cached, NULL));
  assert_int_equal(stats_of(pool).bytes_reserved, 256 * KiB); /* cached */
  assert_ok(gpumem_alloc(t, 512 * KiB, NULL, &p));            /* below: the cache stays */
  assert_int_equal(info_of(t).soft_crossings, 0);
  assert_ok(gpumem_alloc(t, 2 * MiB, NULL, &q)); /* crosses it */
  gpumem_tenant_info_t i = info_of(t);
  assert_int_equal(i.soft_crossings, 1);
  assert_int_equal(i.refused, 0);
  assert_int_equal(pool_info_of(pool).free_bytes, 0); /* nothing cached is left */
  assert_int_equal(stats_of(pool).bytes_reserved, stats_of(pool).bytes_in_use);
  assert_ok(gpumem_free(t, q, NULL));
  assert_ok(gpumem_free(t, p, NULL));
  assert_ok(gpumem_allocator_destroy(t));
}

/* The pool's own soft limit: before it grows past it, its cache goes back; it never refuses. */
static void test_tenant_pool_soft_limit(void** state) {
  (void)state;
  assert_ok(gpumem_pool_release(pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  void *cached = NULL, *p = NULL, *q = NULL;
  assert_ok(gpumem_alloc(pool, 256 * KiB, NULL, &cached));
  assert_ok(gpumem_free(pool, cached, NULL));
  assert_ok(gpumem_pool_set_soft_limit(pool, MiB));
  assert_ok(gpumem_alloc(pool, 512 * KiB, NULL, &p)); /* 768 KiB held: within it, the cache stays */
  assert_int_equal(pool_info_of(pool).free_bytes, 256 * KiB);
  assert_ok(gpumem_alloc(pool, 600 * KiB, NULL, &q)); /* would hold 1.3 MiB: the cache goes first */
  assert_int_equal(pool_info_of(pool).free_bytes, 0);
  assert_int_equal(stats_of(pool).bytes_reserved, 1112 * KiB);
  assert_ok(gpumem_free(pool, q, NULL));
  assert_ok(gpumem_pool_set_soft_limit(pool, KiB)); /* far below: still no refusal */
  assert_ok(gpumem_alloc(pool, 2 * MiB, NULL, &q));
  assert_ok(gpumem_free(pool, q, NULL));
  assert_ok(gpumem_free(pool, p, NULL));
  assert_ok(gpumem_pool_set_limit(pool, MiB));
  assert_status(gpumem_pool_set_soft_limit(pool, 2 * MiB), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("is above the pool's limit");
  assert_ok(gpumem_pool_set_limit(pool, 0));
  assert_ok(gpumem_pool_set_soft_limit(pool, 0));
}

/* Memory is freed through the tenant that allocated it; the pool and another tenant refuse it. */
static void test_tenant_free_elsewhere_refused(void** state) {
  (void)state;
  gpumem_allocator_t* a = tenant("numba", 0, 0);
  gpumem_allocator_t* b = tenant("other", 0, 0);
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 4096, NULL, &p));
  assert_status(gpumem_free(pool, p, NULL), GPUMEM_ERROR_NOT_OWNED);
  assert_detail_contains("allocated through the tenant 'numba'");
  assert_status(gpumem_free(b, p, NULL), GPUMEM_ERROR_NOT_OWNED);
  assert_detail_contains("not allocated by this tenant ('other')");
  assert_int_equal(stats_of(a).bytes_in_use, 4096);
  assert_status(gpumem_allocator_destroy(a), GPUMEM_ERROR_BUSY);
  assert_status(gpumem_allocator_destroy(pool), GPUMEM_ERROR_BUSY); /* its tenants rely on it */
  assert_ok(gpumem_free(a, p, NULL));
  assert_status(gpumem_free(a, p, NULL), GPUMEM_ERROR_NOT_OWNED);
  assert_ok(gpumem_allocator_destroy(a));
  assert_ok(gpumem_allocator_destroy(b));
}

/* Bad input: budgets the wrong way round, and calls of tenants on other allocators. */
static void test_tenant_bad_input(void** state) {
  (void)state;
  gpumem_tenant_params_t p = GPUMEM_TENANT_PARAMS_INIT;
  p.upstream = pool;
  p.limit = KiB;
  p.soft_limit = MiB;
  gpumem_allocator_t* t = (gpumem_allocator_t*)1;
  assert_status(gpumem_tenant_create(&p, &t), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("soft_limit (1,048,576 bytes) is above limit (1,024 bytes)");
  assert_null(t);
  assert_status(gpumem_tenant_set_limits(pool, 0, 0), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("not a tenant");
  p.limit = 0;
  p.name = "a name longer than the thirty-one bytes a tenant keeps";
  assert_ok(gpumem_tenant_create(&p, &t));
  assert_int_equal(strlen(info_of(t).name), GPUMEM_TENANT_NAME_SIZE - 1);
  assert_ok(gpumem_allocator_destroy(t));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tenant_memory_one_frees_serves_another),
      cmocka_unit_test(test_tenant_figures_add_up_to_the_pool),
      cmocka_unit_test(test_tenant_hard_budget),
      cmocka_unit_test(test_tenant_soft_budget),
      cmocka_unit_test(test_tenant_pool_soft_limit),
      cmocka_unit_test(test_tenant_free_elsewhere_refused),
      cmocka_unit_test(test_tenant_bad_input),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
