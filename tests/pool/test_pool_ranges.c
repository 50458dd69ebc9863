/* A pool over an upstream with address ranges: segments that grow in place, memory given back by
 * unmapping whole units, fragments reused through the address space. The upstream is host memory
 * reserved with mmap (tests/common/host_ranges.h), so memory used while unmapped faults. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, madvise */
#include "test_util.h"

#include "host_ranges.h"
#include "pool_fixture.h"

#define UNIT (64 * KIB)
#define RANGE (64 * UNIT)

struct ranges_fixture {
  struct host_ranges r;
  gpumem_allocator_t* upstream;
  gpumem_allocator_t* pool;
};

static struct ranges_fixture* make(uint64_t limit) {
  static struct ranges_fixture f;
  memset(&f, 0, sizeof f);
  f.r.unit = UNIT;
  f.r.range_size = RANGE;
  const gpumem_allocator_functions_t fns = host_ranges_functions(&f.r);
  assert_ok(gpumem_allocator_create_functions(&fns, &f.upstream));
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = f.upstream;
  params.limit = limit;
  assert_ok(gpumem_pool_create(&params, &f.pool));
  return &f;
}

static void destroy(struct ranges_fixture* f) {
  assert_ok(gpumem_allocator_destroy(f->pool));
  /* The pool gave everything back: nothing mapped, no addresses reserved. */
  assert_int_equal(f->r.mapped, 0);
  assert_int_equal(f->r.reserved, 0);
  assert_ok(gpumem_allocator_destroy(f->upstream));
}

static void fill(void* p, size_t size, unsigned char seed) {
  unsigned char* b = p;
  for (size_t i = 0; i < size; ++i) b[i] = (unsigned char)(seed + i * 7);
}

static void expect_filled(const void* p, size_t size, unsigned char seed) {
  const unsigned char* b = p;
  for (size_t i = 0; i < size; ++i)
    if (b[i] != (unsigned char)(seed + i * 7)) {
      print_error("byte %zu of %p is %u, expected %u\n", i, p, b[i], (unsigned char)(seed + i * 7));
      fail();
    }
}

static void test_pool_ranges_grows_in_place(void** state) {
  (void)state;
  struct ranges_fixture* f = make(0);
  void* a = alloc_ok(f->pool, UNIT + UNIT / 2, NULL);
  fill(a, UNIT + UNIT / 2, 1);
  assert_int_equal(pool_info_of(f->pool).total_bytes, 2 * UNIT);
  /* Lies right after a, in the free half unit and three more units mapped next to it. */
  void* b = alloc_ok(f->pool, 3 * UNIT, NULL);
  assert_ptr_equal(b, (char*)a + UNIT + UNIT / 2);
  fill(b, 3 * UNIT, 2);
  gpumem_pool_info_t i = pool_info_of(f->pool);
  assert_int_equal(i.total_bytes, 5 * UNIT);
  assert_int_equal(i.address_bytes, RANGE);
  assert_int_equal(f->r.reserves, 1);
  assert_int_equal(f->r.mapped, 5 * UNIT);
  expect_filled(a, UNIT + UNIT / 2, 1);
  /* Freed, the two merge into one free chunk that serves their sum without mapping more. */
  assert_ok(gpumem_free(f->pool, a, NULL));
  assert_ok(gpumem_free(f->pool, b, NULL));
  const size_t maps = f->r.maps;
  void* c = alloc_ok(f->pool, 5 * UNIT, NULL);
  assert_ptr_equal(c, a);
  fill(c, 5 * UNIT, 3);
  assert_int_equal(f->r.maps, maps);
  assert_int_equal(pool_info_of(f->pool).total_bytes, 5 * UNIT);
  assert_ok(gpumem_free(f->pool, c, NULL));
  destroy(f);
}

static void test_pool_ranges_larger_request_maps_only_what_it_lacks(void** state) {
  (void)state;
  struct ranges_fixture* f = make(0);
  void* x = alloc_ok(f->pool, 4 * UNIT, NULL);
  assert_ok(gpumem_free(f->pool, x, NULL));
  /* Larger than anything free: the free 4 units plus 2 mapped after them, one segment still. */
  void* y = alloc_ok(f->pool, 6 * UNIT, NULL);
  assert_ptr_equal(y, x);
  fill(y, 6 * UNIT, 4);
  const gpumem_pool_info_t i = pool_info_of(f->pool);
  assert_int_equal(i.total_bytes, 6 * UNIT);
  assert_int_equal(i.used_bytes, 6 * UNIT);
  assert_int_equal(i.free_bytes, 0);
  assert_int_equal(f->r.reserves, 1);
  assert_ok(gpumem_free(f->pool, y, NULL));
  destroy(f);
}

struct states {
  size_t unmapped, unmapped_bytes, in_use;
};

static void count_state(const gpumem_block_info_t* block, void* user_data) {
  struct states* s = user_data;
  if (block->state == GPUMEM_BLOCK_UNMAPPED) {
    ++s->unmapped;
    s->unmapped_bytes += block->size;
  }
  s->in_use += block->state == GPUMEM_BLOCK_IN_USE;
}

static void test_pool_ranges_release_unmaps_whole_units(void** state) {
  (void)state;
  struct ranges_fixture* f = make(0);
  void* a = alloc_ok(f->pool, UNIT + UNIT / 2, NULL);
  void* b = alloc_ok(f->pool, 4 * UNIT, NULL);
  void* c = alloc_ok(f->pool, UNIT / 2, NULL);
  fill(a, UNIT + UNIT / 2, 5);
  fill(c, UNIT / 2, 6);
  assert_int_equal(pool_info_of(f->pool).total_bytes, 6 * UNIT);
  assert_ok(gpumem_free(f->pool, b, NULL));
  assert_ok(gpumem_pool_release(f->pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  /* b lay in [1.5, 5.5) units: units 2 to 4 are unmapped, the halves beside a and c stay. */
  gpumem_pool_info_t i = pool_info_of(f->pool);
  assert_int_equal(i.total_bytes, 3 * UNIT);
  assert_int_equal(i.free_bytes, UNIT);
  assert_int_equal(i.used_bytes, 2 * UNIT);
  assert_int_equal(i.address_bytes, RANGE);
  assert_int_equal(f->r.mapped, 3 * UNIT);
  struct states s = {0};
  assert_ok(gpumem_pool_snapshot(f->pool, count_state, &s));
  assert_int_equal(s.in_use, 2);
  assert_int_equal(s.unmapped, 2); /* the three units, and the range's tail */
  assert_int_equal(s.unmapped_bytes, RANGE - 3 * UNIT);
  expect_filled(a, UNIT + UNIT / 2, 5);
  expect_filled(c, UNIT / 2, 6);
  /* Grows again into the same addresses. */
  void* d = alloc_ok(f->pool, 4 * UNIT, NULL);
  assert_ptr_equal(d, b);
  fill(d, 4 * UNIT, 7);
  assert_int_equal(pool_info_of(f->pool).total_bytes, 6 * UNIT);
  expect_filled(a, UNIT + UNIT / 2, 5);
  expect_filled(c, UNIT / 2, 6);
  /* All freed and released: nothing mapped and the range unreserved, while the pool lives. */
  assert_ok(gpumem_free(f->pool, a, NULL));
  assert_ok(gpumem_free(f->pool, c, NULL));
  assert_ok(gpumem_free(f->pool, d, NULL));
  assert_ok(gpumem_pool_release(f->pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  i = pool_info_of(f->pool);
  assert_int_equal(i.total_bytes, 0);
  assert_int_equal(i.address_bytes, 0);
  assert_int_equal(f->r.mapped, 0);
  assert_int_equal(f->r.unreserves, 1);
  destroy(f);
}

/* Free pieces of what was one segment: a classic pool cannot give them back while their
 * neighbours live, so a request that fits the limit only with them fails; over ranges their
 * units are unmapped and mapped again where the request goes. */
static void test_pool_ranges_limit_reuses_fragments(void** state) {
  (void)state;
  struct ranges_fixture* f = make(8 * UNIT);
  void* x = alloc_ok(f->pool, 8 * UNIT, NULL);
  assert_ok(gpumem_free(f->pool, x, NULL));
  void* p[4];
  for (int i = 0; i < 4; ++i) p[i] = alloc_ok(f->pool, 2 * UNIT, NULL);
  fill(p[1], 2 * UNIT, 8);
  fill(p[3], 2 * UNIT, 9);
  assert_ok(gpumem_free(f->pool, p[0], NULL));
  assert_ok(gpumem_free(f->pool, p[2], NULL));
  void* y = alloc_ok(f->pool, 3 * UNIT, NULL);
  fill(y, 3 * UNIT, 10);
  const gpumem_pool_info_t i = pool_info_of(f->pool);
  assert_true(i.total_bytes <= 8 * UNIT);
  assert_int_equal(i.used_bytes, 7 * UNIT);
  expect_filled(p[1], 2 * UNIT, 8);
  expect_filled(p[3], 2 * UNIT, 9);
  assert_ok(gpumem_free(f->pool, y, NULL));
  assert_ok(gpumem_free(f->pool, p[1], NULL));
  assert_ok(gpumem_free(f->pool, p[3], NULL));
  destroy(f);

  /* The same steps on a classic pool over host memory: out of memory. */
  gpumem_allocator_t* host = NULL;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = host;
  params.limit = 8 * UNIT;
  assert_ok(gpumem_pool_create(&params, &pool));
  x = alloc_ok(pool, 8 * UNIT, NULL);
  assert_ok(gpumem_free(pool, x, NULL));
  for (int i = 0; i < 4; ++i) p[i] = alloc_ok(pool, 2 * UNIT, NULL);
  assert_ok(gpumem_free(pool, p[0], NULL));
  assert_ok(gpumem_free(pool, p[2], NULL));
  assert_status(gpumem_alloc(pool, 3 * UNIT, NULL, &y), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_ok(gpumem_allocator_destroy_force(pool));
  assert_ok(gpumem_allocator_destroy(host));
}

/* Free memory between unmapped addresses: a larger request maps only what it lacks next to it. */
static void test_pool_ranges_grows_next_to_free_memory_between_holes(void** state) {
  (void)state;
  struct ranges_fixture* f = make(0);
  void* a = alloc_ok(f->pool, 10 * UNIT, NULL);
  assert_ok(gpumem_free(f->pool, a, NULL));
  a = alloc_ok(f->pool, 4 * UNIT, NULL);
  void* b = alloc_ok(f->pool, 4 * UNIT, NULL);
  assert_ok(gpumem_free(f->pool, a, NULL));
  assert_ok(gpumem_pool_release(f->pool, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
  assert_int_equal(pool_info_of(f->pool).total_bytes, 4 * UNIT); /* b alone, between holes */
  assert_ok(gpumem_free(f->pool, b, NULL));
  assert_ok(gpumem_pool_set_limit(f->pool, 6 * UNIT));
  const uint64_t retries = stats_of(f->pool).retry_count;
  void* c = alloc_ok(f->pool, 5 * UNIT, NULL);
  fill(c, 5 * UNIT, 16);
  /* One unit mapped beside b's four, within the limit, without giving anything back first. */
  assert_true(c == b || c == (char*)b - UNIT);
  assert_int_equal(pool_info_of(f->pool).total_bytes, 5 * UNIT);
  assert_int_equal(stats_of(f->pool).retry_count, retries);
  assert_ok(gpumem_free(f->pool, c, NULL));
  destroy(f);
}

static void test_pool_ranges_request_beyond_a_range(void** state) {
  (void)state;
  struct ranges_fixture* f = make(0);
  void* x = alloc_ok(f->pool, UNIT, NULL);
  assert_ok(gpumem_free(f->pool, x, NULL));
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(f->pool, RANGE + 1, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  assert_detail_contains("range_size 4,194,304 bytes");
  assert_detail_contains("which the request alone exceeds");
  /* Refused before anything was given back: the cached unit is still there. */
  const gpumem_pool_info_t i = pool_info_of(f->pool);
  assert_int_equal(i.free_bytes, UNIT);
  assert_int_equal(i.total_bytes, UNIT);
  assert_int_equal(f->r.unmaps, 0);
  /* A whole range is fine. */
  p = alloc_ok(f->pool, RANGE, NULL);
  assert_ok(gpumem_free(f->pool, p, NULL));
  destroy(f);
}

/* The device's end: the pool unmaps what is free elsewhere and maps it where the request fits. */
static void test_pool_ranges_device_out_of_memory(void** state) {
  (void)state;
  struct ranges_fixture* f = make(0);
  f->r.budget = 5 * UNIT;
  void* a = alloc_ok(f->pool, 2 * UNIT, NULL);
  void* b = alloc_ok(f->pool, 2 * UNIT, NULL);
  fill(b, 2 * UNIT, 11);
  assert_ok(gpumem_free(f->pool, a, NULL));
  void* c = alloc_ok(f->pool, 3 * UNIT, NULL);
  fill(c, 3 * UNIT, 12);
  expect_filled(b, 2 * UNIT, 11);
  assert_int_equal(f->r.mapped, 5 * UNIT);
  /* Nothing left to give back: out of memory, saying what refused. */
  void* d = (void*)0x1;
  assert_status(gpumem_alloc(f->pool, UNIT, NULL, &d), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(d);
  assert_detail_contains("the caller's map function returned GPUMEM_ERROR_OUT_OF_MEMORY");
  assert_detail_contains("327,680 bytes in use, pool holds 327,680 bytes");
  /* On a new stream too, and the failed call leaves no arena and no range behind. */
  const gpumem_pool_info_t before = pool_info_of(f->pool);
  assert_status(gpumem_alloc(f->pool, UNIT, STREAM_B, &d), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(d);
  const gpumem_pool_info_t after = pool_info_of(f->pool);
  assert_int_equal(after.arena_count, before.arena_count);
  assert_int_equal(after.address_bytes, before.address_bytes);
  assert_int_equal(f->r.reserved, before.address_bytes);
  assert_ok(gpumem_free(f->pool, b, NULL));
  d = alloc_ok(f->pool, UNIT, NULL);
  assert_ok(gpumem_free(f->pool, c, NULL));
  assert_ok(gpumem_free(f->pool, d, NULL));
  destroy(f);
}

static void test_pool_ranges_no_addresses(void** state) {
  (void)state;
  struct ranges_fixture* f = make(0);
  f->r.refuse_reserve = true;
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(f->pool, UNIT, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  assert_detail_contains("the caller's reserve function returned GPUMEM_ERROR_OUT_OF_MEMORY");
  const gpumem_pool_info_t i = pool_info_of(f->pool);
  assert_int_equal(i.total_bytes, 0);
  assert_int_equal(i.address_bytes, 0);
  f->r.refuse_reserve = false;
  p = alloc_ok(f->pool, UNIT, NULL);
  assert_ok(gpumem_free(f->pool, p, NULL));
  destroy(f);
}

static void test_pool_ranges_one_range_per_stream(void** state) {
  (void)state;
  struct ranges_fixture* f = make(0);
  void* a = alloc_ok(f->pool, UNIT, STREAM_A);
  void* b = alloc_ok(f->pool, UNIT, STREAM_B);
  fill(a, UNIT, 13);
  fill(b, UNIT, 14);
  const gpumem_pool_info_t i = pool_info_of(f->pool);
  assert_int_equal(i.address_bytes, 2 * RANGE);
  assert_int_equal(i.total_bytes, 2 * UNIT);
  assert_int_equal(i.arena_count, 2);
  expect_filled(a, UNIT, 13);
  assert_ok(gpumem_free(f->pool, a, STREAM_A));
  assert_ok(gpumem_free(f->pool, b, STREAM_B));
  /* Releasing one stream's arena leaves the other's range alone. */
  assert_ok(gpumem_pool_release(f->pool, STREAM_A, 0));
  assert_int_equal(pool_info_of(f->pool).address_bytes, RANGE);
  destroy(f);
}

/* A reserve function that hands out the last range of the address space: its end, 2^64, wraps. */
static int top_maps, top_unreserves;
static gpumem_status_t top_reserve(void* context, size_t size, int32_t device, void** out_ptr) {
  (void)context;
  (void)device;
  *out_ptr = (void*)(UINTPTR_MAX - size + 1);
  return GPUMEM_SUCCESS;
}
static gpumem_status_t top_map(void* context, void* ptr, size_t size, int32_t device) {
  (void)context;
  (void)ptr;
  (void)size;
  (void)device;
  ++top_maps;
  return GPUMEM_SUCCESS;
}
static gpumem_status_t top_unreserve(void* context, void* ptr, size_t size, int32_t device) {
  (void)context;
  (void)ptr;
  (void)size;
  (void)device;
  ++top_unreserves;
  return GPUMEM_SUCCESS;
}

static void test_pool_ranges_range_at_the_top_refused(void** state) {
  (void)state;
  struct host_ranges r = {.unit = UNIT, .range_size = RANGE};
  gpumem_allocator_functions_t fns = host_ranges_functions(&r);
  fns.reserve = top_reserve;
  fns.map = top_map;
  fns.unreserve = top_unreserve;
  gpumem_allocator_t* upstream = NULL;
  assert_ok(gpumem_allocator_create_functions(&fns, &upstream));
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = upstream;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&params, &pool));
  top_maps = top_unreserves = 0;
  void* p = (void*)0x1;
  const gpumem_status_t st = gpumem_alloc(pool, UNIT, NULL, &p);
  assert_true(st != GPUMEM_SUCCESS);
  assert_null(p);
  assert_detail_contains("past the end of the address space");
  assert_int_equal(top_maps, 0); /* nothing was mapped into it */
  const gpumem_pool_info_t i = pool_info_of(pool);
  assert_int_equal(i.total_bytes, 0);
  assert_int_equal(i.address_bytes, 0);
  assert_int_equal(i.arena_count, 0);
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(upstream));
}

static void test_pool_ranges_functions_bad_input(void** state) {
  (void)state;
  struct host_ranges r = {.unit = UNIT, .range_size = RANGE};
  gpumem_allocator_functions_t f = host_ranges_functions(&r);
  gpumem_allocator_t* a = (gpumem_allocator_t*)0x1;
  f.unmap = NULL;
  assert_status(gpumem_allocator_create_functions(&f, &a), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(a);
  assert_detail_contains("functions has 3 of reserve, unreserve, map and unmap; give all four or none");
  f = host_ranges_functions(&r);
  f.map_unit = 3 * KIB;
  assert_status(gpumem_allocator_create_functions(&f, &a), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("functions->map_unit 3072 is not a power of two of at least 512");
  f.map_unit = 256;
  assert_status(gpumem_allocator_create_functions(&f, &a), GPUMEM_ERROR_INVALID_ARGUMENT);
  f = host_ranges_functions(&r);
  f.range_size = UNIT + 512;
  assert_status(gpumem_allocator_create_functions(&f, &a), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("functions->range_size 66048 is not a positive multiple of map_unit 65536");
  f.range_size = 0;
  assert_status(gpumem_allocator_create_functions(&f, &a), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(a);
  assert_int_equal(r.reserves, 0);
}

/* The allocator by itself, without a pool: plain allocations of whole ranges. */
static void test_pool_ranges_upstream_alone(void** state) {
  (void)state;
  struct host_ranges r = {.unit = UNIT, .range_size = RANGE};
  const gpumem_allocator_functions_t f = host_ranges_functions(&r);
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_allocator_create_functions(&f, &a));
  void* p = alloc_ok(a, 3 * UNIT + 1, NULL);
  fill(p, 3 * UNIT + 1, 15);
  assert_int_equal(r.mapped, 4 * UNIT);
  assert_ok(gpumem_free(a, p, NULL));
  assert_int_equal(r.mapped, 0);
  assert_ok(gpumem_allocator_destroy(a));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pool_ranges_grows_in_place),
      cmocka_unit_test(test_pool_ranges_larger_request_maps_only_what_it_lacks),
      cmocka_unit_test(test_pool_ranges_release_unmaps_whole_units),
      cmocka_unit_test(test_pool_ranges_limit_reuses_fragments),
      cmocka_unit_test(test_pool_ranges_grows_next_to_free_memory_between_holes),
      cmocka_unit_test(test_pool_ranges_request_beyond_a_range),
      cmocka_unit_test(test_pool_ranges_device_out_of_memory),
      cmocka_unit_test(test_pool_ranges_no_addresses),
      cmocka_unit_test(test_pool_ranges_one_range_per_stream),
      cmocka_unit_test(test_pool_ranges_functions_bad_input),
      cmocka_unit_test(test_pool_ranges_range_at_the_top_refused),
      cmocka_unit_test(test_pool_ranges_upstream_alone),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
