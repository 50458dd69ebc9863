/* Page reclaim on a GPU: a pool over a VM allocator with 2 MiB map units (the H200's granularity)
 * moves whole free units of any stream's arena to where growth needs memory, by mapping the same
 * physical memory again, but only units the GPU is done with (fences polled on each arena's
 * stream, never waited for). cuMemUnmap does not wait for kernels, so taking a unit that queued
 * work still uses would fault or corrupt it. Streams are kept busy by a host function that holds
 * them (work queued behind it waits), so that "not done yet" lasts as long as a case needs.
 *
 * The cases: busy pages stay where they are and are moved once their stream is done; live blocks
 * keep their bytes while the free units between them move away and are mapped again; out of
 * memory under a limit, with freed memory still busy, says what the pool tried; and a whole block
 * another stream took over stays busy until the stream it came from is done. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <time.h>

#include "test_bytes.h"
#include "test_cuda.h"

#define MiB ((size_t)1 << 20)
#define kUnit (2 * MiB) /* params.map_unit */

enum { TEST_CUDA_ERROR_NOT_READY = 600 }; /* CUDA_ERROR_NOT_READY */

typedef void (*test_cu_host_fn)(void* user_data);
typedef int (*test_cu_fn_launch_host_func)(gpumem_stream_t stream, test_cu_host_fn fn, void* user_data);
typedef int (*test_cu_fn_void)(void);

/* What a host function on a stream waits for: the test opening it, or most_ms passing. */
struct gate {
  int open;    /* set by the test */
  int done;    /* set by the host function as it returns */
  int most_ms; /* it returns after this long even if never opened */
};

struct fixture {
  gpumem_allocator_t* vm;
  gpumem_allocator_t* pool;
  gpumem_stream_t a, b, c;
  struct gate gate;
  int finished; /* the case reached its end, having freed everything */
};

/* ---- Helpers ---- */

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Runs on the driver's thread: work queued on the stream after it waits until it returns. */
static void hold_stream(void* user_data) {
  struct gate* g = user_data;
  const double until = now_ms() + g->most_ms;
  while (!__atomic_load_n(&g->open, __ATOMIC_ACQUIRE) && now_ms() < until) {
    const struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  __atomic_store_n(&g->done, 1, __ATOMIC_RELEASE);
}

/* Holds the stream until open_gate() or most_ms, whichever comes first. */
static void hold(struct fixture* f, gpumem_stream_t stream, int most_ms) {
  f->gate.open = 0;
  f->gate.done = 0;
  f->gate.most_ms = most_ms;
  test_cu_push(0);
  const int r = ((test_cu_fn_launch_host_func)test_cu_symbol("cuLaunchHostFunc"))(stream, hold_stream, &f->gate);
  test_cu_pop();
  assert_int_equal(r, 0);
}

static void open_gate(struct fixture* f) { __atomic_store_n(&f->gate.open, 1, __ATOMIC_RELEASE); }

static int gate_done(struct fixture* f) { return __atomic_load_n(&f->gate.done, __ATOMIC_ACQUIRE); }

/* cuStreamQuery: 0 when all work queued on the stream is done, TEST_CUDA_ERROR_NOT_READY if not. */
static int stream_query(gpumem_stream_t s) {
  test_cu_push(0);
  const int r = ((test_cu_fn_stream)test_cu_symbol("cuStreamQuery"))(s);
  test_cu_pop();
  return r;
}

/* cuCtxSynchronize on device 0's primary context: 0 unless some work faulted. */
static int device_synchronize(void) {
  test_cu_push(0);
  const int r = ((test_cu_fn_void)test_cu_symbol("cuCtxSynchronize"))();
  test_cu_pop();
  return r;
}

static uint64_t reserved_of(gpumem_allocator_t* pool) { return stats_of(pool).bytes_reserved; }

static gpumem_vm_info_t vm_info_of(gpumem_allocator_t* vm) {
  gpumem_vm_info_t info;
  memset(&info, 0xab, sizeof info);
  info.struct_size = sizeof info;
  assert_ok(gpumem_vm_get_info(vm, &info));
  return info;
}

static void* alloc_on(gpumem_allocator_t* pool, size_t size, gpumem_stream_t stream) {
  void* p = NULL;
  assert_ok(gpumem_alloc(pool, size, stream, &p));
  assert_non_null(p);
  return p;
}

static unsigned char* pattern_of(size_t n, unsigned seed) {
  unsigned char* bytes = checked_malloc(n);
  fill_pattern(bytes, n, seed);
  return bytes;
}

static void write_pattern(void* p, size_t n, unsigned seed) {
  unsigned char* bytes = pattern_of(n, seed);
  assert_ok(gpumem_copy(p, bytes, n));
  free(bytes);
}

static void expect_pattern(const void* p, size_t n, unsigned seed, const char* what) {
  unsigned char* want = pattern_of(n, seed);
  unsigned char* got = checked_malloc(n);
  memset(got, ~want[0], n);
  assert_ok(gpumem_copy(got, p, n));
  expect_bytes(got, want, n, what);
  free(got);
  free(want);
}

/* Every byte of [p, p + n) is value. */
static void expect_all(const void* p, size_t n, unsigned char value, const char* what) {
  unsigned char* want = checked_malloc(n);
  unsigned char* got = checked_malloc(n);
  memset(want, value, n);
  memset(got, (unsigned char)~value, n);
  assert_ok(gpumem_copy(got, p, n));
  expect_bytes(got, want, n, what);
  free(got);
  free(want);
}

/* Bytes of the whole map units inside [p, p + n). */
static size_t whole_units_inside(const void* p, size_t n) {
  const uintptr_t lo = ((uintptr_t)p + kUnit - 1) & ~(uintptr_t)(kUnit - 1);
  const uintptr_t hi = ((uintptr_t)p + n) & ~(uintptr_t)(kUnit - 1);
  return hi > lo ? (size_t)(hi - lo) : 0;
}

/* The pool holds what the VM allocator has mapped: a move maps nothing new and loses nothing. */
static void assert_pool_holds_mapped(struct fixture* f) {
  const gpumem_pool_info_t info = pool_info_of(f->pool);
  const gpumem_vm_info_t vm = vm_info_of(f->vm);
  assert_int_equal(info.total_bytes, vm.mapped_bytes);
  assert_int_equal(info.address_bytes, vm.reserved_bytes);
  assert_int_equal(info.total_bytes, stats_of(f->pool).bytes_reserved);
}

/* ---- The fixture: made by each case (which may skip), taken apart after it ---- */

static int setup(void** state) {
  static struct fixture f;
  memset(&f, 0, sizeof f);
  *state = &f;
  return 0;
}

/* A VM allocator of 2 MiB units (range_size 0: the default), a pool over it, and streams a, b, c. */
static struct fixture* open_fixture(void** state, uint64_t range_size) {
  require_gpu();
  struct fixture* f = *state;
  gpumem_vm_params_t params = GPUMEM_VM_PARAMS_INIT;
  params.map_unit = kUnit;
  params.range_size = range_size;
  const gpumem_status_t st = gpumem_allocator_create_vm(&params, &f->vm);
  if (st == GPUMEM_ERROR_NOT_SUPPORTED || st == GPUMEM_ERROR_INVALID_ARGUMENT) {
    /* No virtual memory management, or a granularity above 2 MiB. */
    print_message("no VM allocator with 2 MiB units on device 0: %s\n", gpumem_last_error_detail());
    skip();
  }
  assert_ok(st);
  assert_int_equal(vm_info_of(f->vm).map_unit, kUnit);
  f->pool = pool_over(f->vm);
  f->a = test_stream_create(0);
  f->b = test_stream_create(0);
  f->c = test_stream_create(0);
  return f;
}

static int teardown(void** state) {
  struct fixture* f = *state;
  int rc = 0;
  open_gate(f); /* whatever a failed case left held */
  gpumem_stream_t streams[] = {f->a, f->b, f->c};
  for (unsigned i = 0; i < 3; i++)
    if (streams[i]) test_stream_sync(streams[i]);
  if (f->pool) {
    /* A case that ran to its end freed everything: the pool goes without force. */
    const gpumem_status_t st =
        f->finished ? gpumem_allocator_destroy(f->pool) : gpumem_allocator_destroy_force(f->pool);
    if (st != GPUMEM_SUCCESS) {
      print_error("destroying the pool: %s: %s\n", gpumem_status_name(st), gpumem_last_error_detail());
      if (f->finished) gpumem_allocator_destroy_force(f->pool);
      rc = -1;
    }
  }
  if (f->vm) {
    /* The pool gave back every mapping and range, moved ones included. */
    gpumem_vm_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (gpumem_vm_get_info(f->vm, &info) != GPUMEM_SUCCESS || info.mapped_bytes != 0 || info.reserved_bytes != 0) {
      print_error("the VM allocator still holds %llu bytes mapped, %llu reserved, after its pool went\n",
                  (unsigned long long)info.mapped_bytes, (unsigned long long)info.reserved_bytes);
      rc = -1;
    }
    if (gpumem_allocator_destroy(f->vm) != GPUMEM_SUCCESS) {
      print_error("destroying the VM allocator: %s\n", gpumem_last_error_detail());
      rc = -1;
    }
  }
  for (unsigned i = 0; i < 3; i++)
    if (streams[i]) test_stream_destroy(streams[i]);
  memset(f, 0, sizeof *f);
  return rc;
}

/* ---- The cases ---- */

/* Memory freed on a stream whose work has not run yet is not moved: growth on another stream maps
 * new memory instead, twice (the first growth records the fence, the second polls it, still
 * pending). Once the stream is done, the next growth moves the pages, and what its work wrote
 * there comes with them. */
static void test_pool_reclaim_gpu_busy_pages_are_never_taken(void** state) {
  struct fixture* f = open_fixture(state, 0);
  /* No lending in place: a request of a unit or more would borrow a's memory behind a fence. */
  assert_ok(gpumem_pool_set_stream_reuse(f->pool, GPUMEM_STREAM_REUSE_NEVER));
  const size_t size = 16 * MiB; /* 8 units */
  const unsigned char value = 0x5a;

  void* x = alloc_on(f->pool, size, f->a);
  assert_int_equal(reserved_of(f->pool), size);
  hold(f, f->a, 10000); /* opened below; 10 s at most, should the pool wait for the stream */
  assert_ok(gpumem_memset_async(x, value, 1, size, f->a)); /* runs once the gate opens */
  assert_ok(gpumem_free(f->pool, x, f->a));

  /* b's arena is empty and nothing else is free: each allocation grows the pool. */
  void* y1 = alloc_on(f->pool, size, f->b);
  assert_int_equal(reserved_of(f->pool), 2 * size);
  void* y2 = alloc_on(f->pool, size, f->b);
  assert_int_equal(reserved_of(f->pool), 3 * size); /* the fence on a was polled: not done */
  /* The premise: a's memset had not run through both growths. */
  assert_int_equal(stream_query(f->a), TEST_CUDA_ERROR_NOT_READY);
  assert_false(gate_done(f));
  const gpumem_pool_info_t busy = pool_info_of(f->pool);
  assert_int_equal(busy.free_bytes, size); /* x's memory is still cached in a's arena */
  assert_int_equal(busy.used_bytes, 2 * size);
  assert_pool_holds_mapped(f);

  /* a's memset runs on memory still mapped where it was queued: no fault. */
  open_gate(f);
  test_stream_sync(f->a);
  assert_true(gate_done(f));

  /* a is done now: the next growth moves x's units (a's range, left empty, is given back). */
  void* z = alloc_on(f->pool, size, f->b);
  assert_int_equal(reserved_of(f->pool), 3 * size);
  const gpumem_pool_info_t moved = pool_info_of(f->pool);
  assert_int_equal(moved.free_bytes, 0);
  assert_int_equal(moved.used_bytes, 3 * size);
  assert_int_equal(moved.address_bytes, vm_info_of(f->vm).range_size); /* b's range only */
  assert_pool_holds_mapped(f);
  /* The same physical memory: the memset's bytes, at z's addresses. */
  expect_all(z, size, value, "the block made of x's moved units");
  write_pattern(z, size, 1);
  expect_pattern(z, size, 1, "the moved units, written again");
  assert_int_equal(device_synchronize(), 0);

  assert_ok(gpumem_free(f->pool, y1, f->b));
  assert_ok(gpumem_free(f->pool, y2, f->b));
  assert_ok(gpumem_free(f->pool, z, f->b));
  assert_int_equal(pool_info_of(f->pool).used_bytes, 0);
  f->finished = 1;
}

/* Live blocks on stream a with free gaps between them, each gap holding whole units and sharing
 * its edge units with the live blocks beside it. A growth on b moves the gaps' units away (once a
 * is known done); the live blocks keep their bytes, the block made of the gaps' units holds what
 * the gaps held, and mapping the gaps again, between the live blocks, leaves those intact too. */
static void test_pool_reclaim_gpu_bytes_intact_across_reclaim_and_remap(void** state) {
  struct fixture* f = open_fixture(state, 0);
  assert_ok(gpumem_pool_set_stream_reuse(f->pool, GPUMEM_STREAM_REUSE_NEVER)); /* moved, not lent */
  enum { LIVE = 4, GAPS = LIVE - 1 };
  const size_t live_size = 5 * MiB + 4096, gap_size = 6 * MiB;
  const unsigned char gap_value = 0xc3;
  char* live[LIVE];
  char* gap[GAPS];
  for (unsigned i = 0; i < LIVE; i++) {
    live[i] = alloc_on(f->pool, live_size, f->a);
    if (i < GAPS) gap[i] = alloc_on(f->pool, gap_size, f->a);
  }
  /* The premise: one run of blocks, each gap between two live blocks. */
  size_t gap_units = 0;
  for (unsigned i = 0; i < GAPS; i++) {
    assert_ptr_equal(live[i] + live_size, gap[i]);
    assert_ptr_equal(gap[i] + gap_size, live[i + 1]);
    assert_true(whole_units_inside(gap[i], gap_size) > 0);
    gap_units += whole_units_inside(gap[i], gap_size);
  }
  const size_t big = gap_units; /* all the gaps' units, more than any one gap has */
  assert_true(big > gap_size);

  for (unsigned i = 0; i < LIVE; i++) write_pattern(live[i], live_size, 10 + i);
  for (unsigned i = 0; i < GAPS; i++) assert_ok(gpumem_memset(gap[i], gap_value, 1, gap_size));
  assert_int_equal(device_synchronize(), 0);
  hold(f, f->a, 10000); /* a is busy until the gate opens: its fence cannot complete before */
  for (unsigned i = 0; i < GAPS; i++) assert_ok(gpumem_free(f->pool, gap[i], f->a));
  const uint64_t before = reserved_of(f->pool);

  /* The first growth on b records a fence on a, which is not done: new memory. */
  void* first = alloc_on(f->pool, big, f->b);
  assert_int_equal(reserved_of(f->pool), before + big);
  open_gate(f);
  test_stream_sync(f->a);
  /* The second finds a's fence complete: the gaps' units move, nothing is mapped anew. */
  void* second = alloc_on(f->pool, big, f->b);
  assert_int_equal(reserved_of(f->pool), before + big);
  assert_pool_holds_mapped(f);

  for (unsigned i = 0; i < LIVE; i++) expect_pattern(live[i], live_size, 10 + i, "a live block after the move");
  expect_all(second, big, gap_value, "the block made of the gaps' units");
  write_pattern(first, big, 20);
  write_pattern(second, big, 21);
  expect_pattern(first, big, 20, "the block of new memory");
  expect_pattern(second, big, 21, "the block of moved units, written again");

  /* A gap's size on a again: only the units moved away are mapped, between the live blocks. */
  const uint64_t moved = reserved_of(f->pool);
  char* again = alloc_on(f->pool, gap_size, f->a);
  unsigned at = GAPS;
  for (unsigned i = 0; i < GAPS; i++)
    if (again == gap[i]) at = i;
  assert_true(at < GAPS); /* in a gap, whose edge units are still mapped */
  assert_int_equal(reserved_of(f->pool), moved + whole_units_inside(gap[at], gap_size));
  assert_pool_holds_mapped(f);
  write_pattern(again, gap_size, 30);
  expect_pattern(again, gap_size, 30, "the gap mapped again");
  for (unsigned i = 0; i < LIVE; i++) expect_pattern(live[i], live_size, 10 + i, "a live block after the remap");
  expect_pattern(second, big, 21, "the block of moved units after the remap");
  assert_int_equal(device_synchronize(), 0);

  for (unsigned i = 0; i < LIVE; i++) assert_ok(gpumem_free(f->pool, live[i], f->a));
  assert_ok(gpumem_free(f->pool, again, f->a));
  assert_ok(gpumem_free(f->pool, first, f->b));
  assert_ok(gpumem_free(f->pool, second, f->b));
  assert_int_equal(pool_info_of(f->pool).used_bytes, 0);
  f->finished = 1;
}

/* Under a limit, memory freed on a stream that is still held cannot be moved, and the limit
 * refuses new memory; the pool then returns its cached memory (unmapping it only after waiting for
 * the device, so the held stream's memset lands first) and still has no room. The failure says
 * what refused and what was tried. The hold is time-bounded, not opened by the test: the pool's
 * synchronize before it unmaps waits for it. */
static void test_pool_reclaim_gpu_out_of_memory_says_what_was_tried(void** state) {
  struct fixture* f = open_fixture(state, 0);
  const size_t half = 16 * MiB;
  assert_ok(gpumem_pool_set_limit(f->pool, 2 * half)); /* 33,554,432 */
  void* kept = alloc_on(f->pool, half, f->a);
  void* freed = alloc_on(f->pool, half, f->a);
  assert_int_equal(reserved_of(f->pool), 2 * half);
  write_pattern(kept, half, 40);
  hold(f, f->a, 300);
  assert_ok(gpumem_memset_async(freed, 0x77, 1, half, f->a));
  assert_ok(gpumem_free(f->pool, freed, f->a));
  const gpumem_allocator_stats_t stats = stats_of(f->pool);

  /* 24 MiB on b: the 16 MiB in use leave 16 under the limit. */
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(f->pool, 24 * MiB, f->b, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  assert_true(gpumem_last_error_detail()[0] != '\0');
  assert_detail_contains("out of memory allocating 25,165,824 bytes");
  assert_detail_contains("limit 33,554,432");
  assert_detail_contains("refused by the pool's limit");
  assert_detail_contains(
      "waited for the pending frees and for the streams' work on free memory, to move it, returned "
      "16,777,216 cached bytes and tried again");
  assert_detail_contains("it would have taken a limit of at least 41,943,040 bytes");
  const gpumem_allocator_stats_t after = stats_of(f->pool);
  assert_int_equal(after.oom_count, stats.oom_count + 1);
  assert_true(after.retry_count > stats.retry_count);

  /* The cached memory went back (it stays back), and only after a's work had run. */
  assert_int_equal(reserved_of(f->pool), half);
  assert_pool_holds_mapped(f);
  assert_true(gate_done(f));
  assert_int_equal(stream_query(f->a), 0);
  assert_int_equal(device_synchronize(), 0);
  expect_pattern(kept, half, 40, "the block in use through the failure");

  /* With the block in use freed as well, the same request fits under the limit. */
  assert_ok(gpumem_free(f->pool, kept, f->a));
  p = alloc_on(f->pool, 24 * MiB, f->b);
  assert_true(reserved_of(f->pool) <= 2 * half);
  write_pattern(p, 24 * MiB, 41);
  expect_pattern(p, 24 * MiB, 41, "the request served once memory was freed");
  assert_ok(gpumem_free(f->pool, p, f->b));
  assert_int_equal(device_synchronize(), 0);
  f->finished = 1;
}

/* Stream b takes over a whole free block of a's (a range of 16 MiB, all mapped) behind a fence on
 * a that b waits for on the GPU, and uses half of it. The other half is still memory whose last
 * user, a's queued work, has not run: a growth on c must not move it while a is held. Once a (and
 * so b) is done, a later growth on c may. Nothing queued touches the memory, so a pool that did
 * move it fails the checks here rather than faulting. */
static void test_pool_reclaim_gpu_block_taken_across_stays_busy(void** state) {
  struct fixture* f = open_fixture(state, 16 * MiB);
  const size_t range = 16 * MiB, half = 8 * MiB;
  void* x = alloc_on(f->pool, range, f->a);
  hold(f, f->a, 10000);
  assert_ok(gpumem_free(f->pool, x, f->a));

  void* y = alloc_on(f->pool, half, f->b);
  assert_ptr_equal(y, x); /* the premise: b took a's whole block */
  assert_int_equal(reserved_of(f->pool), range);
  /* c may not borrow a's half in place behind a fence: growth must leave it where it is. */
  assert_ok(gpumem_pool_set_stream_reuse(f->pool, GPUMEM_STREAM_REUSE_NEVER));
  void* z = alloc_on(f->pool, half, f->c);
  assert_int_equal(stream_query(f->a), TEST_CUDA_ERROR_NOT_READY);
  /* The rest of a's block stayed; c's memory is new. */
  assert_int_equal(reserved_of(f->pool), range + half);
  assert_int_equal(pool_info_of(f->pool).free_bytes, half);
  assert_pool_holds_mapped(f);

  open_gate(f);
  test_stream_sync(f->a);
  test_stream_sync(f->b);
  void* w = alloc_on(f->pool, half, f->c);
  assert_int_equal(reserved_of(f->pool), range + half); /* moved now */
  assert_pool_holds_mapped(f);
  write_pattern(w, half, 50);
  expect_pattern(w, half, 50, "the moved half");
  assert_int_equal(device_synchronize(), 0);

  assert_ok(gpumem_free(f->pool, y, f->b));
  assert_ok(gpumem_free(f->pool, z, f->c));
  assert_ok(gpumem_free(f->pool, w, f->c));
  f->finished = 1;
}

int main(void) {
  if (!gpu_available()) {
    printf("all tests need a GPU: %s\n", gpumem_last_error_detail());
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_pool_reclaim_gpu_busy_pages_are_never_taken, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_reclaim_gpu_bytes_intact_across_reclaim_and_remap, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_reclaim_gpu_out_of_memory_says_what_was_tried, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_reclaim_gpu_block_taken_across_stays_busy, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
