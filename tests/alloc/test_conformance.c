/* The allocator conformance suite, written once and run against every allocator kind (RMM-style):
 * `test_conformance KIND` runs every test on that kind. Host kinds need no GPU; the others return
 * 77 (a skip) without one. */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdlib.h>

#include "test_cuda.h"

#include "alloc_kinds.h"

#define KiB ((size_t)1024)
#define MiB (KiB * KiB)

/* ---- The kinds ---- */

typedef struct kind {
  const char* name;
  gpumem_status_t (*create_raw)(gpumem_allocator_t** out); /* the allocator, or a pool's upstream */
  bool pool; /* a pool over create_raw's allocator: sizes round to 512 and memory is cached */
  bool needs_gpu;
  bool host_accessible; /* the CPU may read and write the memory */
  int32_t device;       /* what gpumem_allocator_get_device says */
  size_t alignment;     /* every pointer is a multiple of this */
  bool tenant;          /* a tenant (tenant.h) of create_raw's allocator, which it counts as raw kinds do */
} kind_t;

/* malloc promises 8 at least; CUDA allocations are aligned to 256 at least. */
static const kind_t kinds[] = {
    {"host", create_host, false, false, true, -1, 512, false},
    {"pool_host", create_host, true, false, true, -1, 512, false},
    {"functions", create_functions, false, false, true, -1, 8, false},
    {"pool_functions", create_functions, true, false, true, -1, 8, false},
    {"device", create_device, false, true, false, 0, 256, false},
    {"device_async", create_device_async, false, true, false, 0, 256, false},
    {"device_async_default_pool", create_device_async_default_pool, false, true, false, 0, 256, false},
    {"managed", create_managed, false, true, true, 0, 256, false},
    {"pinned", create_pinned, false, true, true, -1, 256, false},
    {"pool_device", create_device, true, true, false, 0, 256, false},
    {"pool_device_async", create_device_async, true, true, false, 0, 256, false},
    {"pool_device_async_default_pool", create_device_async_default_pool, true, true, false, 0, 256, false},
    {"pool_managed", create_managed, true, true, true, 0, 256, false},
    {"pool_pinned", create_pinned, true, true, true, -1, 256, false},
    {"cuda_pool_new", create_cuda_pool_new, false, true, false, 0, 256, false},
    {"cuda_pool_default", create_cuda_pool_default, false, true, false, 0, 256, false},
    {"pool_cuda_pool_new", create_cuda_pool_new, true, true, false, 0, 256, false},
    {"vm", create_vm, false, true, false, 0, 256, false},
    {"pool_vm", create_vm, true, true, false, 0, 256, false},
    {"tenant_host", create_host, false, false, true, -1, 512, true},
    {"tenant_device", create_device, false, true, false, 0, 256, true},
};

static const kind_t* kind; /* the kind under test, from argv[1] */

/* A pool over address ranges (a VM allocator): it maps whole units as it grows, and holds those
 * rather than blocks of the sizes asked for. */
static bool in_place(void) { return kind->pool && kind->create_raw == create_vm; }

/* A fresh allocator of the kind; for a pool, *out_upstream receives the allocator under it. */
static gpumem_allocator_t* make(gpumem_allocator_t** out_upstream) {
  gpumem_allocator_t* raw = (gpumem_allocator_t*)0x1;
  assert_ok(kind->create_raw(&raw));
  assert_non_null(raw);
  *out_upstream = NULL;
  if (kind->tenant) {
    gpumem_tenant_params_t params = GPUMEM_TENANT_PARAMS_INIT;
    params.upstream = raw;
    params.name = "conformance";
    gpumem_allocator_t* tenant = NULL;
    assert_ok(gpumem_tenant_create(&params, &tenant));
    *out_upstream = raw;
    return tenant;
  }
  if (!kind->pool) return raw;
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = raw;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&params, &pool));
  assert_non_null(pool);
  *out_upstream = raw;
  return pool;
}

static void unmake(gpumem_allocator_t* a, gpumem_allocator_t* upstream) {
  assert_ok(gpumem_allocator_destroy(a));
  assert_ok(gpumem_allocator_destroy(upstream)); /* NULL for a raw kind: nothing to do */
}

/* The bytes an allocation of n accounts: a pool rounds to 512, a raw allocator does not. */
static uint64_t mem(size_t n) { return kind->pool ? (uint64_t)((n + 511) / 512 * 512) : (uint64_t)n; }

/* The raw value or the pool value, by kind. */
#define RAW_OR_POOL(raw_value, pool_value) (kind->pool ? (uint64_t)(pool_value) : (uint64_t)(raw_value))

static void assert_same_stats(const gpumem_allocator_stats_t* before, const gpumem_allocator_stats_t* after) {
  assert_int_equal(after->bytes_in_use, before->bytes_in_use);
  assert_int_equal(after->peak_bytes_in_use, before->peak_bytes_in_use);
  assert_int_equal(after->bytes_requested, before->bytes_requested);
  assert_int_equal(after->bytes_reserved, before->bytes_reserved);
  assert_int_equal(after->peak_bytes_reserved, before->peak_bytes_reserved);
  assert_int_equal(after->alloc_count, before->alloc_count);
  assert_int_equal(after->free_count, before->free_count);
  assert_int_equal(after->upstream_alloc_count, before->upstream_alloc_count);
  assert_int_equal(after->upstream_free_count, before->upstream_free_count);
  assert_int_equal(after->retry_count, before->retry_count);
  assert_int_equal(after->oom_count, before->oom_count);
}

typedef struct expected {
  uint64_t in_use, peak_in_use, requested, reserved, peak_reserved, allocs, frees, upstream_allocs, upstream_frees;
} expected_t;

/* A pool that grows in place holds what its VM upstream has mapped, and takes no blocks from it. */
static void assert_upstream_mapped_as_held(gpumem_allocator_t* a, gpumem_allocator_t* up) {
  gpumem_vm_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  assert_ok(gpumem_vm_get_info(up, &info));
  assert_int_equal(info.mapped_bytes, stats_of(a).bytes_reserved);
  const gpumem_allocator_stats_t u = stats_of(up);
  assert_int_equal(u.bytes_in_use, 0);
  assert_int_equal(u.alloc_count, 0);
}

static void assert_stats(gpumem_allocator_t* a, expected_t e) {
  const gpumem_allocator_stats_t s = stats_of(a);
  assert_int_equal(s.bytes_in_use, e.in_use);
  assert_int_equal(s.peak_bytes_in_use, e.peak_in_use);
  assert_int_equal(s.bytes_requested, e.requested);
  assert_int_equal(s.alloc_count, e.allocs);
  assert_int_equal(s.free_count, e.frees);
  if (in_place()) {
    /* It holds the units it mapped, whatever the blocks: all it holds, and nothing when the
     * classic pool would hold nothing. */
    assert_int_equal(s.bytes_reserved, pool_info_of(a).total_bytes);
    assert_true(s.bytes_reserved >= s.bytes_in_use);
    assert_true(s.peak_bytes_reserved >= s.bytes_reserved);
    if (e.reserved == 0) assert_int_equal(s.bytes_reserved, 0);
  } else {
    assert_int_equal(s.bytes_reserved, e.reserved);
    assert_int_equal(s.peak_bytes_reserved, e.peak_reserved);
    assert_int_equal(s.upstream_alloc_count, e.upstream_allocs);
    assert_int_equal(s.upstream_free_count, e.upstream_frees);
  }
  assert_int_equal(s.retry_count, 0);
  assert_int_equal(s.oom_count, 0);
}

/* ---- Reading and writing the memory, directly or through copies ---- */

static uint8_t pattern_byte(size_t i, unsigned seed) { return (uint8_t)(i * 131u + (i >> 11) + seed); }

static void write_pattern(void* p, size_t n, unsigned seed) {
  uint8_t* bytes = p;
  uint8_t* staging = NULL;
  if (!kind->host_accessible) {
    staging = malloc(n);
    assert_non_null(staging);
    bytes = staging;
  }
  for (size_t i = 0; i < n; i++) bytes[i] = pattern_byte(i, seed);
  if (staging) {
    assert_ok(gpumem_copy(p, staging, n));
    free(staging);
  }
}

static void check_pattern(const void* p, size_t n, unsigned seed) {
  const uint8_t* bytes = p;
  uint8_t* staging = NULL;
  if (!kind->host_accessible) {
    staging = malloc(n);
    assert_non_null(staging);
    memset(staging, ~pattern_byte(0, seed), n);
    assert_ok(gpumem_copy(staging, p, n));
    bytes = staging;
  }
  for (size_t i = 0; i < n; i++) {
    if (bytes[i] != pattern_byte(i, seed)) {
      print_error("byte %zu of %zu at %p is 0x%02x, expected 0x%02x\n", i, n, p, bytes[i], pattern_byte(i, seed));
      free(staging);
      fail();
    }
  }
  free(staging);
}

/* Device memory: a driver memset over all of it, read back through a copy. */
static void check_device_memset(void* p, size_t n, uint8_t value) {
  assert_ok(gpumem_memset(p, value, 1, n));
  uint8_t* back = malloc(n);
  assert_non_null(back);
  memset(back, (uint8_t)~value, n);
  assert_ok(gpumem_copy(back, p, n));
  for (size_t i = 0; i < n; i++) {
    if (back[i] != value) {
      print_error("byte %zu of %zu after memset is 0x%02x, expected 0x%02x\n", i, n, back[i], value);
      free(back);
      fail();
    }
  }
  free(back);
}

/* ---- Tests ---- */

static void test_conformance_sizes(void** state) {
  (void)state;
  static const size_t sizes[] = {1, 511, 512, 513, 4096, 1 * MiB, 64 * MiB};
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(&up);
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    const size_t n = sizes[k];
    void* p = (void*)0x1;
    assert_ok(gpumem_alloc(a, n, NULL, &p));
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % kind->alignment, 0);
    const gpumem_allocator_stats_t s = stats_of(a);
    assert_int_equal(s.bytes_in_use, mem(n));
    assert_int_equal(s.bytes_requested, n);
    assert_int_equal(s.alloc_count, k + 1);
    if (!kind->host_accessible) check_device_memset(p, n, 0xa5);
    write_pattern(p, n, (unsigned)k);
    check_pattern(p, n, (unsigned)k);
    assert_ok(gpumem_free(a, p, NULL));
    const gpumem_allocator_stats_t after = stats_of(a);
    assert_int_equal(after.bytes_in_use, 0);
    assert_int_equal(after.bytes_requested, 0);
    assert_int_equal(after.free_count, k + 1);
  }
  unmake(a, up);
}

typedef struct range {
  uintptr_t lo, hi;
} range_t;

static int compare_ranges(const void* x, const void* y) {
  const range_t* a = x;
  const range_t* b = y;
  return a->lo < b->lo ? -1 : a->lo > b->lo ? 1 : 0;
}

#define LIVE_FIRST 96
#define LIVE_MORE 40

/* Sizes from 1 byte to 24 KiB, some on the rounding boundary. */
static size_t live_size(unsigned i) {
  unsigned x = i * 2654435761u;
  x ^= x >> 15;
  switch (i % 4) {
    case 0:
      return 1 + x % 100;
    case 1:
      return 512 * (1 + x % 8);
    case 2:
      return 1 + x % (24 * 1024);
    default:
      return 513 + x % 2048;
  }
}

static void test_conformance_live_allocations_never_overlap(void** state) {
  (void)state;
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(&up);
  void* ptrs[LIVE_FIRST + LIVE_MORE];
  size_t sizes[LIVE_FIRST + LIVE_MORE];
  bool live[LIVE_FIRST + LIVE_MORE];
  uint64_t in_use = 0;
  for (unsigned i = 0; i < LIVE_FIRST; i++) {
    sizes[i] = live_size(i);
    assert_ok(gpumem_alloc(a, sizes[i], NULL, &ptrs[i]));
    live[i] = true;
    in_use += mem(sizes[i]);
  }
  /* Holes of every size, then allocations that may land in them. */
  for (unsigned i = 0; i < LIVE_FIRST; i += 3) {
    assert_ok(gpumem_free(a, ptrs[i], NULL));
    live[i] = false;
    in_use -= mem(sizes[i]);
  }
  for (unsigned i = LIVE_FIRST; i < LIVE_FIRST + LIVE_MORE; i++) {
    sizes[i] = live_size(i * 7 + 1);
    assert_ok(gpumem_alloc(a, sizes[i], NULL, &ptrs[i]));
    live[i] = true;
    in_use += mem(sizes[i]);
  }
  assert_int_equal(stats_of(a).bytes_in_use, in_use);

  range_t ranges[LIVE_FIRST + LIVE_MORE];
  size_t count = 0;
  for (unsigned i = 0; i < LIVE_FIRST + LIVE_MORE; i++) {
    if (!live[i]) continue;
    ranges[count].lo = (uintptr_t)ptrs[i];
    ranges[count].hi = (uintptr_t)ptrs[i] + mem(sizes[i]);
    count++;
  }
  qsort(ranges, count, sizeof ranges[0], compare_ranges);
  for (size_t i = 1; i < count; i++) {
    if (ranges[i - 1].hi > ranges[i].lo) {
      print_error("[%#zx, %#zx) overlaps [%#zx, %#zx)\n", (size_t)ranges[i - 1].lo, (size_t)ranges[i - 1].hi,
                  (size_t)ranges[i].lo, (size_t)ranges[i].hi);
      fail();
    }
  }
  /* Each allocation keeps its own bytes while all are live. */
  for (unsigned i = 0; i < LIVE_FIRST + LIVE_MORE; i++)
    if (live[i]) write_pattern(ptrs[i], sizes[i], i);
  for (unsigned i = 0; i < LIVE_FIRST + LIVE_MORE; i++)
    if (live[i]) check_pattern(ptrs[i], sizes[i], i);

  for (unsigned i = 0; i < LIVE_FIRST + LIVE_MORE; i++)
    if (live[i]) assert_ok(gpumem_free(a, ptrs[i], NULL));
  assert_int_equal(stats_of(a).bytes_in_use, 0);
  unmake(a, up);
}

static void test_conformance_stats_exact(void** state) {
  (void)state;
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(&up);
  assert_stats(a, (expected_t){0, 0, 0, 0, 0, 0, 0, 0, 0});

  void *p1, *p2, *p3, *p4, *p5;
  assert_ok(gpumem_alloc(a, 1000, NULL, &p1));
  assert_ok(gpumem_alloc(a, 3000, NULL, &p2));
  assert_ok(gpumem_alloc(a, 512, NULL, &p3));
  assert_ok(gpumem_alloc(a, 1, NULL, &p4));
  /* Raw: 1000 + 3000 + 512 + 1 = 4513. Pool: 1024 + 3072 + 512 + 512 = 5120, each a new upstream block. */
  assert_stats(a, (expected_t){.in_use = RAW_OR_POOL(4513, 5120),
                               .peak_in_use = RAW_OR_POOL(4513, 5120),
                               .requested = 4513,
                               .reserved = RAW_OR_POOL(4513, 5120),
                               .peak_reserved = RAW_OR_POOL(4513, 5120),
                               .allocs = 4,
                               .frees = 0,
                               .upstream_allocs = 4,
                               .upstream_frees = 0});
  if (in_place()) {
    assert_upstream_mapped_as_held(a, up);
  } else if (kind->pool) {
    /* The pool asked its upstream for the rounded sizes. */
    const gpumem_allocator_stats_t u = stats_of(up);
    assert_int_equal(u.bytes_in_use, 5120);
    assert_int_equal(u.bytes_requested, 5120);
    assert_int_equal(u.alloc_count, 4);
  }

  assert_ok(gpumem_free(a, p2, NULL));
  /* A pool keeps the freed block: it still holds 5120 bytes. */
  assert_stats(a, (expected_t){.in_use = RAW_OR_POOL(1513, 2048),
                               .peak_in_use = RAW_OR_POOL(4513, 5120),
                               .requested = 1513,
                               .reserved = RAW_OR_POOL(1513, 5120),
                               .peak_reserved = RAW_OR_POOL(4513, 5120),
                               .allocs = 4,
                               .frees = 1,
                               .upstream_allocs = 4,
                               .upstream_frees = RAW_OR_POOL(1, 0)});

  assert_ok(gpumem_allocator_reset_peaks(a));
  assert_stats(a, (expected_t){.in_use = RAW_OR_POOL(1513, 2048),
                               .peak_in_use = RAW_OR_POOL(1513, 2048),
                               .requested = 1513,
                               .reserved = RAW_OR_POOL(1513, 5120),
                               .peak_reserved = RAW_OR_POOL(1513, 5120),
                               .allocs = 4,
                               .frees = 1,
                               .upstream_allocs = 4,
                               .upstream_frees = RAW_OR_POOL(1, 0)});

  assert_ok(gpumem_alloc(a, 100, NULL, &p5));
  /* A pool splits the cached 3072-byte block: no upstream allocation. */
  if (kind->pool) assert_ptr_equal(p5, p2);
  assert_stats(a, (expected_t){.in_use = RAW_OR_POOL(1613, 2560),
                               .peak_in_use = RAW_OR_POOL(1613, 2560),
                               .requested = 1613,
                               .reserved = RAW_OR_POOL(1613, 5120),
                               .peak_reserved = RAW_OR_POOL(1613, 5120),
                               .allocs = 5,
                               .frees = 1,
                               .upstream_allocs = RAW_OR_POOL(5, 4),
                               .upstream_frees = RAW_OR_POOL(1, 0)});

  assert_ok(gpumem_free(a, p1, NULL));
  assert_ok(gpumem_free(a, p3, NULL));
  assert_ok(gpumem_free(a, p4, NULL));
  assert_ok(gpumem_free(a, p5, NULL));
  assert_stats(a, (expected_t){.in_use = 0,
                               .peak_in_use = RAW_OR_POOL(1613, 2560),
                               .requested = 0,
                               .reserved = RAW_OR_POOL(0, 5120),
                               .peak_reserved = RAW_OR_POOL(1613, 5120),
                               .allocs = 5,
                               .frees = 5,
                               .upstream_allocs = RAW_OR_POOL(5, 4),
                               .upstream_frees = RAW_OR_POOL(5, 0)});

  if (kind->pool) {
    /* Merged back whole, the four blocks all go back. */
    assert_ok(gpumem_pool_release(a, NULL, GPUMEM_POOL_RELEASE_ALL_STREAMS));
    assert_stats(a, (expected_t){.in_use = 0,
                                 .peak_in_use = 2560,
                                 .requested = 0,
                                 .reserved = 0,
                                 .peak_reserved = 5120,
                                 .allocs = 5,
                                 .frees = 5,
                                 .upstream_allocs = 4,
                                 .upstream_frees = 4});
    if (in_place()) {
      assert_upstream_mapped_as_held(a, up);
    } else {
      const gpumem_allocator_stats_t u = stats_of(up);
      assert_int_equal(u.bytes_in_use, 0);
      assert_int_equal(u.alloc_count, 4);
      assert_int_equal(u.free_count, 4);
    }
  }
  unmake(a, up);
}

static void test_conformance_free_not_owned(void** state) {
  (void)state;
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(&up);
  gpumem_allocator_t* other_up;
  gpumem_allocator_t* other = make(&other_up);
  void* p = NULL;
  void* q = NULL;
  assert_ok(gpumem_alloc(a, 1000, NULL, &p));
  assert_ok(gpumem_alloc(other, 1000, NULL, &q));
  write_pattern(p, 1000, 3);
  const gpumem_allocator_stats_t before = stats_of(a);
  const gpumem_allocator_stats_t other_before = stats_of(other);

  int on_stack = 0;
  assert_status(gpumem_free(a, &on_stack, NULL), GPUMEM_ERROR_NOT_OWNED);
  assert_detail_contains("was not allocated by this");
  assert_status(gpumem_free(a, (char*)p + 8, NULL), GPUMEM_ERROR_NOT_OWNED);
  assert_detail_contains("was not allocated by this");
  /* Memory of another allocator of the same kind is not this one's either. */
  assert_status(gpumem_free(a, q, NULL), GPUMEM_ERROR_NOT_OWNED);
  assert_detail_contains("was not allocated by this");
  gpumem_allocator_stats_t after = stats_of(a);
  assert_same_stats(&before, &after);
  after = stats_of(other);
  assert_same_stats(&other_before, &after);
  check_pattern(p, 1000, 3);

  assert_ok(gpumem_free(a, p, NULL));
  const gpumem_allocator_stats_t freed = stats_of(a);
  assert_status(gpumem_free(a, p, NULL), GPUMEM_ERROR_NOT_OWNED);
  assert_detail_contains("or is freed already");
  after = stats_of(a);
  assert_same_stats(&freed, &after);
  assert_int_equal(after.free_count, 1);

  assert_ok(gpumem_free(other, q, NULL));
  unmake(other, other_up);
  unmake(a, up);
}

static void test_conformance_alloc_bad_input(void** state) {
  (void)state;
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(&up);
  const gpumem_allocator_stats_t before = stats_of(a);

  assert_status(gpumem_alloc(a, 64, NULL, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_ptr is NULL");
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(a, 0, NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("size is 0");
  assert_null(p);
  gpumem_allocator_stats_t after = stats_of(a);
  assert_same_stats(&before, &after);

  assert_ok(gpumem_free(a, NULL, NULL));
  assert_ok(gpumem_free(a, NULL, GPUMEM_STREAM_PER_THREAD));
  after = stats_of(a);
  assert_same_stats(&before, &after);

  assert_status(gpumem_allocator_get_stats(a, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_stats is NULL");
  gpumem_allocator_stats_t small;
  memset(&small, 0xab, sizeof small);
  small.struct_size = 0;
  assert_status(gpumem_allocator_get_stats(a, &small), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("struct_size");
  assert_int_equal(small.struct_size, 0);
  assert_status(gpumem_allocator_get_device(a, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_device is NULL");
  unmake(a, up);
}

static void test_conformance_alloc_size_max(void** state) {
  (void)state;
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(&up);
  const gpumem_allocator_stats_t before = stats_of(a);
  void* p = (void*)0x1;
  const gpumem_status_t st = gpumem_alloc(a, SIZE_MAX, NULL, &p);
  assert_null(p);
  if (kind->pool) {
    assert_status(st, GPUMEM_ERROR_INVALID_ARGUMENT);
    assert_detail_contains("overflows");
    /* The first size that overflows rounding to 512. */
    p = (void*)0x1;
    assert_status(gpumem_alloc(a, SIZE_MAX - 510, NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
    assert_detail_contains("overflows");
    assert_null(p);
    const gpumem_allocator_stats_t after = stats_of(a);
    assert_same_stats(&before, &after);
  } else {
    if (st != GPUMEM_ERROR_OUT_OF_MEMORY && st != GPUMEM_ERROR_INVALID_ARGUMENT) {
      print_error("SIZE_MAX gave %s: %s\n", gpumem_status_name(st), gpumem_last_error_detail());
      fail();
    }
    assert_true(strlen(gpumem_last_error_detail()) > 0);
  }
  /* Nothing was lost: the allocator still works and holds nothing. */
  assert_ok(gpumem_alloc(a, 16, NULL, &p));
  assert_int_equal(stats_of(a).bytes_in_use, mem(16));
  assert_ok(gpumem_free(a, p, NULL));
  assert_int_equal(stats_of(a).bytes_in_use, 0);
  unmake(a, up);
}

static void test_conformance_destroy_with_live_allocations_is_busy(void** state) {
  (void)state;
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(&up);
  void *p, *q;
  assert_ok(gpumem_alloc(a, 1000, NULL, &p));
  assert_ok(gpumem_alloc(a, 3000, NULL, &q));
  write_pattern(q, 3000, 5);
  const gpumem_allocator_stats_t before = stats_of(a);

  assert_status(gpumem_allocator_destroy(a), GPUMEM_ERROR_BUSY);
  assert_detail_contains("2 live allocations");
  assert_detail_contains(kind->pool ? "(4,096 bytes)" : "(4,000 bytes)");
  assert_detail_contains("gpumem_allocator_destroy_force");
  const gpumem_allocator_stats_t after = stats_of(a);
  assert_same_stats(&before, &after);
  check_pattern(q, 3000, 5);

  assert_ok(gpumem_free(a, p, NULL));
  assert_status(gpumem_allocator_destroy(a), GPUMEM_ERROR_BUSY);
  assert_detail_contains("1 live allocation (");
  assert_ok(gpumem_free(a, q, NULL));
  assert_ok(gpumem_allocator_destroy(a));
  if (kind->pool) {
    /* Destroying the pool gave every block back. */
    assert_int_equal(stats_of(up).bytes_in_use, 0);
    assert_ok(gpumem_allocator_destroy(up));
  }
  assert_ok(gpumem_allocator_destroy(NULL));
}

static void test_conformance_destroy_force_with_live_allocations(void** state) {
  (void)state;
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(&up);
  void *p, *q, *r;
  assert_ok(gpumem_alloc(a, 1000, NULL, &p));
  assert_ok(gpumem_alloc(a, 3000, NULL, &q));
  assert_ok(gpumem_alloc(a, 70000, NULL, &r));
  assert_ok(gpumem_free(a, q, NULL));
  assert_ok(gpumem_allocator_destroy_force(a));
  if (kind->pool) {
    /* The pool freed what was live and returned every block: the upstream holds nothing. */
    const gpumem_allocator_stats_t u = stats_of(up);
    assert_int_equal(u.bytes_in_use, 0);
    if (in_place()) {
      assert_int_equal(u.bytes_reserved, 0); /* nothing mapped */
    } else {
      assert_int_equal(u.alloc_count, 3);
      assert_int_equal(u.free_count, 3);
    }
    assert_ok(gpumem_allocator_destroy(up));
  }
  assert_ok(gpumem_allocator_destroy_force(NULL));

  /* With nothing live it is a plain destroy. */
  a = make(&up);
  assert_ok(gpumem_allocator_destroy_force(a));
  assert_ok(gpumem_allocator_destroy_force(up));
}

static void test_conformance_destroy_upstream_of_pool_is_busy(void** state) {
  (void)state;
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(&up);
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = a;
  gpumem_allocator_t* over = NULL;
  assert_ok(gpumem_pool_create(&params, &over));

  assert_status(gpumem_allocator_destroy(a), GPUMEM_ERROR_BUSY);
  assert_detail_contains("relied on 1 time:");
  assert_status(gpumem_allocator_destroy_force(a), GPUMEM_ERROR_BUSY);
  assert_detail_contains("upstream of a pool");
  if (kind->pool) {
    assert_status(gpumem_allocator_destroy(up), GPUMEM_ERROR_BUSY);
    assert_detail_contains("relied on 1 time:");
  }

  /* Refused, so both still work. */
  void *p, *q;
  assert_ok(gpumem_alloc(a, 100, NULL, &p));
  assert_ok(gpumem_alloc(over, 100, NULL, &q));
  assert_int_equal(stats_of(over).bytes_in_use, 512);
  if (!kind->pool && kind->create_raw == create_vm) {
    /* Over a VM allocator the outer pool maps memory into addresses of a's: no block of a's. */
    assert_int_equal(stats_of(a).bytes_in_use, mem(100));
    assert_int_equal(pool_info_of(over).total_bytes, stats_of(a).bytes_reserved - mem(100));
  } else {
    /* The outer pool's block came from a. */
    assert_int_equal(stats_of(a).bytes_in_use, mem(100) + mem(512));
  }
  assert_ok(gpumem_free(over, q, NULL));
  assert_ok(gpumem_free(a, p, NULL));

  assert_ok(gpumem_allocator_destroy(over));
  unmake(a, up);
}

static void test_conformance_get_device(void** state) {
  (void)state;
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(&up);
  int32_t device = 99;
  assert_ok(gpumem_allocator_get_device(a, &device));
  assert_int_equal(device, kind->device);
  if (up) {
    device = 99;
    assert_ok(gpumem_allocator_get_device(up, &device));
    assert_int_equal(device, kind->device);
  }
  unmake(a, up);
}

static void test_conformance_alloc_on_stream(void** state) {
  (void)state;
  /* For host kinds a stream is only a key: any value will do. */
  gpumem_stream_t s = kind->needs_gpu ? test_stream_create(0) : (gpumem_stream_t)0x1000;
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(&up);
  void *on_null, *on_s;
  assert_ok(gpumem_alloc(a, 3000, NULL, &on_null));
  assert_ok(gpumem_alloc(a, 3000, s, &on_s));
  assert_non_null(on_s);
  assert_true((uintptr_t)on_s + mem(3000) <= (uintptr_t)on_null || (uintptr_t)on_null + mem(3000) <= (uintptr_t)on_s);
  if (kind->needs_gpu) test_stream_sync(s); /* stream-ordered memory is ready once s is */
  write_pattern(on_s, 3000, 9);
  check_pattern(on_s, 3000, 9);
  const gpumem_allocator_stats_t s1 = stats_of(a);
  assert_int_equal(s1.alloc_count, 2);
  assert_int_equal(s1.bytes_in_use, 2 * mem(3000));
  if (kind->pool) {
    gpumem_pool_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    assert_ok(gpumem_pool_get_info(a, &info));
    assert_int_equal(info.arena_count, 2);
  }

  assert_ok(gpumem_free(a, on_s, s));
  if (kind->pool) {
    /* Cached in the stream's arena, handed out again on that stream. */
    void* again = NULL;
    assert_ok(gpumem_alloc(a, 3000, s, &again));
    assert_ptr_equal(again, on_s);
    assert_ok(gpumem_free(a, again, s));
  }
  assert_ok(gpumem_free(a, on_null, NULL));
  const gpumem_allocator_stats_t s2 = stats_of(a);
  assert_int_equal(s2.bytes_in_use, 0);
  assert_int_equal(s2.free_count, s2.alloc_count);

  /* Before the stream goes: a pool gives its blocks back on the stream they came from. */
  unmake(a, up);
  if (kind->needs_gpu) {
    test_stream_sync(s);
    test_stream_destroy(s);
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s KIND\nkinds:", argv[0]);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) fprintf(stderr, " %s", kinds[i].name);
    fprintf(stderr, "\n");
    return 2;
  }
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(argv[1], kinds[i].name) == 0) kind = &kinds[i];
  if (!kind) {
    fprintf(stderr, "unknown allocator kind \"%s\"\n", argv[1]);
    return 2;
  }
  /* The suite's numbers assume pools without a limit. */
  unsetenv("GPUMEM_GPU_MEMORY_LIMIT");
  if (kind->needs_gpu && !gpu_available()) {
    printf("%s needs a GPU: %s\n", kind->name, gpumem_last_error_detail());
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conformance_sizes),
      cmocka_unit_test(test_conformance_live_allocations_never_overlap),
      cmocka_unit_test(test_conformance_stats_exact),
      cmocka_unit_test(test_conformance_free_not_owned),
      cmocka_unit_test(test_conformance_alloc_bad_input),
      cmocka_unit_test(test_conformance_alloc_size_max),
      cmocka_unit_test(test_conformance_destroy_with_live_allocations_is_busy),
      cmocka_unit_test(test_conformance_destroy_force_with_live_allocations),
      cmocka_unit_test(test_conformance_destroy_upstream_of_pool_is_busy),
      cmocka_unit_test(test_conformance_get_device),
      cmocka_unit_test(test_conformance_alloc_on_stream),
  };
  return _cmocka_run_group_tests(kind->name, tests, sizeof tests / sizeof tests[0], NULL, NULL);
}
