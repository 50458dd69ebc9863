/* The pinning service end to end, through the public API, against the fake driver
 * (tests/driver/fake_cuda.c), whose registration ledger refuses what the real driver refuses: a
 * registration meeting a locked page, an unregister of anything but a registration's start. A
 * seeded random sequence of pins, unpins, queries, forgets, flushes and budget changes is checked
 * after every step against a reference model that counts pins per byte; targeted tests pin down
 * the cases one by one. CTest runs the binary twice: the host tests, and with the argument
 * "threads" the thread tests. GPUMEM_CUDA_DRIVER names the fake and GPUMEM_PIN_CACHE is 3MiB.
 * GPUMEM_TEST_SEED=<n> replays another random sequence. */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"

#define PIN_CACHE_FROM_ENVIRONMENT ((uint64_t)3 << 20)
#define DEFAULT_BUDGET ((uint64_t)1 << 30)
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define CUDA_ERROR_NOT_SUPPORTED 801
#define CU_MEMHOSTREGISTER_PORTABLE 1

/* ---- The fake driver's ledger, through dlsym ---------------------------------------------------- */

static struct {
  size_t (*registration_count)(void);
  size_t (*registered_bytes)(void);
  size_t (*register_calls)(void);
  size_t (*unregister_calls)(void);
  size_t (*overlap_refusals)(void);
  int (*is_registered)(const void* p);
  int (*registration_flags)(const void* p);
  size_t (*registrations)(uintptr_t* starts, size_t* sizes, size_t max);
  void (*fail_registers)(int n, int code);
  void (*fail_registers_after)(int skip, int n, int code);
  void (*set_unmapped)(const void* p, size_t size);
  void (*set_call_delay)(unsigned int microseconds);
  void* (*managed_address)(void);
  int (*context_depth)(void);
} fake;

static size_t page;

/* Register calls the fake refused for meeting a locked page: the service never makes one of its
 * own, so the count grows only where a test registers pages behind the service's back. */
static size_t refusals_expected;

/* dlopen by the same path finds the copy gpumem opened (or will open). */
static int load_fake(void) {
  const char* path = getenv("GPUMEM_CUDA_DRIVER");
  void* lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (lib == NULL) {
    fprintf(stderr, "GPUMEM_CUDA_DRIVER must name the fake driver (run this test through CTest): %s\n",
            path ? dlerror() : "not set");
    return -1;
  }
#define FAKE_HOOK(field)                                                     \
  *(void**)&fake.field = dlsym(lib, "fake_cuda_" #field);                    \
  if (fake.field == NULL) {                                                  \
    fprintf(stderr, "%s has no fake_cuda_%s: not the fake\n", path, #field); \
    return -1;                                                               \
  }
  FAKE_HOOK(registration_count)
  FAKE_HOOK(registered_bytes)
  FAKE_HOOK(register_calls)
  FAKE_HOOK(unregister_calls)
  FAKE_HOOK(overlap_refusals)
  FAKE_HOOK(is_registered)
  FAKE_HOOK(registration_flags)
  FAKE_HOOK(registrations)
  FAKE_HOOK(fail_registers)
  FAKE_HOOK(fail_registers_after)
  FAKE_HOOK(set_unmapped)
  FAKE_HOOK(set_call_delay)
  FAKE_HOOK(managed_address)
  FAKE_HOOK(context_depth)
#undef FAKE_HOOK
  page = (size_t)sysconf(_SC_PAGESIZE);
  return 0;
}

/* The ledger at one moment, with the fake's call counters. */
#define MAX_REGISTRATIONS 1024
typedef struct {
  size_t n;
  uintptr_t start[MAX_REGISTRATIONS];
  size_t size[MAX_REGISTRATIONS];
  size_t bytes, register_calls, unregister_calls, refusals;
} ledger_t;

static void ledger_read(ledger_t* l) {
  l->n = fake.registrations(l->start, l->size, MAX_REGISTRATIONS);
  assert_true(l->n <= MAX_REGISTRATIONS);
  l->bytes = fake.registered_bytes();
  l->register_calls = fake.register_calls();
  l->unregister_calls = fake.unregister_calls();
  l->refusals = fake.overlap_refusals();
}

/* The index of the registration [start, start + size) in l, or -1. */
static long ledger_find(const ledger_t* l, uintptr_t start, size_t size) {
  for (size_t i = 0; i < l->n; ++i)
    if (l->start[i] == start && l->size[i] == size) return (long)i;
  return -1;
}

static bool ledger_same(const ledger_t* a, const ledger_t* b) {
  if (a->n != b->n || a->bytes != b->bytes) return false;
  for (size_t i = 0; i < a->n; ++i)
    if (a->start[i] != b->start[i] || a->size[i] != b->size[i]) return false;
  return true;
}

/* Snapshots for the targeted tests. */
static ledger_t snap_before, snap_after, snap_check;

static gpumem_pin_stats_t stats_now(void) {
  gpumem_pin_stats_t s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  assert_ok(gpumem_pin_get_stats(&s));
  return s;
}

static bool stats_same(const gpumem_pin_stats_t* a, const gpumem_pin_stats_t* b) {
  return memcmp(a, b, sizeof *a) == 0;
}

static int32_t query(const void* p, size_t size) {
  int32_t state = -1;
  assert_ok(gpumem_pin_query(p, size, &state));
  return state;
}

/* The buffers a test has not ended yet, so that the teardown of a failed test can clean up after it. */
static struct {
  char* p;
  size_t pages;
} open_buffers[4];

/* Page-aligned host memory that the service never touches. */
static char* buffer_new(size_t pages) {
  void* p = NULL;
  assert_int_equal(posix_memalign(&p, page, pages * page), 0);
  for (size_t i = 0; i < sizeof open_buffers / sizeof open_buffers[0]; ++i)
    if (open_buffers[i].p == NULL) {
      open_buffers[i].p = p;
      open_buffers[i].pages = pages;
      return p;
    }
  fail_msg("more than %zu buffers open", sizeof open_buffers / sizeof open_buffers[0]);
  return NULL;
}

static void buffer_close(char* buf) {
  for (size_t i = 0; i < sizeof open_buffers / sizeof open_buffers[0]; ++i)
    if (open_buffers[i].p == buf) open_buffers[i].p = NULL;
  free(buf);
}

/* Nothing in the buffer is pinned any more: forget it, then it holds no registration. */
static void buffer_end(char* buf, size_t pages) {
  assert_int_equal(query(buf, pages * page), GPUMEM_PIN_NONE);
  assert_ok(gpumem_pin_forget(buf, pages * page));
  for (size_t i = 0; i < pages; ++i) assert_false(fake.is_registered(buf + i * page));
  buffer_close(buf);
}

/* After a failed test: unpins what it left pinned (found by queries), forgets and frees its buffers.
 * Returns how many buffers needed it. */
static int buffers_abandon(void) {
  int left = 0;
  for (size_t b = 0; b < sizeof open_buffers / sizeof open_buffers[0]; ++b) {
    char* const buf = open_buffers[b].p;
    if (buf == NULL) continue;
    const size_t size = open_buffers[b].pages * page;
    ++left;
    int32_t state = GPUMEM_PIN_FULL;
    for (int pass = 0; pass < 100 && gpumem_pin_query(buf, size, &state) == GPUMEM_SUCCESS && state; ++pass) {
      for (size_t i = 0; i < size;) {
        size_t end = i;
        while (end < size && gpumem_pin_query(buf + end, 1, &state) == GPUMEM_SUCCESS && state) ++end;
        if (end > i) gpumem_unpin(buf + i, end - i);
        i = end + 1;
      }
    }
    gpumem_pin_forget(buf, size);
    buffer_close(buf);
  }
  return left;
}

/* The page-aligned registration [start, start + pages) is in the ledger, made by the service. */
static void assert_registration(const char* start, size_t pages) {
  ledger_t* const l = &snap_check;
  ledger_read(l);
  const long i = ledger_find(l, (uintptr_t)start, pages * page);
  if (i < 0) {
    print_error("no registration of %zu pages at %p; the ledger has %zu:\n", pages, (const void*)start, l->n);
    for (size_t j = 0; j < l->n; ++j) print_error("  %#lx + %zu\n", (unsigned long)l->start[j], l->size[j]);
  }
  assert_true(i >= 0);
  assert_true(fake.registration_flags(start) & CU_MEMHOSTREGISTER_PORTABLE);
}

/* Every test leaves the service as it found it: nothing registered, no failure armed. */
static int test_setup(void** state) {
  (void)state;
  assert_int_equal(fake.registration_count(), 0);
  refusals_expected = fake.overlap_refusals();
  return 0;
}

/* The random test's model, freed by the teardown whether the test got to its end or not. */
static uint16_t* model_count;
static uint32_t* model_pinned_in_page;

static int test_teardown(void** state) {
  (void)state;
  free(model_count);
  free(model_pinned_in_page);
  model_count = NULL;
  model_pinned_in_page = NULL;
  if (buffers_abandon()) print_error("a buffer was left open: the test failed before it cleaned up\n");
  fake.fail_registers(0, 0);
  fake.set_unmapped(NULL, 0);
  fake.set_call_delay(0);
  assert_ok(gpumem_pin_cache_flush());
  assert_int_equal(fake.registration_count(), 0);
  assert_int_equal(fake.overlap_refusals(), refusals_expected);
  assert_int_equal(fake.context_depth(), 0);
  return 0;
}

/* ---- Targeted tests ----------------------------------------------------------------------------- */

/* The first call to the service reads GPUMEM_PIN_CACHE=3MiB (set by CTest): before any set_budget. */
static void test_pin_model_budget_from_environment(void** state) {
  (void)state;
  const gpumem_pin_stats_t s = stats_now();
  assert_int_equal(s.cache_budget, PIN_CACHE_FROM_ENVIRONMENT);
  assert_int_equal(s.registrations, 0);
  assert_int_equal(s.bytes_registered, 0);
  assert_int_equal(s.pins, 0);
  assert_ok(gpumem_pin_cache_set_budget(DEFAULT_BUDGET));
  assert_int_equal(stats_now().cache_budget, DEFAULT_BUDGET);
}

/* Pins inside, overlapping and next to registered pages register only the pages no registration
 * covers, one call per gap; pin counts are per byte, not per page. */
static void test_pin_model_registers_only_gaps(void** state) {
  (void)state;
  char* buf = buffer_new(16);
  const gpumem_pin_stats_t s0 = stats_now();
  size_t calls = fake.register_calls();

  assert_ok(gpumem_pin(buf + 2 * page, 2 * page, 0)); /* pages 2-3 */
  assert_int_equal(fake.register_calls(), calls += 1);
  assert_registration(buf + 2 * page, 2);

  assert_ok(gpumem_pin(buf + 3 * page + 5, 3 * page + 2, 0)); /* pages 3-6: only 4-6 are new */
  assert_int_equal(fake.register_calls(), calls += 1);
  assert_registration(buf + 4 * page, 3);

  assert_ok(gpumem_pin(buf + 2 * page + 1, 3 * page, 0)); /* inside: no driver call */
  assert_int_equal(fake.register_calls(), calls);

  assert_ok(gpumem_pin(buf, 9 * page, 0)); /* pages 0-8: the gaps 0-1 and 7-8 */
  assert_int_equal(fake.register_calls(), calls += 2);
  assert_registration(buf, 2);
  assert_registration(buf + 7 * page, 2);

  assert_ok(gpumem_pin(buf + 9 * page, 1, 0)); /* the next page, one byte */
  assert_int_equal(fake.register_calls(), calls += 1);
  assert_registration(buf + 9 * page, 1);
  assert_ok(gpumem_pin(buf + 9 * page + 100, 100, 0)); /* the same page: no call */
  assert_int_equal(fake.register_calls(), calls);

  assert_int_equal(fake.registration_count(), 5);
  assert_int_equal(fake.registered_bytes(), 10 * page);
  gpumem_pin_stats_t s = stats_now();
  assert_int_equal(s.registrations, 5);
  assert_int_equal(s.bytes_registered, 10 * page);
  assert_int_equal(s.bytes_pinned, 10 * page);
  assert_int_equal(s.bytes_cached, 0);
  assert_int_equal(s.pins - s0.pins, 6);
  assert_int_equal(s.misses - s0.misses, 4);
  assert_int_equal(s.hits - s0.hits, 2);

  /* Bytes of a registered page that no pin covers are not pinned, and cannot be unpinned. */
  assert_int_equal(query(buf + 9 * page, 1), GPUMEM_PIN_FULL);
  assert_int_equal(query(buf + 9 * page + 1, 99), GPUMEM_PIN_NONE);
  assert_int_equal(query(buf + 9 * page + 99, 2), GPUMEM_PIN_PARTIAL);
  assert_int_equal(query(buf + 9 * page + 100, 100), GPUMEM_PIN_FULL);
  assert_int_equal(query(buf + 9 * page + 100, 101), GPUMEM_PIN_PARTIAL);
  assert_status(gpumem_unpin(buf + 9 * page + 1, 1), GPUMEM_ERROR_NOT_OWNED);
  assert_detail_contains("is not pinned throughout; nothing was unpinned");
  assert_status(gpumem_unpin(buf + 9 * page + 150, 51), GPUMEM_ERROR_NOT_OWNED);
  assert_status(gpumem_unpin(buf + 9 * page, 200), GPUMEM_ERROR_NOT_OWNED);
  assert_int_equal(query(buf, 9 * page), GPUMEM_PIN_FULL);
  assert_int_equal(query(buf, 10 * page), GPUMEM_PIN_PARTIAL);
  assert_int_equal(query(buf + 10 * page, 6 * page), GPUMEM_PIN_NONE);

  assert_ok(gpumem_unpin(buf + 9 * page + 100, 100));
  assert_ok(gpumem_unpin(buf + 9 * page, 1));
  assert_ok(gpumem_unpin(buf, 9 * page));
  assert_ok(gpumem_unpin(buf + 2 * page + 1, 3 * page));
  assert_ok(gpumem_unpin(buf + 3 * page + 5, 3 * page + 2));
  assert_ok(gpumem_unpin(buf + 2 * page, 2 * page));
  assert_int_equal(query(buf, 16 * page), GPUMEM_PIN_NONE);
  assert_int_equal(fake.register_calls(), calls);
  s = stats_now();
  assert_int_equal(s.unpins - s0.unpins, 6);
  assert_int_equal(s.bytes_pinned, 0);
  assert_int_equal(s.bytes_cached, 10 * page);
  buffer_end(buf, 16);
}

/* CUDA.jl pins a resized array again at the same address with a bigger size: only the new pages
 * are registered, and each pin is undone by an unpin of its own size. */
static void test_pin_model_same_start_bigger_size(void** state) {
  (void)state;
  char* buf = buffer_new(8);
  const size_t calls = fake.register_calls();
  assert_ok(gpumem_pin(buf, 2 * page + 10, 0));
  assert_ok(gpumem_pin(buf, 5 * page, 0));
  assert_int_equal(fake.register_calls(), calls + 2);
  assert_registration(buf, 3);
  assert_registration(buf + 3 * page, 2);
  assert_int_equal(query(buf, 5 * page), GPUMEM_PIN_FULL);

  assert_ok(gpumem_unpin(buf, 2 * page + 10));
  assert_int_equal(query(buf, 5 * page), GPUMEM_PIN_FULL);
  assert_ok(gpumem_pin(buf, 4 * page, 0)); /* smaller again: a hit */
  assert_int_equal(fake.register_calls(), calls + 2);
  assert_ok(gpumem_unpin(buf, 5 * page));
  assert_int_equal(query(buf, 4 * page), GPUMEM_PIN_FULL);
  assert_int_equal(query(buf + 4 * page, page), GPUMEM_PIN_NONE);
  assert_status(gpumem_unpin(buf, 5 * page), GPUMEM_ERROR_NOT_OWNED);
  assert_ok(gpumem_unpin(buf, 4 * page));
  assert_status(gpumem_unpin(buf, 1), GPUMEM_ERROR_NOT_OWNED);
  assert_int_equal(query(buf, 8 * page), GPUMEM_PIN_NONE);
  buffer_end(buf, 8);
}

/* After the last unpin the registration stays cached: pinning it again is a hit with no driver call. */
static void test_pin_model_cache_hit_after_unpin(void** state) {
  (void)state;
  char* buf = buffer_new(8);
  assert_ok(gpumem_pin_cache_set_budget(DEFAULT_BUDGET));
  const size_t calls = fake.register_calls(), uncalls = fake.unregister_calls();
  const gpumem_pin_stats_t s0 = stats_now();

  assert_ok(gpumem_pin(buf + page, 4 * page, 0));
  assert_ok(gpumem_unpin(buf + page, 4 * page));
  gpumem_pin_stats_t s = stats_now();
  assert_int_equal(s.registrations, 1);
  assert_int_equal(s.bytes_registered, 4 * page);
  assert_int_equal(s.bytes_pinned, 0);
  assert_int_equal(s.bytes_cached, 4 * page);
  assert_int_equal(s.misses - s0.misses, 1);
  assert_int_equal(s.hits - s0.hits, 0);
  assert_int_equal(query(buf + page, 4 * page), GPUMEM_PIN_NONE);
  assert_registration(buf + page, 4);

  assert_ok(gpumem_pin(buf + 2 * page + 100, 1000, 0));
  assert_int_equal(fake.register_calls(), calls + 1);
  s = stats_now();
  assert_int_equal(s.hits - s0.hits, 1);
  assert_int_equal(s.misses - s0.misses, 1);
  assert_int_equal(s.bytes_pinned, 4 * page); /* the whole registration is in use again */
  assert_int_equal(s.bytes_cached, 0);
  assert_int_equal(query(buf + 2 * page + 100, 1000), GPUMEM_PIN_FULL);
  assert_int_equal(query(buf + 2 * page + 99, 1000), GPUMEM_PIN_PARTIAL);

  assert_ok(gpumem_unpin(buf + 2 * page + 100, 1000));
  assert_int_equal(fake.unregister_calls(), uncalls);
  assert_int_equal(stats_now().evictions, s0.evictions);
  buffer_end(buf, 8);
  assert_int_equal(fake.unregister_calls(), uncalls + 1);
}

/* With a budget of 0 nothing is cached: the last unpin unregisters at once. */
static void test_pin_model_budget_zero_unregisters_at_last_unpin(void** state) {
  (void)state;
  char* buf = buffer_new(8);
  assert_ok(gpumem_pin_cache_set_budget(DEFAULT_BUDGET));
  assert_ok(gpumem_pin(buf + 4 * page, page, 0));
  assert_ok(gpumem_unpin(buf + 4 * page, page)); /* cached */
  const uint64_t evictions = stats_now().evictions;
  const size_t uncalls = fake.unregister_calls();

  assert_ok(gpumem_pin_cache_set_budget(0)); /* the cached one goes now */
  assert_int_equal(fake.unregister_calls(), uncalls + 1);
  assert_false(fake.is_registered(buf + 4 * page));
  assert_int_equal(stats_now().evictions, evictions + 1);
  assert_int_equal(stats_now().cache_budget, 0);

  assert_ok(gpumem_pin(buf + 10, 3 * page, 0));
  assert_ok(gpumem_pin(buf + 20, 10, 0));
  assert_ok(gpumem_unpin(buf + 10, 3 * page));
  assert_int_equal(fake.unregister_calls(), uncalls + 1);
  assert_registration(buf, 4);
  assert_ok(gpumem_unpin(buf + 20, 10));
  assert_int_equal(fake.unregister_calls(), uncalls + 2);
  assert_int_equal(fake.registration_count(), 0);
  const gpumem_pin_stats_t s = stats_now();
  assert_int_equal(s.registrations, 0);
  assert_int_equal(s.bytes_registered, 0);
  assert_int_equal(s.bytes_cached, 0);

  assert_ok(gpumem_pin_cache_set_budget(DEFAULT_BUDGET));
  buffer_end(buf, 8);
}

/* Over budget, the least recently used cached registrations go first; pinning one again makes it
 * the most recently used when it is cached again. */
static void test_pin_model_eviction_lru_order(void** state) {
  (void)state;
  char* buf = buffer_new(8);
  char* const a = buf;
  char* const b = buf + 2 * page;
  char* const c = buf + 4 * page;
  char* const d = buf + 6 * page;
  assert_ok(gpumem_pin_cache_set_budget(3 * page));
  const uint64_t evictions = stats_now().evictions;
  assert_ok(gpumem_pin(a, page, 0));
  assert_ok(gpumem_pin(b, page, 0));
  assert_ok(gpumem_pin(c, page, 0));
  assert_ok(gpumem_pin(d, page, 0));

  assert_ok(gpumem_unpin(b, page));
  assert_ok(gpumem_unpin(a, page));
  assert_ok(gpumem_unpin(d, page)); /* cached, oldest first: b a d; 3 pages, within the budget */
  assert_int_equal(fake.registration_count(), 4);
  assert_int_equal(stats_now().bytes_cached, 3 * page);
  assert_ok(gpumem_unpin(c, page)); /* 4 pages cached: b goes */
  assert_false(fake.is_registered(b));
  assert_true(fake.is_registered(a) && fake.is_registered(c) && fake.is_registered(d));
  assert_int_equal(stats_now().evictions, evictions + 1);

  assert_ok(gpumem_pin(a + 7, 1, 0)); /* a is used again: d c a */
  assert_ok(gpumem_unpin(a + 7, 1));
  assert_ok(gpumem_pin_cache_set_budget(page)); /* d and c go */
  assert_false(fake.is_registered(d));
  assert_false(fake.is_registered(c));
  assert_true(fake.is_registered(a));
  assert_int_equal(stats_now().evictions, evictions + 3);
  assert_int_equal(stats_now().bytes_cached, page);

  /* A registration bigger than the whole budget is not kept; a, used less recently, goes first. */
  assert_ok(gpumem_pin(b, 2 * page, 0));
  assert_ok(gpumem_unpin(b, 2 * page));
  assert_false(fake.is_registered(b));
  assert_false(fake.is_registered(a));
  assert_int_equal(stats_now().evictions, evictions + 5);
  assert_int_equal(stats_now().bytes_cached, 0);

  assert_ok(gpumem_pin_cache_set_budget(DEFAULT_BUDGET));
  buffer_end(buf, 8);
}

/* forget unregisters the cached registrations that touch the range, and refuses (changing nothing)
 * while a byte of the range, or of a registration that touches it, is pinned. */
static void test_pin_model_forget(void** state) {
  (void)state;
  char* buf = buffer_new(12);
  assert_ok(gpumem_pin_cache_set_budget(DEFAULT_BUDGET));
  assert_ok(gpumem_pin(buf, 3 * page, 0));
  assert_ok(gpumem_unpin(buf, 3 * page)); /* cached */
  assert_ok(gpumem_pin(buf + 4 * page, 2 * page, 0));
  assert_ok(gpumem_pin(buf + 8 * page, 10, 0));

  ledger_t* const before = &snap_before;
  ledger_t* const after = &snap_after;
  const gpumem_pin_stats_t s0 = stats_now();
  ledger_read(before);
  assert_status(gpumem_pin_forget(buf + 4 * page + 10, 1), GPUMEM_ERROR_BUSY);
  assert_detail_contains("is still pinned in part");
  assert_status(gpumem_pin_forget(buf + 2 * page, 3 * page), GPUMEM_ERROR_BUSY); /* takes in pinned bytes */
  assert_status(gpumem_pin_forget(buf + 8 * page + 100, 10), GPUMEM_ERROR_BUSY); /* its page is pinned */
  assert_detail_contains("also locks pinned memory outside it");
  ledger_read(after);
  assert_true(ledger_same(before, after));
  gpumem_pin_stats_t s = stats_now();
  assert_true(stats_same(&s0, &s));

  assert_ok(gpumem_pin_forget(buf + 3 * page, page)); /* touches no registration */
  assert_ok(gpumem_pin_forget(buf + 9 * page, 3 * page));
  ledger_read(after);
  assert_true(ledger_same(before, after));

  assert_ok(gpumem_pin_forget(buf + page + 5, 1)); /* touches the cached one */
  assert_int_equal(fake.unregister_calls(), before->unregister_calls + 1);
  assert_false(fake.is_registered(buf));
  assert_true(fake.is_registered(buf + 4 * page));
  assert_true(fake.is_registered(buf + 8 * page));
  s = stats_now();
  assert_int_equal(s.registrations, 2);
  assert_int_equal(s.bytes_cached, 0);
  assert_int_equal(s.evictions, s0.evictions);

  assert_ok(gpumem_unpin(buf + 8 * page, 10));
  assert_ok(gpumem_unpin(buf + 4 * page, 2 * page));
  assert_ok(gpumem_pin_forget(buf + 5 * page, 4 * page)); /* both, now cached */
  assert_int_equal(fake.registration_count(), 0);
  assert_int_equal(stats_now().bytes_registered, 0);
  buffer_end(buf, 12);
}

/* flush unregisters every cached registration and none that a pin still needs. */
static void test_pin_model_flush(void** state) {
  (void)state;
  char* buf = buffer_new(8);
  assert_ok(gpumem_pin_cache_set_budget(DEFAULT_BUDGET));
  assert_ok(gpumem_pin(buf, page, 0));
  assert_ok(gpumem_pin(buf + 2 * page, page, 0));
  assert_ok(gpumem_pin(buf + 4 * page, 2 * page, 0));
  assert_ok(gpumem_unpin(buf, page));
  assert_ok(gpumem_unpin(buf + 4 * page, 2 * page));
  const uint64_t evictions = stats_now().evictions;
  assert_ok(gpumem_pin_cache_flush());
  assert_int_equal(fake.registration_count(), 1);
  assert_true(fake.is_registered(buf + 2 * page));
  const gpumem_pin_stats_t s = stats_now();
  assert_int_equal(s.bytes_cached, 0);
  assert_int_equal(s.bytes_pinned, page);
  assert_int_equal(s.evictions, evictions);
  assert_ok(gpumem_unpin(buf + 2 * page, page));
  buffer_end(buf, 8);
}

/* Pins pages 0-7 of buf (of which 2 and 5 are pinned already: gaps 0-1, 3-4 and 6-7) while the
 * driver refuses the gap after `skip` good ones: the status is `status`, and the gaps registered
 * before the failure are unregistered again. */
static void assert_pin_fails_cleanly(char* buf, int skip, int code, gpumem_status_t status) {
  const gpumem_pin_stats_t s0 = stats_now();
  ledger_read(&snap_before);
  if (code) fake.fail_registers_after(skip, 1, code);
  assert_status(gpumem_pin(buf + 10, 8 * page - 20, 0), status);
  assert_int_equal(gpumem_last_cuda_result(), code ? code : CUDA_ERROR_INVALID_VALUE);
  assert_detail_contains("cuMemHostRegister");
  ledger_read(&snap_after);
  assert_true(ledger_same(&snap_before, &snap_after));
  assert_int_equal(snap_after.register_calls, snap_before.register_calls + (size_t)skip + 1);
  assert_int_equal(snap_after.unregister_calls, snap_before.unregister_calls + (size_t)skip);
  const gpumem_pin_stats_t s = stats_now();
  assert_true(stats_same(&s0, &s));
  assert_int_equal(query(buf, 2 * page), GPUMEM_PIN_NONE);
  assert_int_equal(query(buf + 2 * page, page), GPUMEM_PIN_FULL);
}

static char* two_pages_pinned(void) {
  char* buf = buffer_new(8);
  assert_ok(gpumem_pin(buf + 2 * page, page, 0));
  assert_ok(gpumem_pin(buf + 5 * page, page, 0));
  return buf;
}

/* After the failures the same pin succeeds, registering the three gaps. */
static void pin_after_failures(char* buf) {
  const size_t calls = fake.register_calls();
  assert_ok(gpumem_pin(buf, 8 * page, 0));
  assert_int_equal(fake.register_calls(), calls + 3);
  assert_int_equal(query(buf, 8 * page), GPUMEM_PIN_FULL);
  assert_ok(gpumem_unpin(buf, 8 * page));
  assert_ok(gpumem_unpin(buf + 2 * page, page));
  assert_ok(gpumem_unpin(buf + 5 * page, page));
  buffer_end(buf, 8);
}

/* A gap the driver refuses in the middle of a pin leaves nothing registered; the status is the one
 * for the driver's error. */
static void test_pin_model_register_failure_leaves_nothing(void** state) {
  (void)state;
  char* buf = two_pages_pinned();
  assert_pin_fails_cleanly(buf, 2, CUDA_ERROR_OUT_OF_MEMORY, GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_pin_fails_cleanly(buf, 1, CUDA_ERROR_OUT_OF_MEMORY, GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_pin_fails_cleanly(buf, 0, CUDA_ERROR_NOT_SUPPORTED, GPUMEM_ERROR_NOT_SUPPORTED);
  pin_after_failures(buf);
}

/* A range the driver refuses as an invalid value (memory that is not mapped) is an invalid argument,
 * as pin.h says, and leaves nothing registered. */
static void test_pin_model_unmapped_memory_refused(void** state) {
  (void)state;
  char* buf = two_pages_pinned();
  assert_pin_fails_cleanly(buf, 1, CUDA_ERROR_INVALID_VALUE, GPUMEM_ERROR_INVALID_ARGUMENT);
  fake.set_unmapped(buf + 7 * page + 1, 1); /* in the last gap */
  assert_pin_fails_cleanly(buf, 2, 0, GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("CUDA_ERROR_INVALID_VALUE");
  fake.set_unmapped(NULL, 0);
  pin_after_failures(buf);
}

/* Pages someone else registered (gpumem_host_register) are not the service's to pin: refused,
 * whether they begin the range, end it, lie inside it, or share only a page with it. */
static void test_pin_model_foreign_registration_refused(void** state) {
  (void)state;
  char* buf = buffer_new(12);
  assert_ok(gpumem_host_register(buf + 2 * page, 2 * page, 0));
  assert_ok(gpumem_host_register(buf + 8 * page + 100, 50, 0));
  ledger_t* const before = &snap_before;
  ledger_t* const after = &snap_after;
  ledger_read(before);
  const gpumem_pin_stats_t s0 = stats_now();
  const struct {
    size_t offset, size;
  } ranges[] = {
      {2 * page + 10, 10},          /* inside them */
      {0, 6 * page},                /* around them */
      {3 * page, 2 * page},         /* begins in them */
      {page, 2 * page},             /* ends in them */
      {8 * page + 200, page - 200}, /* the unaligned one's page, outside its bytes */
      {7 * page, 3 * page},         /* around the unaligned one */
  };
  for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; ++i) {
    assert_status(gpumem_pin(buf + ranges[i].offset, ranges[i].size, 0), GPUMEM_ERROR_INVALID_POINTER);
    assert_detail_contains("page-locked outside the pinning service");
    ledger_read(after);
    assert_int_equal(after->n, before->n);
    assert_int_equal(after->bytes, before->bytes);
  }
  gpumem_pin_stats_t s = stats_now();
  assert_true(stats_same(&s0, &s));

  assert_ok(gpumem_pin(buf, 2 * page, 0)); /* next to them: fine */
  assert_ok(gpumem_pin(buf + 4 * page, page, 0));
  assert_int_equal(query(buf, 6 * page), GPUMEM_PIN_PARTIAL);
  assert_ok(gpumem_unpin(buf, 2 * page));
  assert_ok(gpumem_unpin(buf + 4 * page, page));
  assert_ok(gpumem_host_unregister(buf + 2 * page));
  assert_ok(gpumem_host_unregister(buf + 8 * page + 100));
  /* The driver refuses the service what overlaps the foreign pages; the service may have asked. */
  refusals_expected = fake.overlap_refusals();
  buffer_end(buf, 12);
}

/* The service's registrations are not gpumem_host_register's: registering over them is refused. */
static void test_pin_model_host_register_over_pinned_refused(void** state) {
  (void)state;
  char* buf = buffer_new(4);
  assert_ok(gpumem_pin(buf + page, 2 * page, 0));
  const size_t count = fake.registration_count();
  assert_status(gpumem_host_register(buf + page, page, 0), GPUMEM_ERROR_ALREADY_REGISTERED);
  assert_status(gpumem_host_register(buf, 2 * page, 0), GPUMEM_ERROR_ALREADY_REGISTERED);
  assert_int_equal(fake.registration_count(), count);
  assert_ok(gpumem_unpin(buf + page, 2 * page));
  assert_status(gpumem_host_register(buf + 2 * page, page, 0), GPUMEM_ERROR_ALREADY_REGISTERED); /* cached */
  buffer_end(buf, 4);
}

/* Device and managed memory cannot be pinned; the driver is not asked. */
static void test_pin_model_managed_memory_refused(void** state) {
  (void)state;
  char* managed = fake.managed_address();
  const size_t calls = fake.register_calls();
  const gpumem_pin_stats_t s0 = stats_now();
  assert_status(gpumem_pin(managed, 4096, 0), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("managed memory");
  assert_status(gpumem_pin(managed + 4096 + 3, 10, 0), GPUMEM_ERROR_INVALID_POINTER);
  assert_int_equal(fake.register_calls(), calls);
  assert_int_equal(fake.registration_count(), 0);
  const gpumem_pin_stats_t s = stats_now();
  assert_true(stats_same(&s0, &s));
  assert_int_equal(query(managed, 4096), GPUMEM_PIN_NONE);
  assert_status(gpumem_unpin(managed, 4096), GPUMEM_ERROR_NOT_OWNED);
}

/* Bad arguments to every function: INVALID_ARGUMENT, outputs cleared, nothing changed. */
static void test_pin_model_bad_input(void** state) {
  (void)state;
  char* buf = buffer_new(2);
  assert_ok(gpumem_pin(buf, page, 0));
  ledger_t* const before = &snap_before;
  ledger_t* const after = &snap_after;
  ledger_read(before);
  const gpumem_pin_stats_t s0 = stats_now();
  char* const top = (char*)(UINTPTR_MAX - 99);

  assert_status(gpumem_pin(NULL, 1, 0), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("ptr is NULL");
  assert_status(gpumem_pin(buf, 0, 0), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("size is 0");
  assert_status(gpumem_pin(top, 100, 0), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("wraps around");
  assert_status(gpumem_pin(buf, 1, 1), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("flags");
  assert_status(gpumem_pin(buf, 1, 0x80000000u), GPUMEM_ERROR_INVALID_ARGUMENT);

  assert_status(gpumem_unpin(NULL, 1), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("ptr is NULL");
  assert_status(gpumem_unpin(buf, 0), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("size is 0");
  assert_status(gpumem_unpin(top, 100), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("wraps around");

  int32_t state_out = 7;
  assert_status(gpumem_pin_query(NULL, 1, &state_out), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_int_equal(state_out, GPUMEM_PIN_NONE);
  state_out = 7;
  assert_status(gpumem_pin_query(buf, 0, &state_out), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_int_equal(state_out, GPUMEM_PIN_NONE);
  state_out = 7;
  assert_status(gpumem_pin_query(top, 100, &state_out), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_int_equal(state_out, GPUMEM_PIN_NONE);
  assert_status(gpumem_pin_query(buf, 1, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_state is NULL");
  assert_status(gpumem_pin_query(top, 99, &state_out), GPUMEM_SUCCESS); /* up to the last byte: fine */
  assert_int_equal(state_out, GPUMEM_PIN_NONE);

  assert_status(gpumem_pin_forget(NULL, 1), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_status(gpumem_pin_forget(buf, 0), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_status(gpumem_pin_forget(top, 100), GPUMEM_ERROR_INVALID_ARGUMENT);

  assert_status(gpumem_pin_get_stats(NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_stats is NULL");
  gpumem_pin_stats_t s;
  memset(&s, 0xa5, sizeof s);
  s.struct_size = sizeof s - sizeof(uint64_t);
  assert_status(gpumem_pin_get_stats(&s), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_stats->struct_size is");
  assert_int_equal(s.struct_size, sizeof s - sizeof(uint64_t));
  assert_int_equal(s.bytes_registered, 0);
  assert_int_equal(s.evictions, 0);
  assert_int_equal(s.cache_budget, 0xa5a5a5a5a5a5a5a5ULL); /* beyond struct_size: untouched */
  memset(&s, 0xa5, sizeof s);
  s.struct_size = 0;
  assert_status(gpumem_pin_get_stats(&s), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_int_equal(s.struct_size, 0);
  assert_int_equal(s.pins, 0xa5a5a5a5a5a5a5a5ULL);
  s.struct_size = (size_t)1 << 20;
  assert_status(gpumem_pin_get_stats(&s), GPUMEM_ERROR_INVALID_ARGUMENT);

  /* A newer caller's bigger struct: filled, the unknown tail zeroed. */
  struct {
    gpumem_pin_stats_t stats;
    uint64_t newer[2];
  } bigger;
  memset(&bigger, 0xa5, sizeof bigger);
  bigger.stats.struct_size = sizeof bigger;
  assert_ok(gpumem_pin_get_stats(&bigger.stats));
  assert_int_equal(bigger.stats.struct_size, sizeof bigger);
  assert_int_equal(bigger.stats.registrations, s0.registrations);
  assert_int_equal(bigger.newer[0], 0);
  assert_int_equal(bigger.newer[1], 0);

  ledger_read(after);
  assert_true(ledger_same(before, after));
  assert_int_equal(after->register_calls, before->register_calls);
  assert_int_equal(after->unregister_calls, before->unregister_calls);
  const gpumem_pin_stats_t s1 = stats_now();
  assert_true(stats_same(&s0, &s1));
  assert_ok(gpumem_unpin(buf, page));
  buffer_end(buf, 2);
}

/* ---- The random sequence against the model ---------------------------------------------------------- */

#define MODEL_PAGES 256
#define MODEL_STEPS 6000
#define LIVE_MAX 512

/* Per byte of the buffer, how many pins cover it; per page, how many of its bytes are pinned. */
typedef struct {
  char* base;
  size_t size, pages, pinned_pages;
  uint16_t* count;
  uint32_t* pinned_in_page;
} model_t;

typedef struct {
  size_t offset, size;
} range_t;

static uint64_t rng_state;
static uint64_t rng(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static size_t rng_below(size_t n) { return n ? (size_t)(rng() % n) : 0; }

/* What the sequence is doing, for failure messages. */
static char step[200];

#define EXPECT(cond)                                \
  do {                                              \
    if (!(cond)) {                                  \
      print_error("%s: failed: %s\n", step, #cond); \
      fail();                                       \
    }                                               \
  } while (0)
#define EXPECT_EQ(a, b)                                                                  \
  do {                                                                                   \
    const unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b); \
    if (a_ != b_) {                                                                      \
      print_error("%s: %s is %llu, expected %s = %llu\n", step, #a, a_, #b, b_);         \
      fail();                                                                            \
    }                                                                                    \
  } while (0)
#define EXPECT_STATUS(call, want)                                                                         \
  do {                                                                                                    \
    const gpumem_status_t got_ = (call), want_ = (want);                                                  \
    if (got_ != want_) {                                                                                  \
      print_error("%s: %s returned %s, expected %s; detail: %s\n", step, #call, gpumem_status_name(got_), \
                  gpumem_status_name(want_), gpumem_last_error_detail());                                 \
      fail();                                                                                             \
    }                                                                                                     \
  } while (0)

static int32_t model_query(const model_t* m, size_t offset, size_t size) {
  bool pinned = false, unpinned = false;
  for (size_t i = offset; i < offset + size && !(pinned && unpinned); ++i) {
    if (m->count[i])
      pinned = true;
    else
      unpinned = true;
  }
  return pinned && unpinned ? GPUMEM_PIN_PARTIAL : pinned ? GPUMEM_PIN_FULL : GPUMEM_PIN_NONE;
}

static void model_add(model_t* m, size_t offset, size_t size, int delta) {
  for (size_t i = offset; i < offset + size; ++i) {
    const uint16_t before = m->count[i];
    EXPECT(delta > 0 ? before < UINT16_MAX : before > 0);
    m->count[i] = (uint16_t)(before + delta);
    if (before == 0 && m->pinned_in_page[i / page]++ == 0) ++m->pinned_pages;
    if (m->count[i] == 0 && --m->pinned_in_page[i / page] == 0) --m->pinned_pages;
  }
}

/* Whether the page-aligned registration [start, start + size) holds a pinned byte. */
static bool model_registration_pinned(const model_t* m, uintptr_t start, size_t size) {
  const size_t first = (start - (uintptr_t)m->base) / page;
  for (size_t i = first; i < first + size / page; ++i)
    if (m->pinned_in_page[i]) return true;
  return false;
}

/* The page-aligned stretches of [offset, offset + size)'s pages that no registration in l covers. */
static size_t model_gaps(const model_t* m, const ledger_t* l, size_t offset, size_t size, range_t* gaps) {
  uintptr_t at = (uintptr_t)m->base + offset / page * page;
  const uintptr_t end = (uintptr_t)m->base + (offset + size + page - 1) / page * page;
  size_t n = 0;
  for (size_t i = 0; i < l->n && at < end; ++i) {
    const uintptr_t rs = l->start[i], re = rs + l->size[i];
    if (re <= at) continue;
    if (rs >= end) break;
    if (rs > at) gaps[n++] = (range_t){at - (uintptr_t)m->base, rs - at};
    at = re;
  }
  if (at < end) gaps[n++] = (range_t){at - (uintptr_t)m->base, end - at};
  return n;
}

/* What holds after every step: the ledger agrees with the model and the statistics. */
static void model_check(const model_t* m, const ledger_t* l, const gpumem_pin_stats_t* s) {
  static bool registered_page[MODEL_PAGES * 16];
  EXPECT(m->pages <= sizeof registered_page);
  memset(registered_page, 0, m->pages);
  EXPECT_EQ(l->refusals, refusals_expected);
  EXPECT_EQ(fake.context_depth(), 0);
  uint64_t pinned = 0, cached = 0;
  for (size_t i = 0; i < l->n; ++i) {
    const uintptr_t start = l->start[i];
    EXPECT(start % page == 0 && l->size[i] % page == 0 && l->size[i] > 0);
    EXPECT(start >= (uintptr_t)m->base && start + l->size[i] <= (uintptr_t)m->base + m->size);
    for (size_t p = (start - (uintptr_t)m->base) / page; p < (start + l->size[i] - (uintptr_t)m->base) / page; ++p)
      registered_page[p] = true;
    if (model_registration_pinned(m, start, l->size[i]))
      pinned += l->size[i];
    else
      cached += l->size[i];
  }
  for (size_t p = 0; p < m->pages; ++p)
    if (m->pinned_in_page[p] && !registered_page[p]) {
      print_error("%s: page %zu holds %u pinned bytes and is not registered\n", step, p,
                  (unsigned)m->pinned_in_page[p]);
      fail();
    }
  EXPECT_EQ(s->registrations, l->n);
  EXPECT_EQ(s->bytes_registered, l->bytes);
  EXPECT_EQ(s->bytes_pinned, pinned);
  EXPECT_EQ(s->bytes_cached, cached);
  EXPECT(s->bytes_cached <= s->cache_budget);
  EXPECT_EQ(s->hits + s->misses, s->pins);
}

/* The registrations of `before` missing from `after`, all of which must hold no pinned byte; their
 * largest size in *largest. Nothing may have been added. */
static size_t model_removed(const model_t* m, const ledger_t* before, const ledger_t* after, size_t* largest) {
  size_t removed = 0;
  *largest = 0;
  for (size_t i = 0; i < after->n; ++i) EXPECT(ledger_find(before, after->start[i], after->size[i]) >= 0);
  for (size_t i = 0; i < before->n; ++i)
    if (ledger_find(after, before->start[i], before->size[i]) < 0) {
      EXPECT(!model_registration_pinned(m, before->start[i], before->size[i]));
      ++removed;
      if (before->size[i] > *largest) *largest = before->size[i];
    }
  EXPECT_EQ(after->n, before->n - removed);
  return removed;
}

typedef struct {
  model_t m;
  ledger_t before, after;
  range_t live[LIVE_MAX];
  size_t live_n;
  range_t gaps[MODEL_PAGES];
  /* How often each outcome came up, so that a sequence that tests nothing fails. */
  unsigned long pins, hits, misses, unpins, not_owned, evicting_unpins, forgets, forgets_busy, forgets_removing,
      flushes, budgets, queries;
} run_t;

static void run_pin(run_t* r, range_t x) {
  model_t* m = &r->m;
  snprintf(step + strlen(step), sizeof step - strlen(step), ": pin %zu + %zu", x.offset, x.size);
  ledger_read(&r->before);
  const gpumem_pin_stats_t s0 = stats_now();
  const size_t n = model_gaps(m, &r->before, x.offset, x.size, r->gaps);
  EXPECT_STATUS(gpumem_pin(m->base + x.offset, x.size, 0), GPUMEM_SUCCESS);
  model_add(m, x.offset, x.size, +1);
  ledger_read(&r->after);
  const gpumem_pin_stats_t s = stats_now();
  EXPECT_EQ(r->after.register_calls, r->before.register_calls + n);
  EXPECT_EQ(r->after.unregister_calls, r->before.unregister_calls);
  EXPECT_EQ(r->after.n, r->before.n + n);
  for (size_t i = 0; i < r->before.n; ++i) EXPECT(ledger_find(&r->after, r->before.start[i], r->before.size[i]) >= 0);
  for (size_t i = 0; i < n; ++i) {
    EXPECT(ledger_find(&r->after, (uintptr_t)m->base + r->gaps[i].offset, r->gaps[i].size) >= 0);
    EXPECT(fake.registration_flags(m->base + r->gaps[i].offset) & CU_MEMHOSTREGISTER_PORTABLE);
  }
  EXPECT_EQ(s.pins, s0.pins + 1);
  EXPECT_EQ(s.hits, s0.hits + (n == 0));
  EXPECT_EQ(s.misses, s0.misses + (n != 0));
  EXPECT_EQ(s.unpins, s0.unpins);
  EXPECT_EQ(s.evictions, s0.evictions);
  model_check(m, &r->after, &s);
  if (r->live_n < LIVE_MAX) r->live[r->live_n++] = x;
  ++r->pins;
  n ? ++r->misses : ++r->hits;
}

/* Returns whether the unpin succeeded. */
static bool run_unpin(run_t* r, range_t x) {
  model_t* m = &r->m;
  snprintf(step + strlen(step), sizeof step - strlen(step), ": unpin %zu + %zu", x.offset, x.size);
  ledger_read(&r->before);
  const gpumem_pin_stats_t s0 = stats_now();
  bool owned = true;
  for (size_t i = x.offset; i < x.offset + x.size && owned; ++i) owned = m->count[i] > 0;
  const gpumem_status_t status = gpumem_unpin(m->base + x.offset, x.size);
  ledger_read(&r->after);
  const gpumem_pin_stats_t s = stats_now();
  if (!owned) {
    EXPECT_STATUS(status, GPUMEM_ERROR_NOT_OWNED);
    EXPECT(ledger_same(&r->before, &r->after));
    EXPECT_EQ(r->after.register_calls, r->before.register_calls);
    EXPECT_EQ(r->after.unregister_calls, r->before.unregister_calls);
    EXPECT(stats_same(&s0, &s));
    model_check(m, &r->after, &s);
    ++r->not_owned;
    return false;
  }
  EXPECT_STATUS(status, GPUMEM_SUCCESS);
  model_add(m, x.offset, x.size, -1);
  size_t largest = 0;
  const size_t removed = model_removed(m, &r->before, &r->after, &largest);
  EXPECT_EQ(r->after.register_calls, r->before.register_calls);
  EXPECT_EQ(r->after.unregister_calls, r->before.unregister_calls + removed);
  EXPECT_EQ(s.evictions, s0.evictions + removed);
  /* Evicted only to get within the budget: before the last eviction the cache was over it. */
  if (removed) EXPECT(s.bytes_cached + largest > s.cache_budget);
  EXPECT_EQ(s.unpins, s0.unpins + 1);
  EXPECT_EQ(s.pins, s0.pins);
  model_check(m, &r->after, &s);
  ++r->unpins;
  if (removed) ++r->evicting_unpins;
  return true;
}

static void run_query(run_t* r, range_t x) {
  snprintf(step + strlen(step), sizeof step - strlen(step), ": query %zu + %zu", x.offset, x.size);
  int32_t state = -1;
  EXPECT_STATUS(gpumem_pin_query(r->m.base + x.offset, x.size, &state), GPUMEM_SUCCESS);
  EXPECT_EQ(state, model_query(&r->m, x.offset, x.size));
  ++r->queries;
}

static void run_forget(run_t* r, range_t x) {
  model_t* m = &r->m;
  snprintf(step + strlen(step), sizeof step - strlen(step), ": forget %zu + %zu", x.offset, x.size);
  ledger_read(&r->before);
  const gpumem_pin_stats_t s0 = stats_now();
  const uintptr_t start = (uintptr_t)m->base + x.offset, end = start + x.size;
  bool busy = model_query(m, x.offset, x.size) != GPUMEM_PIN_NONE;
  size_t touching = 0;
  for (size_t i = 0; i < r->before.n; ++i)
    if (r->before.start[i] < end && start < r->before.start[i] + r->before.size[i]) {
      ++touching;
      busy = busy || model_registration_pinned(m, r->before.start[i], r->before.size[i]);
    }
  const gpumem_status_t status = gpumem_pin_forget(m->base + x.offset, x.size);
  ledger_read(&r->after);
  const gpumem_pin_stats_t s = stats_now();
  if (busy) {
    EXPECT_STATUS(status, GPUMEM_ERROR_BUSY);
    EXPECT(ledger_same(&r->before, &r->after));
    EXPECT(stats_same(&s0, &s));
    ++r->forgets_busy;
  } else {
    EXPECT_STATUS(status, GPUMEM_SUCCESS);
    size_t largest = 0;
    EXPECT_EQ(model_removed(m, &r->before, &r->after, &largest), touching);
    for (size_t i = 0; i < r->after.n; ++i)
      EXPECT(!(r->after.start[i] < end && start < r->after.start[i] + r->after.size[i]));
    EXPECT_EQ(r->after.unregister_calls, r->before.unregister_calls + touching);
    EXPECT_EQ(s.evictions, s0.evictions);
    ++r->forgets;
    if (touching) ++r->forgets_removing;
  }
  EXPECT_EQ(r->after.register_calls, r->before.register_calls);
  model_check(m, &r->after, &s);
}

static void run_flush(run_t* r) {
  model_t* m = &r->m;
  snprintf(step + strlen(step), sizeof step - strlen(step), ": flush");
  ledger_read(&r->before);
  const gpumem_pin_stats_t s0 = stats_now();
  EXPECT_STATUS(gpumem_pin_cache_flush(), GPUMEM_SUCCESS);
  ledger_read(&r->after);
  const gpumem_pin_stats_t s = stats_now();
  size_t largest = 0;
  const size_t removed = model_removed(m, &r->before, &r->after, &largest);
  for (size_t i = 0; i < r->after.n; ++i) EXPECT(model_registration_pinned(m, r->after.start[i], r->after.size[i]));
  EXPECT_EQ(r->after.unregister_calls, r->before.unregister_calls + removed);
  EXPECT_EQ(s.bytes_cached, 0);
  EXPECT_EQ(s.evictions, s0.evictions);
  model_check(m, &r->after, &s);
  ++r->flushes;
}

static void run_set_budget(run_t* r, uint64_t budget) {
  model_t* m = &r->m;
  snprintf(step + strlen(step), sizeof step - strlen(step), ": budget %llu", (unsigned long long)budget);
  ledger_read(&r->before);
  const gpumem_pin_stats_t s0 = stats_now();
  EXPECT_STATUS(gpumem_pin_cache_set_budget(budget), GPUMEM_SUCCESS);
  ledger_read(&r->after);
  const gpumem_pin_stats_t s = stats_now();
  size_t largest = 0;
  const size_t removed = model_removed(m, &r->before, &r->after, &largest);
  EXPECT_EQ(s.cache_budget, budget);
  EXPECT_EQ(r->after.unregister_calls, r->before.unregister_calls + removed);
  EXPECT_EQ(s.evictions, s0.evictions + removed);
  if (removed) EXPECT(s.bytes_cached + largest > budget);
  model_check(m, &r->after, &s);
  ++r->budgets;
}

/* Sizes from one byte to 32 pages, mostly small. */
static size_t random_size(void) {
  const size_t kind = rng_below(100);
  if (kind < 25) return 1 + rng_below(16);
  if (kind < 55) return 1 + rng_below(page);
  if (kind < 85) return 1 + rng_below(4 * page);
  return 1 + rng_below(32 * page);
}

static range_t clamp(const model_t* m, size_t offset, size_t size) {
  if (offset >= m->size) offset = m->size - 1;
  if (size > m->size - offset) size = m->size - offset;
  return (range_t){offset, size ? size : 1};
}

static range_t random_range(const model_t* m) { return clamp(m, rng_below(m->size), random_size()); }

/* A range related to a live pin: the same start with another size, inside it, overlapping it, or
 * next to it on either side; or else anywhere. */
static range_t related_range(const run_t* r) {
  const model_t* m = &r->m;
  if (r->live_n == 0) return random_range(m);
  const range_t l = r->live[rng_below(r->live_n)];
  switch (rng_below(6)) {
    case 0:
      return clamp(m, l.offset, random_size());
    case 1: {
      const size_t offset = l.offset + rng_below(l.size);
      return clamp(m, offset, 1 + rng_below(l.offset + l.size - offset));
    }
    case 2:
      return clamp(m, l.offset + rng_below(l.size), random_size());
    case 3:
      return l.offset + l.size < m->size ? clamp(m, l.offset + l.size, random_size()) : random_range(m);
    case 4: {
      if (l.offset == 0) return random_range(m);
      const size_t size = 1 + rng_below(l.offset < 4 * page ? l.offset : 4 * page);
      return (range_t){l.offset - size, size};
    }
    default: {
      const size_t offset = l.offset > page ? l.offset - 1 - rng_below(page) : 0;
      return clamp(m, offset, l.offset + l.size - offset + rng_below(page));
    }
  }
}

/* A range that starts in a registration (a cached one when there is one), for forgets that find
 * something to forget. */
static range_t registered_range(run_t* r) {
  ledger_read(&r->before);
  size_t cached[MAX_REGISTRATIONS], n = 0;
  for (size_t i = 0; i < r->before.n; ++i)
    if (!model_registration_pinned(&r->m, r->before.start[i], r->before.size[i])) cached[n++] = i;
  if (r->before.n == 0) return random_range(&r->m);
  const size_t i = n ? cached[rng_below(n)] : rng_below(r->before.n);
  const size_t start = r->before.start[i] - (uintptr_t)r->m.base, offset = start + rng_below(r->before.size[i]);
  return clamp(&r->m, offset, 1 + rng_below(rng_below(4) ? start + r->before.size[i] - offset : 2 * page));
}

static uint64_t random_budget(void) {
  const uint64_t budgets[] = {0, 1, page - 1, page, 3 * page, 8 * page, 24 * page, 64 * page, DEFAULT_BUDGET};
  return budgets[rng_below(sizeof budgets / sizeof budgets[0])];
}

static void test_pin_model_random_sequence(void** state) {
  (void)state;
  const char* seed_text = getenv("GPUMEM_TEST_SEED");
  const uint64_t seed = seed_text && *seed_text ? strtoull(seed_text, NULL, 0) : 20240611;
  rng_state = seed;
  static run_t run;
  run_t* const r = &run;
  memset(r, 0, sizeof *r);
  model_t* const m = &r->m;
  m->pages = MODEL_PAGES;
  m->size = MODEL_PAGES * page;
  m->base = buffer_new(MODEL_PAGES);
  m->count = model_count = calloc(m->size, sizeof *m->count);
  m->pinned_in_page = model_pinned_in_page = calloc(m->pages, sizeof *m->pinned_in_page);
  assert_non_null(m->count);
  assert_non_null(m->pinned_in_page);
  snprintf(step, sizeof step, "seed %llu, start", (unsigned long long)seed);
  run_set_budget(r, 24 * page);

  for (int i = 0; i < MODEL_STEPS; ++i) {
    snprintf(step, sizeof step, "seed %llu, step %d", (unsigned long long)seed, i);
    /* Fewer pins while over 40% of the pages hold pinned bytes, so that the buffer keeps room for
     * misses, evictions and forgets. */
    const size_t op = rng_below(100), pins = m->pinned_pages * 5 > m->pages * 2 ? 12 : 40;
    if (op < pins) {
      run_pin(r, rng_below(2) ? related_range(r) : random_range(m));
    } else if (op < 68) {
      const size_t kind = rng_below(100);
      if (kind < 45 && r->live_n > 0) { /* a pin of its own: balanced, unless part was unpinned */
        const size_t k = rng_below(r->live_n);
        const range_t l = r->live[k];
        r->live[k] = r->live[--r->live_n];
        run_unpin(r, l);
      } else if (kind < 60 && r->live_n > 0) { /* part of one */
        const range_t l = r->live[rng_below(r->live_n)];
        const size_t offset = l.offset + rng_below(l.size);
        run_unpin(r, (range_t){offset, 1 + rng_below(l.offset + l.size - offset)});
      } else if (kind < 80 && m->pinned_pages) { /* a run of pinned bytes, whatever pinned them, or part of it */
        size_t at = rng_below(m->size);
        while (m->count[at] == 0) at = (at + 1) % m->size;
        size_t start = at, end = at;
        while (start > 0 && m->count[start - 1]) --start;
        while (end < m->size && m->count[end]) ++end;
        run_unpin(r, rng_below(3) ? (range_t){start, end - start} : (range_t){at, 1 + rng_below(end - at)});
      } else if (kind < 92) {
        run_unpin(r, related_range(r));
      } else {
        run_unpin(r, random_range(m));
      }
    } else if (op < 80) {
      run_query(r, rng_below(2) ? related_range(r) : random_range(m));
    } else if (op < 88) {
      run_forget(r, rng_below(3) ? registered_range(r) : random_range(m));
    } else if (op < 91) {
      run_flush(r);
    } else if (op < 96) {
      run_set_budget(r, random_budget());
    } else {
      run_query(r, clamp(m, rng_below(m->size), rng_below(m->size)));
    }
  }

  /* Unpin everything, run by run of pinned bytes, then flush: nothing remains. */
  snprintf(step, sizeof step, "seed %llu, unpinning the rest", (unsigned long long)seed);
  for (bool any = true; any;) {
    any = false;
    for (size_t i = 0; i < m->size;) {
      if (m->count[i] == 0) {
        ++i;
        continue;
      }
      size_t end = i;
      while (end < m->size && m->count[end] > 0) ++end;
      snprintf(step, sizeof step, "seed %llu, unpinning the rest", (unsigned long long)seed);
      EXPECT(run_unpin(r, (range_t){i, end - i}));
      any = true;
      i = end;
    }
  }
  snprintf(step, sizeof step, "seed %llu, end", (unsigned long long)seed);
  run_query(r, (range_t){0, m->size});
  run_flush(r);
  EXPECT_EQ(fake.registration_count(), 0);
  const gpumem_pin_stats_t s = stats_now();
  EXPECT_EQ(s.registrations, 0);
  EXPECT_EQ(s.bytes_registered, 0);
  EXPECT_EQ(s.bytes_pinned, 0);
  EXPECT_EQ(s.bytes_cached, 0);

  print_message(
      "seed %llu: %lu pins (%lu hits, %lu misses), %lu unpins (%lu evicting), %lu not owned, %lu forgets "
      "(%lu unregistering), %lu busy, %lu flushes, %lu budgets, %lu queries\n",
      (unsigned long long)seed, r->pins, r->hits, r->misses, r->unpins, r->evicting_unpins, r->not_owned, r->forgets,
      r->forgets_removing, r->forgets_busy, r->flushes, r->budgets, r->queries);
  /* The sequence reached every case. */
  assert_true(r->hits > 300 && r->misses > 200);
  assert_true(r->evicting_unpins > 50 && r->not_owned > 200);
  assert_true(r->forgets_removing > 30 && r->forgets_busy > 100);

  assert_ok(gpumem_pin_cache_set_budget(DEFAULT_BUDGET));
  buffer_end(m->base, MODEL_PAGES);
}

/* The service's registrations are its own: gpumem_host_unregister refuses them. Last, since a
 * library that lets it through leaves the service with a registration the driver no longer has. */
static void test_pin_model_host_unregister_refuses_pinned(void** state) {
  (void)state;
  char* buf = buffer_new(4);
  assert_ok(gpumem_pin(buf + page, page, 0));
  assert_status(gpumem_host_unregister(buf + page), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("registered by the pinning service");
  assert_true(fake.is_registered(buf + page));
  assert_ok(gpumem_unpin(buf + page, page));
  assert_status(gpumem_host_unregister(buf + page), GPUMEM_ERROR_INVALID_POINTER); /* cached */
  assert_true(fake.is_registered(buf + page));
  buffer_end(buf, 4);
}

/* ---- Threads ------------------------------------------------------------------------------------- */

#define THREADS 8
#define THREAD_ITERATIONS 1500
#define THREAD_STRIDE 6 /* pages between threads' ranges, which are 8 to 12 pages long: neighbours overlap */
#define THREAD_PAGES (THREADS * THREAD_STRIDE + 16)

typedef struct {
  int id;
  char* base;
  uint64_t rng;
  unsigned long pins, unpins, failures, busy;
  char first_failure[256];
} worker_t;

static uint64_t worker_rng(worker_t* w) {
  uint64_t z = (w->rng += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

#define WORKER_CHECK(w, cond, ...)                                                                   \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      if ((w)->failures++ == 0) snprintf((w)->first_failure, sizeof(w)->first_failure, __VA_ARGS__); \
    }                                                                                                \
  } while (0)

/* Pins a range, checks that every page of it stays registered while pinned, and unpins it. */
static void worker_pin_unpin(worker_t* w, char* p, size_t size, int nested) {
  gpumem_status_t status = gpumem_pin(p, size, 0);
  WORKER_CHECK(w, status == GPUMEM_SUCCESS, "pin %p + %zu: %s: %s", (void*)p, size, gpumem_status_name(status),
               gpumem_last_error_detail());
  if (status != GPUMEM_SUCCESS) return;
  ++w->pins;
  int32_t state = -1;
  status = gpumem_pin_query(p, size, &state);
  WORKER_CHECK(w, status == GPUMEM_SUCCESS && state == GPUMEM_PIN_FULL, "query %p + %zu while pinned: %s, state %d",
               (void*)p, size, gpumem_status_name(status), (int)state);
  for (uintptr_t at = (uintptr_t)p / page * page; at < (uintptr_t)p + size; at += page)
    WORKER_CHECK(w, fake.is_registered((void*)at), "page %p of pinned %p + %zu is not registered", (void*)at, (void*)p,
                 size);
  if (nested) worker_pin_unpin(w, p + size / 3, size / 3 + 1, 0);
  status = gpumem_unpin(p, size);
  WORKER_CHECK(w, status == GPUMEM_SUCCESS, "unpin %p + %zu: %s: %s", (void*)p, size, gpumem_status_name(status),
               gpumem_last_error_detail());
  if (status == GPUMEM_SUCCESS) ++w->unpins;
}

static void* worker(void* arg) {
  worker_t* w = arg;
  char* const own = w->base + (size_t)w->id * THREAD_STRIDE * page;
  for (int i = 0; i < THREAD_ITERATIONS; ++i) {
    const uint64_t x = worker_rng(w);
    switch (x % 8) {
      case 0:
      case 1: /* the range every thread pins */
        worker_pin_unpin(w, w->base + 100, 8 * page, x % 16 < 4);
        break;
      case 2:
      case 3:
      case 4: /* its own range, overlapping its neighbours' */
        worker_pin_unpin(w, own + (x >> 8) % page, 8 * page + (x >> 20) % (4 * page), x % 16 < 6);
        break;
      case 5:
      case 6: /* a few bytes somewhere in its stretch */
        worker_pin_unpin(w, own + (x >> 8) % (12 * page), 1 + (x >> 32) % 64, 0);
        break;
      default: /* the cache, under everyone's feet */
        if (w->id == 0) {
          const gpumem_status_t status = gpumem_pin_cache_flush();
          WORKER_CHECK(w, status == GPUMEM_SUCCESS, "flush: %s", gpumem_status_name(status));
        } else if (w->id == 1) {
          const uint64_t budgets[] = {0, 4 * page, DEFAULT_BUDGET};
          const gpumem_status_t status = gpumem_pin_cache_set_budget(budgets[(x >> 8) % 3]);
          WORKER_CHECK(w, status == GPUMEM_SUCCESS, "set_budget: %s", gpumem_status_name(status));
        } else {
          const gpumem_status_t status =
              gpumem_pin_forget(w->base + (x >> 8) % (THREAD_PAGES * page), 1 + (x >> 40) % (2 * page));
          WORKER_CHECK(w, status == GPUMEM_SUCCESS || status == GPUMEM_ERROR_BUSY, "forget: %s: %s",
                       gpumem_status_name(status), gpumem_last_error_detail());
          if (status == GPUMEM_ERROR_BUSY) ++w->busy;
        }
    }
  }
  WORKER_CHECK(w, fake.context_depth() == 0, "%d contexts left pushed", fake.context_depth());
  return NULL;
}

/* Threads pin and unpin the same and neighbouring ranges while others flush, forget and change the
 * budget: every pinned page stays registered, the driver never sees an overlapping registration,
 * and at the end the counts balance and nothing is left registered. */
static void test_threads_pin_model_balanced(void** state) {
  (void)state;
  char* buf = buffer_new(THREAD_PAGES);
  fake.set_call_delay(20);
  const gpumem_pin_stats_t s0 = stats_now();
  worker_t workers[THREADS];
  pthread_t threads[THREADS];
  unsigned long pins = 0, unpins = 0, failures = 0, busy = 0;
  /* A forget meets another thread's pin only when the threads really run at once, which a loaded
   * machine with few cores may not give in one round: rounds go on until one has. */
  for (int round = 0; round < 20 && busy == 0; ++round) {
    for (int i = 0; i < THREADS; ++i) {
      memset(&workers[i], 0, sizeof workers[i]);
      workers[i].id = i;
      workers[i].base = buf;
      workers[i].rng = 0x5eed0000u + (uint64_t)i + 0x100u * (uint64_t)round;
      assert_int_equal(pthread_create(&threads[i], NULL, worker, &workers[i]), 0);
    }
    for (int i = 0; i < THREADS; ++i) {
      assert_int_equal(pthread_join(threads[i], NULL), 0);
      if (workers[i].failures)
        print_error("thread %d: %lu failures, first: %s\n", i, workers[i].failures, workers[i].first_failure);
      pins += workers[i].pins;
      unpins += workers[i].unpins;
      failures += workers[i].failures;
      busy += workers[i].busy;
    }
  }
  fake.set_call_delay(0);
  assert_ok(gpumem_pin_cache_set_budget(DEFAULT_BUDGET)); /* worker 1 left whichever budget it set last */
  print_message("%lu pins, %lu unpins, %lu busy forgets\n", pins, unpins, busy);
  assert_int_equal(failures, 0);
  assert_int_equal(pins, unpins);
  assert_true(busy > 0);
  assert_int_equal(fake.overlap_refusals(), 0);
  const gpumem_pin_stats_t s = stats_now();
  assert_int_equal(s.pins - s0.pins, pins);
  assert_int_equal(s.unpins - s0.unpins, unpins);
  assert_int_equal(s.hits + s.misses - s0.hits - s0.misses, pins);
  assert_int_equal(s.bytes_pinned, 0);
  assert_int_equal(s.bytes_cached, s.bytes_registered);
  assert_int_equal(s.bytes_registered, fake.registered_bytes());
  assert_int_equal(s.registrations, fake.registration_count());
  assert_int_equal(query(buf, THREAD_PAGES * page), GPUMEM_PIN_NONE);
  assert_ok(gpumem_pin_cache_flush());
  assert_int_equal(fake.registration_count(), 0);
  assert_int_equal(stats_now().bytes_registered, 0);
  buffer_end(buf, THREAD_PAGES);
}

typedef struct {
  char* p;
  size_t size;
  gpumem_status_t status;
} pin_job_t;

static void* pin_job(void* arg) {
  pin_job_t* job = arg;
  job->status = gpumem_pin(job->p, job->size, 0);
  return NULL;
}

/* A forget beside a pin in flight must not take away a cached registration that the pin counts on:
 * the pin covers pages 3-5, registering 4-5 (slowly) and relying on the cached registration of
 * pages 0-3, which the forget of byte 0 touches. Whatever the order, a pin that succeeds has all
 * its pages registered. */
static void test_threads_pin_model_forget_beside_pin_in_flight(void** state) {
  (void)state;
  assert_ok(gpumem_pin_cache_set_budget(DEFAULT_BUDGET)); /* room to keep the registration below */
  char* buf = buffer_new(8);
  assert_ok(gpumem_pin(buf, 4 * page, 0));
  assert_ok(gpumem_unpin(buf, 4 * page));
  assert_true(fake.is_registered(buf + 3 * page));
  fake.set_call_delay(300 * 1000);
  pin_job_t job = {buf + 3 * page, 3 * page, GPUMEM_ERROR_INTERNAL};
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, pin_job, &job), 0);
  const struct timespec pause = {0, 100 * 1000 * 1000}; /* the pin is in its register call by then */
  nanosleep(&pause, NULL);
  const gpumem_status_t forgot = gpumem_pin_forget(buf, 1);
  assert_int_equal(pthread_join(thread, NULL), 0);
  fake.set_call_delay(0);
  assert_ok(job.status);
  assert_true(forgot == GPUMEM_SUCCESS || forgot == GPUMEM_ERROR_BUSY);
  assert_int_equal(query(buf + 3 * page, 3 * page), GPUMEM_PIN_FULL);
  for (int i = 3; i < 6; ++i) {
    if (!fake.is_registered(buf + i * page))
      print_error("page %d is pinned and not registered (the forget returned %s)\n", i, gpumem_status_name(forgot));
    assert_true(fake.is_registered(buf + i * page));
  }
  const gpumem_pin_stats_t s = stats_now();
  assert_int_equal(s.registrations, fake.registration_count());
  assert_int_equal(s.bytes_registered, fake.registered_bytes());
  assert_ok(gpumem_unpin(buf + 3 * page, 3 * page));
  buffer_end(buf, 8);
}

/* ---- main ---------------------------------------------------------------------------------------- */

#define TEST(name) cmocka_unit_test_setup_teardown(name, test_setup, test_teardown)

int main(int argc, char** argv) {
  if (load_fake() != 0) return 2;
  if (!gpu_available()) {
    fprintf(stderr, "the fake driver reports no device: %s\n", gpumem_last_error_detail());
    return 2;
  }
  if (argc == 2 && strcmp(argv[1], "threads") == 0) {
    const struct CMUnitTest tests[] = {TEST(test_threads_pin_model_balanced),
                                       TEST(test_threads_pin_model_forget_beside_pin_in_flight)};
    return cmocka_run_group_tests_name("threads", tests, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      TEST(test_pin_model_budget_from_environment), /* first: the first call reads the environment */
      TEST(test_pin_model_registers_only_gaps),
      TEST(test_pin_model_same_start_bigger_size),
      TEST(test_pin_model_cache_hit_after_unpin),
      TEST(test_pin_model_budget_zero_unregisters_at_last_unpin),
      TEST(test_pin_model_eviction_lru_order),
      TEST(test_pin_model_forget),
      TEST(test_pin_model_flush),
      TEST(test_pin_model_register_failure_leaves_nothing),
      TEST(test_pin_model_unmapped_memory_refused),
      TEST(test_pin_model_foreign_registration_refused),
      TEST(test_pin_model_host_register_over_pinned_refused),
      TEST(test_pin_model_managed_memory_refused),
      TEST(test_pin_model_bad_input),
      TEST(test_pin_model_random_sequence),
      TEST(test_pin_model_host_unregister_refuses_pinned),
  };
  return cmocka_run_group_tests_name("pin_model", tests, NULL, NULL);
}
