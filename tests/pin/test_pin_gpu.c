/* The pinning service (pin.h) against the real driver: after every step, the registrations the
 * driver reports (gpumem_pointer_get_info: memory type, base, size) are exactly the ones the
 * service promises; copies through pinned memory are byte-exact; memory can be freed after
 * unpin + forget; many threads pinning the same and neighbouring ranges leave the books
 * balanced; memory the service does not own is refused. Every test needs a GPU. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, and POSIX 2008 */

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test_bytes.h"
#include "test_cuda.h"

#define KiB ((size_t)1 << 10)
#define GiB ((uint64_t)1 << 30)

/* The budget every test starts from, whatever GPUMEM_PIN_CACHE says. */
#define TEST_BUDGET GiB

static size_t page; /* sysconf(_SC_PAGESIZE), set in main */

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

/* Fresh anonymous pages: no one else can have registered them. */
static unsigned char* map_pages(size_t pages) {
  void* p = mmap(NULL, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(p != MAP_FAILED);
  return (unsigned char*)p;
}

static void unmap_pages(unsigned char* p, size_t pages) { assert_int_equal(munmap(p, pages * page), 0); }

static gpumem_pointer_info_t info_of(const void* p) {
  gpumem_pointer_info_t info;
  memset(&info, 0xAB, sizeof info);
  info.struct_size = sizeof info;
  gpumem_status_t s = gpumem_pointer_get_info(p, &info);
  if (s != GPUMEM_SUCCESS) {
    print_error("gpumem_pointer_get_info(%p) returned %s; detail: %s\n", p, gpumem_status_name(s),
                gpumem_last_error_detail());
    fail();
  }
  return info;
}

static const char* type_name(int32_t t) {
  switch (t) {
    case GPUMEM_MEMORY_UNREGISTERED:
      return "UNREGISTERED";
    case GPUMEM_MEMORY_HOST:
      return "HOST";
    case GPUMEM_MEMORY_DEVICE:
      return "DEVICE";
    case GPUMEM_MEMORY_MANAGED:
      return "MANAGED";
    default:
      return "?";
  }
}

/* The driver reports `at` inside a registration of exactly [base, base + size). */
#define expect_registration(at, base, size) expect_registration_((at), (base), (size), __LINE__)
static void expect_registration_(const void* at, const void* base, size_t size, int line) {
  const gpumem_pointer_info_t info = info_of(at);
  if (info.memory_type != GPUMEM_MEMORY_HOST || info.base != base || info.size != size) {
    print_error(
        "line %d: at %p the driver reports %s, base %p, %zu bytes (%zu pages); expected HOST, base %p, %zu "
        "bytes (%zu pages)\n",
        line, at, type_name(info.memory_type), info.base, info.size, info.size / page, base, size, size / page);
    fail();
  }
}

/* The driver knows nothing at `at`: plain host memory. */
#define expect_unregistered(at) expect_unregistered_((at), __LINE__)
static void expect_unregistered_(const void* at, int line) {
  const gpumem_pointer_info_t info = info_of(at);
  if (info.memory_type != GPUMEM_MEMORY_UNREGISTERED) {
    print_error("line %d: at %p the driver reports %s, base %p, %zu bytes; expected UNREGISTERED\n", line, at,
                type_name(info.memory_type), info.base, info.size);
    fail();
  }
}

static void expect_pages_unregistered(const unsigned char* p, size_t pages) {
  for (size_t i = 0; i < pages; i++) expect_unregistered(p + i * page);
}

static gpumem_pin_stats_t stats_now(void) {
  gpumem_pin_stats_t s;
  memset(&s, 0xAB, sizeof s);
  s.struct_size = sizeof s;
  assert_ok(gpumem_pin_get_stats(&s));
  assert_int_equal(s.struct_size, sizeof s);
  return s;
}

/* A counter moved by exactly `delta` (negative allowed: the subtraction wraps as the cast does). */
#define expect_delta(after, before, field, delta)                                                               \
  do {                                                                                                          \
    const uint64_t got_delta_ = (after).field - (before).field;                                                 \
    const uint64_t want_delta_ = (uint64_t)(int64_t)(delta);                                                    \
    if (got_delta_ != want_delta_) {                                                                            \
      print_error("stats.%s moved by %lld, expected %lld (now %llu)\n", #field, (long long)(int64_t)got_delta_, \
                  (long long)(int64_t)want_delta_, (unsigned long long)(after).field);                          \
      fail();                                                                                                   \
    }                                                                                                           \
  } while (0)

static int32_t query(const void* p, size_t size) {
  int32_t state = -1;
  assert_ok(gpumem_pin_query(p, size, &state));
  return state;
}

/* Every test starts from a known budget and an empty cache; the counters are compared as deltas. */
static gpumem_pin_stats_t begin(void) {
  assert_ok(gpumem_pin_cache_set_budget(TEST_BUDGET));
  assert_ok(gpumem_pin_cache_flush());
  const gpumem_pin_stats_t s = stats_now();
  assert_int_equal(s.cache_budget, TEST_BUDGET);
  assert_int_equal(s.bytes_cached, 0);
  return s;
}

/* Copies host -> device -> host on a caller's stream, then checks what arrived. */
static void round_trip(gpumem_stream_t s, void* dev, unsigned char* dst, const unsigned char* src, size_t n,
                       const char* what) {
  assert_ok(gpumem_copy_async(dev, src, n, s));
  assert_ok(gpumem_copy_async(dst, dev, n, s));
  test_stream_sync(s);
  expect_bytes(dst, src, n, what);
}

/* ---------------------------------------------------------------------------------------------
 * Registrations as the driver sees them
 * ------------------------------------------------------------------------------------------- */

static void test_pin_registrations_match_driver(void** state) {
  (void)state;
  require_gpu();
  const size_t P = page;
  const gpumem_pin_stats_t s0 = begin();
  unsigned char* const m = map_pages(32);
  unsigned char* const r = m + 4 * P; /* pages before and after r stay unregistered */
  expect_pages_unregistered(m, 32);

  /* A page-aligned 16-page range: one registration of exactly those 16 pages. */
  assert_ok(gpumem_pin(r, 16 * P, 0));
  expect_registration(r, r, 16 * P);
  expect_registration(r + 16 * P - 1, r, 16 * P);
  expect_unregistered(r - 1);
  expect_unregistered(r + 16 * P);
  gpumem_pin_stats_t s = stats_now();
  expect_delta(s, s0, registrations, 1);
  expect_delta(s, s0, bytes_registered, 16 * P);
  expect_delta(s, s0, bytes_pinned, 16 * P);
  expect_delta(s, s0, bytes_cached, 0);
  expect_delta(s, s0, pins, 1);
  expect_delta(s, s0, misses, 1);
  expect_delta(s, s0, hits, 0);

  /* Overlapping it and reaching 4 pages further: a second registration of exactly those 4 pages;
   * the first is untouched. */
  assert_ok(gpumem_pin(r + 4 * P, 16 * P, 0));
  expect_registration(r, r, 16 * P);
  expect_registration(r + 15 * P, r, 16 * P);
  expect_registration(r + 16 * P, r + 16 * P, 4 * P);
  expect_registration(r + 20 * P - 1, r + 16 * P, 4 * P);
  expect_unregistered(r + 20 * P);
  s = stats_now();
  expect_delta(s, s0, registrations, 2);
  expect_delta(s, s0, bytes_registered, 20 * P);
  expect_delta(s, s0, bytes_pinned, 20 * P);
  expect_delta(s, s0, pins, 2);
  expect_delta(s, s0, misses, 2);
  expect_delta(s, s0, hits, 0);

  /* An inner range, not page-aligned: no new registration. */
  assert_ok(gpumem_pin(r + 2 * P + 100, 9 * P, 0));
  expect_registration(r + 2 * P + 100, r, 16 * P);
  expect_registration(r + 16 * P, r + 16 * P, 4 * P);
  s = stats_now();
  expect_delta(s, s0, registrations, 2);
  expect_delta(s, s0, bytes_registered, 20 * P);
  expect_delta(s, s0, bytes_pinned, 20 * P);
  expect_delta(s, s0, pins, 3);
  expect_delta(s, s0, misses, 2);
  expect_delta(s, s0, hits, 1);

  assert_int_equal(query(r, 20 * P), GPUMEM_PIN_FULL);
  assert_int_equal(query(r - 1, 20 * P + 2), GPUMEM_PIN_PARTIAL);
  assert_int_equal(query(r + 19 * P, 2 * P), GPUMEM_PIN_PARTIAL);
  assert_int_equal(query(r + 20 * P, 1), GPUMEM_PIN_NONE);

  /* Forgetting memory that is pinned is refused and changes nothing. */
  assert_status(gpumem_pin_forget(r + 17 * P, 1), GPUMEM_ERROR_BUSY);
  assert_detail_contains("is still pinned in part; unpin it before freeing it");
  expect_registration(r + 16 * P, r + 16 * P, 4 * P);

  /* Down to the inner pin: the 4-page registration holds no pinned byte, so it is cached (still
   * registered); the 16-page one still holds the inner pin. */
  assert_ok(gpumem_unpin(r, 16 * P));
  assert_ok(gpumem_unpin(r + 4 * P, 16 * P));
  expect_registration(r, r, 16 * P);
  expect_registration(r + 16 * P, r + 16 * P, 4 * P);
  assert_int_equal(query(r + 2 * P + 100, 9 * P), GPUMEM_PIN_FULL);
  assert_int_equal(query(r + 2 * P + 99, 2), GPUMEM_PIN_PARTIAL);
  assert_int_equal(query(r, 2 * P + 100), GPUMEM_PIN_NONE);
  assert_int_equal(query(r + 16 * P, 4 * P), GPUMEM_PIN_NONE);
  s = stats_now();
  expect_delta(s, s0, registrations, 2);
  expect_delta(s, s0, bytes_registered, 20 * P);
  expect_delta(s, s0, unpins, 2);

  /* No pin left: both cached, both still registered with the driver. */
  assert_ok(gpumem_unpin(r + 2 * P + 100, 9 * P));
  expect_registration(r, r, 16 * P);
  expect_registration(r + 16 * P, r + 16 * P, 4 * P);
  assert_int_equal(query(r, 20 * P), GPUMEM_PIN_NONE);
  s = stats_now();
  expect_delta(s, s0, registrations, 2);
  expect_delta(s, s0, bytes_registered, 20 * P);
  expect_delta(s, s0, bytes_pinned, 0);
  expect_delta(s, s0, bytes_cached, 20 * P);
  expect_delta(s, s0, unpins, 3);

  /* Pinning all 20 pages again is served by the two cached registrations: no driver call. */
  assert_ok(gpumem_pin(r, 20 * P, 0));
  expect_registration(r, r, 16 * P);
  expect_registration(r + 16 * P, r + 16 * P, 4 * P);
  s = stats_now();
  expect_delta(s, s0, registrations, 2);
  expect_delta(s, s0, bytes_pinned, 20 * P);
  expect_delta(s, s0, bytes_cached, 0);
  expect_delta(s, s0, misses, 2);
  expect_delta(s, s0, hits, 2);
  assert_ok(gpumem_unpin(r, 20 * P));

  /* Forget unregisters each cached registration that the range touches, and only those. */
  assert_ok(gpumem_pin_forget(r + 17 * P + 5, 1));
  expect_unregistered(r + 16 * P);
  expect_registration(r, r, 16 * P);
  assert_ok(gpumem_pin_forget(r + 15 * P, 1));
  expect_pages_unregistered(m, 32);
  s = stats_now();
  expect_delta(s, s0, registrations, 0);
  expect_delta(s, s0, bytes_registered, 0);
  expect_delta(s, s0, bytes_cached, 0);
  expect_delta(s, s0, evictions, 0);
  unmap_pages(m, 32);
}

/* Registrations are whole pages: an unaligned range registers every page it touches, and a
 * later range registers only the pages no registration covers yet. */
static void test_pin_unaligned_range_registers_whole_pages(void** state) {
  (void)state;
  require_gpu();
  const size_t P = page;
  const gpumem_pin_stats_t s0 = begin();
  unsigned char* const m = map_pages(16);

  assert_ok(gpumem_pin(m + 3 * P + 123, 5 * P + 77, 0)); /* [3P + 123, 8P + 200) */
  expect_registration(m + 3 * P, m + 3 * P, 6 * P);
  expect_registration(m + 9 * P - 1, m + 3 * P, 6 * P);
  expect_unregistered(m + 3 * P - 1);
  expect_unregistered(m + 9 * P);
  /* Pinned means counted, not registered: the registered bytes around the range are not pinned. */
  assert_int_equal(query(m + 3 * P + 123, 5 * P + 77), GPUMEM_PIN_FULL);
  assert_int_equal(query(m + 3 * P, 123), GPUMEM_PIN_NONE);
  assert_int_equal(query(m + 3 * P + 122, 2), GPUMEM_PIN_PARTIAL);
  assert_int_equal(query(m + 8 * P + 200, P - 200), GPUMEM_PIN_NONE);

  /* Unpinning a byte that is registered but not pinned is refused, changing nothing. */
  assert_status(gpumem_unpin(m + 3 * P + 122, 2), GPUMEM_ERROR_NOT_OWNED);
  assert_detail_contains("is not pinned throughout; nothing was unpinned");
  assert_int_equal(query(m + 3 * P + 123, 5 * P + 77), GPUMEM_PIN_FULL);

  /* 20 bytes across the end of that registration: only the next page is registered. */
  assert_ok(gpumem_pin(m + 9 * P - 10, 20, 0));
  expect_registration(m + 3 * P, m + 3 * P, 6 * P);
  expect_registration(m + 9 * P, m + 9 * P, P);
  expect_unregistered(m + 10 * P);
  gpumem_pin_stats_t s = stats_now();
  expect_delta(s, s0, registrations, 2);
  expect_delta(s, s0, bytes_registered, 7 * P);
  expect_delta(s, s0, misses, 2);

  assert_ok(gpumem_unpin(m + 9 * P - 10, 20));
  assert_ok(gpumem_unpin(m + 3 * P + 123, 5 * P + 77));
  assert_status(gpumem_unpin(m + 3 * P + 123, 1), GPUMEM_ERROR_NOT_OWNED);
  assert_ok(gpumem_pin_forget(m, 16 * P));
  expect_pages_unregistered(m, 16);
  s = stats_now();
  expect_delta(s, s0, registrations, 0);
  expect_delta(s, s0, bytes_registered, 0);
  unmap_pages(m, 16);
}

/* ---------------------------------------------------------------------------------------------
 * Copies through pinned memory
 * ------------------------------------------------------------------------------------------- */

typedef struct {
  size_t offset, length;
} span_t;

static void test_pin_copy_async_sub_ranges_byte_exact(void** state) {
  (void)state;
  require_gpu();
  const size_t P = page, n = 16 * P;
  begin();
  unsigned char* const src = map_pages(16);
  unsigned char* const dst = map_pages(16);
  unsigned char* const want = calloc(n, 1);
  assert_non_null(want);
  fill_pattern(src, n, 11);
  assert_ok(gpumem_pin(src, n, 0));
  assert_ok(gpumem_pin(dst, n, 0));
  expect_registration(src + n - 1, src, n);
  expect_registration(dst + n - 1, dst, n);
  void* dev = NULL;
  assert_ok(gpumem_device_alloc(0, n, &dev));
  gpumem_stream_t s = test_stream_create(0);

  const span_t spans[] = {{3 * P + 123, 5 * P + 77}, {1, 1}, {P - 1, 2}, {15 * P + 17, P - 17}, {8 * P, 4 * P}, {0, n}};
  for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++) {
    const size_t off = spans[i].offset, len = spans[i].length;
    /* The device side at another offset, so a copy that ignored an offset would show. */
    unsigned char* const d = (unsigned char*)dev + (n - len) / 2;
    assert_ok(gpumem_copy_async(d, src + off, len, s));
    assert_ok(gpumem_copy_async(dst + off, d, len, s));
    test_stream_sync(s);
    memcpy(want + off, src + off, len);
    char what[96];
    snprintf(what, sizeof what, "pinned destination after the round trip of [%zu, %zu)", off, off + len);
    expect_bytes(dst, want, n, what);
  }

  test_stream_destroy(s);
  assert_ok(gpumem_device_free(dev));
  assert_ok(gpumem_unpin(src, n));
  assert_ok(gpumem_unpin(dst, n));
  assert_ok(gpumem_pin_forget(src, n));
  assert_ok(gpumem_pin_forget(dst, n));
  expect_unregistered(src);
  expect_unregistered(dst);
  free(want);
  unmap_pages(src, 16);
  unmap_pages(dst, 16);
}

/* Two pins side by side make two adjacent registrations; a copy over both, in either direction,
 * must still arrive byte for byte. */
static void test_pin_copy_async_across_adjacent_registrations_byte_exact(void** state) {
  (void)state;
  require_gpu();
  const size_t P = page, n = 24 * P;
  begin();
  unsigned char* const src = map_pages(24);
  unsigned char* const dst = map_pages(24);
  fill_pattern(src, n, 12);
  assert_ok(gpumem_pin(src, 16 * P, 0));
  assert_ok(gpumem_pin(src + 16 * P, 8 * P, 0));
  assert_ok(gpumem_pin(dst, 16 * P, 0));
  assert_ok(gpumem_pin(dst + 16 * P, 8 * P, 0));
  expect_registration(src + 16 * P - 1, src, 16 * P);
  expect_registration(src + 16 * P, src + 16 * P, 8 * P);
  expect_registration(dst + 16 * P - 1, dst, 16 * P);
  expect_registration(dst + 16 * P, dst + 16 * P, 8 * P);
  assert_int_equal(query(src, n), GPUMEM_PIN_FULL);
  void* dev = NULL;
  assert_ok(gpumem_device_alloc(0, n, &dev));
  gpumem_stream_t s = test_stream_create(0);

  /* Across the boundary, unaligned at both ends. */
  const size_t off = 12 * P + 5, len = 8 * P - 9;
  round_trip(s, dev, dst + off, src + off, len, "across two registrations, [12P + 5, 20P - 4)");
  for (size_t i = 0; i < off; i++) assert_int_equal(dst[i], 0);
  for (size_t i = off + len; i < n; i++) assert_int_equal(dst[i], 0);
  /* The whole of both. */
  round_trip(s, dev, dst, src, n, "the whole 24 pages over two registrations");

  test_stream_destroy(s);
  assert_ok(gpumem_device_free(dev));
  assert_ok(gpumem_unpin(src, n));
  assert_ok(gpumem_unpin(dst, n));
  assert_ok(gpumem_pin_forget(src, n));
  assert_ok(gpumem_pin_forget(dst, n));
  expect_pages_unregistered(src, 24);
  expect_pages_unregistered(dst, 24);
  unmap_pages(src, 24);
  unmap_pages(dst, 24);
}

/* ---------------------------------------------------------------------------------------------
 * Freeing pinned memory: unpin, forget, then free
 * ------------------------------------------------------------------------------------------- */

/* The same addresses unmapped and mapped again (new pages behind them) pin and copy afresh:
 * no registration of the old pages survives forget. The new mapping replaces the old one in one
 * mmap (MAP_FIXED), so no other mapping can take the addresses in between. */
static void test_pin_forget_then_unmap_and_map_same_addresses(void** state) {
  (void)state;
  require_gpu();
  const size_t P = page, n = 16 * P;
  const gpumem_pin_stats_t s0 = begin();
  unsigned char* const m = map_pages(16);
  unsigned char* const back = malloc(n);
  assert_non_null(back);
  void* dev = NULL;
  assert_ok(gpumem_device_alloc(0, n, &dev));
  gpumem_stream_t s = test_stream_create(0);

  fill_pattern(m, n, 21);
  assert_ok(gpumem_pin(m, n, 0));
  round_trip(s, dev, back, m, n, "before the unmap");
  assert_ok(gpumem_unpin(m, n));
  expect_registration(m, m, n); /* cached */
  assert_ok(gpumem_pin_forget(m, n));
  expect_unregistered(m);

  void* again = mmap(m, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  assert_ptr_equal(again, m);
  expect_unregistered(m);
  fill_pattern(m, n, 22);
  assert_ok(gpumem_pin(m, n, 0));
  expect_registration(m, m, n);
  gpumem_pin_stats_t st = stats_now();
  expect_delta(st, s0, misses, 2); /* registered anew, not served from the cache */
  expect_delta(st, s0, hits, 0);
  round_trip(s, dev, back, m, n, "after mapping the same addresses again");
  assert_ok(gpumem_unpin(m, n));
  assert_ok(gpumem_pin_forget(m, n));
  expect_unregistered(m);

  test_stream_destroy(s);
  assert_ok(gpumem_device_free(dev));
  free(back);
  unmap_pages(m, 16);
}

/* malloc'd memory, not page-aligned: the registration is the pages around it; free after forget,
 * malloc again (the allocator usually gives the same chunk back), and pinning works afresh. */
static void test_pin_forget_then_free_and_malloc_again(void** state) {
  (void)state;
  require_gpu();
  const size_t n = 10 * page + 123;
  const gpumem_pin_stats_t s0 = begin();
  unsigned char* const back = malloc(n);
  assert_non_null(back);
  void* dev = NULL;
  assert_ok(gpumem_device_alloc(0, n, &dev));
  gpumem_stream_t s = test_stream_create(0);

  unsigned char* addresses[2] = {NULL, NULL};
  for (unsigned round = 0; round < 2; round++) {
    unsigned char* const p = malloc(n);
    assert_non_null(p);
    addresses[round] = p;
    fill_pattern(p, n, 31 + round);
    const uintptr_t first = (uintptr_t)p & ~(uintptr_t)(page - 1);
    const uintptr_t end = ((uintptr_t)p + n + page - 1) & ~(uintptr_t)(page - 1);
    assert_ok(gpumem_pin(p, n, 0));
    expect_registration(p, (void*)first, end - first);
    expect_registration(p + n - 1, (void*)first, end - first);
    round_trip(s, dev, back, p, n, round == 0 ? "first malloc" : "second malloc");
    assert_ok(gpumem_unpin(p, n));
    assert_ok(gpumem_pin_forget(p, n));
    expect_unregistered(p);
    expect_unregistered(p + n - 1);
    free(p);
  }
  const gpumem_pin_stats_t st = stats_now();
  expect_delta(st, s0, misses, 2);
  expect_delta(st, s0, registrations, 0);
  if (addresses[0] != addresses[1])
    print_message("note: malloc gave another address the second time (%p, then %p)\n", (void*)addresses[0],
                  (void*)addresses[1]);

  test_stream_destroy(s);
  assert_ok(gpumem_device_free(dev));
  free(back);
}

/* ---------------------------------------------------------------------------------------------
 * The cache
 * ------------------------------------------------------------------------------------------- */

static void test_pin_budget_zero_unregisters_at_last_unpin(void** state) {
  (void)state;
  require_gpu();
  const size_t P = page;
  const gpumem_pin_stats_t s0 = begin();
  unsigned char* const m = map_pages(8);
  assert_ok(gpumem_pin_cache_set_budget(0));
  assert_ok(gpumem_pin(m, 4 * P, 0));
  assert_ok(gpumem_pin(m + P, P, 0));
  assert_ok(gpumem_unpin(m, 4 * P));
  expect_registration(m, m, 4 * P); /* one pin still covers page 1 */
  assert_ok(gpumem_unpin(m + P, P));
  expect_unregistered(m);
  const gpumem_pin_stats_t s = stats_now();
  expect_delta(s, s0, registrations, 0);
  expect_delta(s, s0, bytes_cached, 0);
  assert_int_equal(s.cache_budget, 0);
  assert_ok(gpumem_pin_cache_set_budget(TEST_BUDGET));
  unmap_pages(m, 8);
}

static void test_pin_budget_evicts_least_recently_used(void** state) {
  (void)state;
  require_gpu();
  const size_t P = page;
  const gpumem_pin_stats_t s0 = begin();
  unsigned char* const m = map_pages(32);
  unsigned char* const a = m;
  unsigned char* const b = m + 16 * P;
  assert_ok(gpumem_pin_cache_set_budget(8 * P));
  assert_ok(gpumem_pin(a, 8 * P, 0));
  assert_ok(gpumem_unpin(a, 8 * P));
  expect_registration(a, a, 8 * P); /* 8 pages cached: within the budget */
  assert_ok(gpumem_pin(b, 8 * P, 0));
  assert_ok(gpumem_unpin(b, 8 * P));
  /* 16 pages cached would exceed it: the older one goes. */
  expect_unregistered(a);
  expect_registration(b, b, 8 * P);
  gpumem_pin_stats_t s = stats_now();
  expect_delta(s, s0, evictions, 1);
  expect_delta(s, s0, bytes_cached, 8 * P);
  expect_delta(s, s0, registrations, 1);
  /* A lower budget evicts at once. */
  assert_ok(gpumem_pin_cache_set_budget(4 * P));
  expect_unregistered(b);
  s = stats_now();
  expect_delta(s, s0, evictions, 2);
  expect_delta(s, s0, bytes_cached, 0);
  expect_delta(s, s0, registrations, 0);
  assert_int_equal(s.cache_budget, 4 * P);
  assert_ok(gpumem_pin_cache_set_budget(TEST_BUDGET));
  unmap_pages(m, 32);
}

/* ---------------------------------------------------------------------------------------------
 * Many threads
 * ------------------------------------------------------------------------------------------- */

#define THREADS 8
#define ITERATIONS 200

typedef int (*stream_sync_fn)(gpumem_stream_t s);
static stream_sync_fn stream_sync; /* resolved on the main thread: test_cu_symbol is not thread-safe */

/* Workers cannot use cmocka's assertions (they jump to the main thread's test); they record the
 * first failure here instead. */
typedef struct {
  int index;
  unsigned char* region;
  void* dev;
  gpumem_stream_t stream;
  char error[512];
} worker_t;

#define WORKER_CHECK(w, cond, ...)                                                                               \
  do {                                                                                                           \
    if (!(cond)) {                                                                                               \
      int at_ = snprintf((w)->error, sizeof(w)->error, __VA_ARGS__);                                             \
      if (at_ > 0 && (size_t)at_ < sizeof(w)->error)                                                             \
        snprintf((w)->error + at_, sizeof(w)->error - (size_t)at_, " (detail: %s)", gpumem_last_error_detail()); \
      return NULL;                                                                                               \
    }                                                                                                            \
  } while (0)

/* Region layout, in pages: [0, 16) is shared by all and only read; worker t owns [16 + 4t, 20 + 4t)
 * and writes it, and pins [18 + 4t + 100 bytes, 22 + 4t + 100 bytes), half of its neighbour's. */
#define REGION_PAGES 64

static void* worker_main(void* arg) {
  worker_t* const w = arg;
  const size_t P = page;
  unsigned char* const shared = w->region;
  unsigned char* const own = w->region + 16 * P + 4 * P * (size_t)w->index;
  unsigned char* const neighbour = own + 2 * P + 100;
  for (unsigned i = 0; i < ITERATIONS; i++) {
    const size_t off = ((size_t)w->index * 997 + (size_t)i * 1031) % (12 * P);
    const size_t len = 1 + ((size_t)i * 7919 + (size_t)w->index * 13) % (4 * P - 1);
    gpumem_status_t st;
    st = gpumem_pin(shared + off, len, 0);
    WORKER_CHECK(w, st == GPUMEM_SUCCESS, "iteration %u: pin shared [%zu, +%zu): %s", i, off, len,
                 gpumem_status_name(st));
    st = gpumem_pin(own, 4 * P, 0);
    WORKER_CHECK(w, st == GPUMEM_SUCCESS, "iteration %u: pin own: %s", i, gpumem_status_name(st));
    st = gpumem_pin(neighbour, 4 * P, 0);
    WORKER_CHECK(w, st == GPUMEM_SUCCESS, "iteration %u: pin neighbour: %s", i, gpumem_status_name(st));

    /* What this thread pinned stays pinned and registered, whatever the others unpin, evict or
     * flush meanwhile. */
    int32_t state = -1;
    st = gpumem_pin_query(shared + off, len, &state);
    WORKER_CHECK(w, st == GPUMEM_SUCCESS && state == GPUMEM_PIN_FULL, "iteration %u: query shared: %s, state %d", i,
                 gpumem_status_name(st), (int)state);
    const unsigned char* const probes[] = {shared + off, shared + off + len - 1, own, own + 4 * P - 1,
                                           neighbour + 4 * P - 1};
    for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) {
      gpumem_pointer_info_t info;
      memset(&info, 0, sizeof info);
      info.struct_size = sizeof info;
      st = gpumem_pointer_get_info(probes[k], &info);
      WORKER_CHECK(w, st == GPUMEM_SUCCESS && info.memory_type == GPUMEM_MEMORY_HOST,
                   "iteration %u: %p, pinned by this thread, is %s to the driver (%s)", i, (const void*)probes[k],
                   type_name(info.memory_type), gpumem_status_name(st));
    }

    st = gpumem_copy_async(w->dev, shared + off, len, w->stream);
    WORKER_CHECK(w, st == GPUMEM_SUCCESS, "iteration %u: copy shared [%zu, +%zu) to device: %s", i, off, len,
                 gpumem_status_name(st));
    st = gpumem_copy_async(own, w->dev, len, w->stream);
    WORKER_CHECK(w, st == GPUMEM_SUCCESS, "iteration %u: copy device to own: %s", i, gpumem_status_name(st));
    const int r = stream_sync(w->stream);
    WORKER_CHECK(w, r == 0, "iteration %u: cuStreamSynchronize returned %d", i, r);
    for (size_t b = 0; b < len; b++)
      WORKER_CHECK(w, own[b] == shared[off + b],
                   "iteration %u: byte %zu of %zu copied from shared offset %zu is 0x%02x, expected 0x%02x", i, b, len,
                   off, own[b], shared[off + b]);

    st = gpumem_unpin(neighbour, 4 * P);
    WORKER_CHECK(w, st == GPUMEM_SUCCESS, "iteration %u: unpin neighbour: %s", i, gpumem_status_name(st));
    st = gpumem_unpin(own, 4 * P);
    WORKER_CHECK(w, st == GPUMEM_SUCCESS, "iteration %u: unpin own: %s", i, gpumem_status_name(st));
    st = gpumem_unpin(shared + off, len);
    WORKER_CHECK(w, st == GPUMEM_SUCCESS, "iteration %u: unpin shared: %s", i, gpumem_status_name(st));

    if (i % 16 == (unsigned)w->index) {
      st = gpumem_pin_cache_flush();
      WORKER_CHECK(w, st == GPUMEM_SUCCESS, "iteration %u: flush: %s", i, gpumem_status_name(st));
    } else if (i % 16 == (unsigned)w->index + 8) {
      /* Busy when a neighbour's pin covers part of it right now: both answers are right. */
      st = gpumem_pin_forget(own, 4 * P);
      WORKER_CHECK(w, st == GPUMEM_SUCCESS || st == GPUMEM_ERROR_BUSY, "iteration %u: forget own: %s", i,
                   gpumem_status_name(st));
    }
  }
  return NULL;
}

static void test_pin_threads_pin_unpin_copy_balanced(void** state) {
  (void)state;
  require_gpu();
  const size_t P = page;
  const gpumem_pin_stats_t s0 = begin();
  /* A small budget, so that evictions race with the pins. */
  assert_ok(gpumem_pin_cache_set_budget(8 * P));
  unsigned char* const region = map_pages(REGION_PAGES);
  fill_pattern(region, 16 * P, 41);
  stream_sync = (stream_sync_fn)test_cu_symbol("cuStreamSynchronize");

  worker_t workers[THREADS];
  pthread_t threads[THREADS];
  for (int t = 0; t < THREADS; t++) {
    memset(&workers[t], 0, sizeof workers[t]);
    workers[t].index = t;
    workers[t].region = region;
    assert_ok(gpumem_device_alloc(0, 4 * P, &workers[t].dev));
    workers[t].stream = test_stream_create(0);
  }
  for (int t = 0; t < THREADS; t++) assert_int_equal(pthread_create(&threads[t], NULL, worker_main, &workers[t]), 0);
  for (int t = 0; t < THREADS; t++) assert_int_equal(pthread_join(threads[t], NULL), 0);
  bool failed = false;
  for (int t = 0; t < THREADS; t++) {
    if (workers[t].error[0]) {
      print_error("thread %d: %s\n", t, workers[t].error);
      failed = true;
    }
    test_stream_destroy(workers[t].stream);
    assert_ok(gpumem_device_free(workers[t].dev));
  }
  if (failed) fail();

  gpumem_pin_stats_t s = stats_now();
  expect_delta(s, s0, pins, 3 * THREADS * ITERATIONS);
  expect_delta(s, s0, unpins, 3 * THREADS * ITERATIONS);
  expect_delta(s, s0, bytes_pinned, 0);
  assert_int_equal((s.hits - s0.hits) + (s.misses - s0.misses), 3 * THREADS * ITERATIONS);
  assert_int_equal(query(region, REGION_PAGES * P), GPUMEM_PIN_NONE);
  assert_true(s.bytes_cached - s0.bytes_cached <= 8 * P);

  assert_ok(gpumem_pin_cache_flush());
  s = stats_now();
  expect_delta(s, s0, registrations, 0);
  expect_delta(s, s0, bytes_registered, 0);
  expect_delta(s, s0, bytes_cached, 0);
  expect_pages_unregistered(region, REGION_PAGES);
  assert_ok(gpumem_pin_cache_set_budget(TEST_BUDGET));
  unmap_pages(region, REGION_PAGES);
}

/* ---------------------------------------------------------------------------------------------
 * Memory the service does not own
 * ------------------------------------------------------------------------------------------- */

/* A refusal that changed nothing: no pin counted, no registration made. */
static void expect_nothing_changed(const gpumem_pin_stats_t* s0) {
  const gpumem_pin_stats_t s = stats_now();
  expect_delta(s, *s0, pins, 0);
  expect_delta(s, *s0, registrations, 0);
  expect_delta(s, *s0, bytes_registered, 0);
  expect_delta(s, *s0, misses, 0);
  expect_delta(s, *s0, hits, 0);
}

static void test_pin_host_alloc_buffer_refused(void** state) {
  (void)state;
  require_gpu();
  const size_t P = page;
  const gpumem_pin_stats_t s0 = begin();
  unsigned char* h = NULL;
  assert_ok(gpumem_host_alloc(16 * P, 0, (void**)&h));
  const gpumem_pointer_info_t before = info_of(h);
  assert_int_equal(before.memory_type, GPUMEM_MEMORY_HOST);

  assert_status(gpumem_pin(h, 16 * P, 0), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("page-locked outside the pinning service");
  assert_status(gpumem_pin(h + 100, 1, 0), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("page-locked outside the pinning service");
  assert_status(gpumem_pin(h + 3 * P, 2 * P, 0), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("page-locked outside the pinning service");
  expect_nothing_changed(&s0);
  assert_int_equal(query(h, 16 * P), GPUMEM_PIN_NONE);
  assert_status(gpumem_unpin(h, 16 * P), GPUMEM_ERROR_NOT_OWNED);
  assert_detail_contains("is not pinned throughout");
  /* The allocation is as it was, and still frees. */
  const gpumem_pointer_info_t after = info_of(h);
  assert_int_equal(after.memory_type, GPUMEM_MEMORY_HOST);
  assert_ptr_equal(after.base, before.base);
  assert_int_equal(after.size, before.size);
  assert_ok(gpumem_host_free(h));
}

/* A range the caller registered directly is someone else's too; and a pin that needs several
 * gaps registered, one of which overlaps it, leaves none of them registered. */
static void test_pin_directly_registered_range_refused_all_or_nothing(void** state) {
  (void)state;
  require_gpu();
  const size_t P = page;
  const gpumem_pin_stats_t s0 = begin();
  unsigned char* const m = map_pages(32);
  assert_ok(gpumem_host_register(m + 16 * P, 4 * P, 0));

  assert_status(gpumem_pin(m + 16 * P, 4 * P, 0), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("page-locked outside the pinning service");
  assert_status(gpumem_pin(m + 12 * P, 8 * P, 0), GPUMEM_ERROR_INVALID_POINTER); /* plain, then registered */
  assert_detail_contains("page-locked outside the pinning service");
  expect_unregistered(m + 12 * P);
  /* Plain at both ends, the caller's registration in the middle: the driver itself must refuse. */
  assert_status(gpumem_pin(m + 12 * P, 12 * P, 0), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("page-locked outside the pinning service");
  expect_unregistered(m + 12 * P);
  expect_unregistered(m + 20 * P);
  expect_nothing_changed(&s0);

  /* The service holds [8P, 12P); pinning [0, 18P) needs the gaps [0, 8P) and [12P, 18P), and the
   * second overlaps the caller's registration. */
  assert_ok(gpumem_pin(m + 8 * P, 4 * P, 0));
  expect_registration(m + 8 * P, m + 8 * P, 4 * P);
  assert_status(gpumem_pin(m, 18 * P, 0), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("page-locked outside the pinning service");
  expect_unregistered(m);
  expect_unregistered(m + 7 * P);
  expect_unregistered(m + 12 * P);
  expect_registration(m + 8 * P, m + 8 * P, 4 * P);
  expect_registration(m + 16 * P, m + 16 * P, 4 * P); /* the caller's, untouched */
  const gpumem_pin_stats_t s = stats_now();
  expect_delta(s, s0, pins, 1);
  expect_delta(s, s0, registrations, 1);
  expect_delta(s, s0, bytes_registered, 4 * P);
  expect_delta(s, s0, bytes_pinned, 4 * P);
  /* The held range was counted once, not twice. */
  assert_ok(gpumem_unpin(m + 8 * P, 4 * P));
  assert_status(gpumem_unpin(m + 8 * P, 4 * P), GPUMEM_ERROR_NOT_OWNED);

  assert_ok(gpumem_pin_forget(m, 32 * P));
  assert_ok(gpumem_host_unregister(m + 16 * P));
  expect_pages_unregistered(m, 32);
  unmap_pages(m, 32);
}

static void test_pin_device_memory_refused(void** state) {
  (void)state;
  require_gpu();
  const size_t P = page;
  const gpumem_pin_stats_t s0 = begin();
  unsigned char* d = NULL;
  assert_ok(gpumem_device_alloc(0, 16 * P, (void**)&d));
  assert_status(gpumem_pin(d, 16 * P, 0), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("overlaps device memory on device 0");
  assert_detail_contains("only host memory can be registered");
  assert_status(gpumem_pin(d + 100, 1, 0), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("overlaps device memory on device 0");
  expect_nothing_changed(&s0);
  assert_int_equal(query(d, 16 * P), GPUMEM_PIN_NONE);
  assert_int_equal(info_of(d).memory_type, GPUMEM_MEMORY_DEVICE);
  assert_ok(gpumem_device_free(d));

  unsigned char* managed = NULL;
  assert_ok(gpumem_managed_alloc(0, 16 * P, GPUMEM_MANAGED_ATTACH_GLOBAL, (void**)&managed));
  assert_status(gpumem_pin(managed, 16 * P, 0), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("overlaps managed memory");
  expect_nothing_changed(&s0);
  assert_int_equal(info_of(managed).memory_type, GPUMEM_MEMORY_MANAGED);
  assert_ok(gpumem_managed_free(managed));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pin_registrations_match_driver),
      cmocka_unit_test(test_pin_unaligned_range_registers_whole_pages),
      cmocka_unit_test(test_pin_copy_async_sub_ranges_byte_exact),
      cmocka_unit_test(test_pin_copy_async_across_adjacent_registrations_byte_exact),
      cmocka_unit_test(test_pin_forget_then_unmap_and_map_same_addresses),
      cmocka_unit_test(test_pin_forget_then_free_and_malloc_again),
      cmocka_unit_test(test_pin_budget_zero_unregisters_at_last_unpin),
      cmocka_unit_test(test_pin_budget_evicts_least_recently_used),
      cmocka_unit_test(test_pin_threads_pin_unpin_copy_balanced),
      cmocka_unit_test(test_pin_host_alloc_buffer_refused),
      cmocka_unit_test(test_pin_directly_registered_range_refused_all_or_nothing),
      cmocka_unit_test(test_pin_device_memory_refused),
  };
  page = (size_t)sysconf(_SC_PAGESIZE);
  if (!gpu_available()) {
    printf("all tests need a GPU: %s\n", gpumem_last_error_detail());
    return 77;
  }
  return cmocka_run_group_tests(tests, NULL, NULL);
}
