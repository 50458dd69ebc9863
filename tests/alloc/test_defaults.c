/* What a NULL allocator means: the thread's override (gpumem_allocator_set_thread), else the
 * process default of the current device (gpumem_allocator_set_default), else the device's pool.
 * Overrides need no driver and are tested in CI; the process default is per device, so those
 * tests need a GPU. Also: handles that are not live allocators. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

static gpumem_allocator_t* host_allocator(void) {
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_allocator_create_host(0, &a));
  return a;
}

static gpumem_allocator_t* thread_override(void) {
  gpumem_allocator_t* current = (gpumem_allocator_t*)0x1;
  assert_ok(gpumem_allocator_get_thread(&current));
  return current;
}

/* Allocates from the NULL allocator and checks, by the statistics, that it came from `expected`. */
static void assert_null_allocates_from(gpumem_allocator_t* expected) {
  const gpumem_allocator_stats_t before = stats_of(expected);
  void* p = (void*)0x1;
  assert_ok(gpumem_alloc(NULL, 1000, NULL, &p));
  assert_non_null(p);
  gpumem_allocator_stats_t after = stats_of(expected);
  assert_int_equal(after.alloc_count, before.alloc_count + 1);
  assert_int_equal(after.bytes_requested, before.bytes_requested + 1000);
  /* Only the allocator that gave it can take it back. */
  assert_ok(gpumem_free(expected, p, NULL));
  after = stats_of(expected);
  assert_int_equal(after.free_count, before.free_count + 1);
  assert_int_equal(after.bytes_requested, before.bytes_requested);
}

/* ---- Thread overrides: no driver needed ---- */

static void test_defaults_thread_override_starts_empty(void** state) {
  (void)state;
  assert_null(thread_override());
  assert_status(gpumem_allocator_get_thread(NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_allocator is NULL");
}

static void test_defaults_thread_override_serves_null(void** state) {
  (void)state;
  gpumem_allocator_t* a = host_allocator();
  gpumem_allocator_t* prev = (gpumem_allocator_t*)0x1;
  assert_ok(gpumem_allocator_set_thread(a, &prev));
  assert_null(prev);
  assert_ptr_equal(thread_override(), a);

  /* Every call taking a NULL allocator means the override, with no driver involved. */
  void* p = (void*)0x1;
  assert_ok(gpumem_alloc(NULL, 1000, NULL, &p));
  assert_non_null(p);
  gpumem_allocator_stats_t s = stats_of(NULL);
  assert_int_equal(s.alloc_count, 1);
  assert_int_equal(s.bytes_in_use, 1000);
  s = stats_of(a);
  assert_int_equal(s.alloc_count, 1);
  assert_int_equal(s.bytes_in_use, 1000);
  int32_t device = 99;
  assert_ok(gpumem_allocator_get_device(NULL, &device));
  assert_int_equal(device, -1);
  assert_ok(gpumem_free(NULL, p, NULL));
  assert_int_equal(stats_of(a).free_count, 1);
  assert_int_equal(stats_of(a).peak_bytes_in_use, 1000);
  assert_ok(gpumem_allocator_reset_peaks(NULL));
  assert_int_equal(stats_of(a).peak_bytes_in_use, 0);

  prev = (gpumem_allocator_t*)0x1;
  assert_ok(gpumem_allocator_set_thread(NULL, &prev));
  assert_ptr_equal(prev, a);
  assert_null(thread_override());
  assert_ok(gpumem_allocator_destroy(a));
}

/* CuPy's `with using_allocator(A): with using_allocator(B): ...`. */
static void test_defaults_thread_override_nests(void** state) {
  (void)state;
  gpumem_allocator_t* a = host_allocator();
  gpumem_allocator_t* b = host_allocator();
  gpumem_allocator_t* outer = (gpumem_allocator_t*)0x1;
  assert_ok(gpumem_allocator_set_thread(a, &outer));
  assert_null(outer);
  assert_null_allocates_from(a);

  gpumem_allocator_t* inner = (gpumem_allocator_t*)0x1;
  assert_ok(gpumem_allocator_set_thread(b, &inner));
  assert_ptr_equal(inner, a);
  assert_ptr_equal(thread_override(), b);
  assert_null_allocates_from(b);
  assert_int_equal(stats_of(a).alloc_count, 1);

  gpumem_allocator_t* replaced = NULL;
  assert_ok(gpumem_allocator_set_thread(inner, &replaced));
  assert_ptr_equal(replaced, b);
  assert_ptr_equal(thread_override(), a);
  assert_null_allocates_from(a);
  assert_int_equal(stats_of(b).alloc_count, 1);

  assert_ok(gpumem_allocator_set_thread(outer, &replaced));
  assert_ptr_equal(replaced, a);
  assert_null(thread_override());
  assert_int_equal(stats_of(a).alloc_count, 2);

  /* Neither is relied on any more. */
  assert_ok(gpumem_allocator_destroy(a));
  assert_ok(gpumem_allocator_destroy(b));
}

static void test_defaults_thread_override_out_previous_optional(void** state) {
  (void)state;
  gpumem_allocator_t* a = host_allocator();
  assert_ok(gpumem_allocator_set_thread(a, NULL));
  assert_ptr_equal(thread_override(), a);
  /* Setting the same one again must not make it look relied on twice. */
  assert_ok(gpumem_allocator_set_thread(a, NULL));
  assert_ok(gpumem_allocator_set_thread(NULL, NULL));
  assert_null(thread_override());
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_defaults_thread_override_blocks_destroy(void** state) {
  (void)state;
  gpumem_allocator_t* a = host_allocator();
  assert_ok(gpumem_allocator_set_thread(a, NULL));
  assert_status(gpumem_allocator_destroy(a), GPUMEM_ERROR_BUSY);
  assert_detail_contains("relied on 1 time:");
  assert_detail_contains("thread's override");
  assert_status(gpumem_allocator_destroy_force(a), GPUMEM_ERROR_BUSY);
  assert_detail_contains("relied on 1 time:");
  /* Refused, so it still serves this thread. */
  assert_ptr_equal(thread_override(), a);
  assert_null_allocates_from(a);
  assert_ok(gpumem_allocator_set_thread(NULL, NULL));
  assert_ok(gpumem_allocator_destroy(a));
}

typedef struct other_thread {
  gpumem_allocator_t* seen; /* its override when it started */
  gpumem_allocator_t* own;  /* the override it sets, or NULL */
  gpumem_allocator_t* also; /* a second one it sets after `own`, or NULL */
  bool allocate;            /* whether it allocates and frees 2000 bytes from NULL */
  bool remove;              /* whether it removes its override before exiting */
  pthread_barrier_t* set;   /* met once its override is set */
  pthread_barrier_t* exit;  /* met before it exits */
  gpumem_status_t alloc_status;
  gpumem_status_t free_status;
} other_thread_t;

static void* other_thread_main(void* arg) {
  other_thread_t* t = arg;
  t->seen = (gpumem_allocator_t*)0x1;
  gpumem_allocator_get_thread(&t->seen);
  if (t->own) gpumem_allocator_set_thread(t->own, NULL);
  if (t->also) gpumem_allocator_set_thread(t->also, NULL);
  if (t->allocate) {
    void* p = NULL;
    t->alloc_status = gpumem_alloc(NULL, 2000, NULL, &p);
    t->free_status = gpumem_free(NULL, p, NULL);
  }
  if (t->set) pthread_barrier_wait(t->set);
  if (t->exit) pthread_barrier_wait(t->exit);
  if (t->remove) gpumem_allocator_set_thread(NULL, NULL);
  return NULL;
}

static void test_defaults_thread_override_is_per_thread(void** state) {
  (void)state;
  gpumem_allocator_t* mine = host_allocator();
  gpumem_allocator_t* theirs = host_allocator();
  assert_ok(gpumem_allocator_set_thread(mine, NULL));

  other_thread_t t;
  memset(&t, 0, sizeof t);
  t.own = theirs;
  t.allocate = true;
  t.remove = true;
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, other_thread_main, &t), 0);
  assert_int_equal(pthread_join(thread, NULL), 0);

  /* The other thread saw no override, and its own served only it. */
  assert_null(t.seen);
  assert_int_equal(t.alloc_status, GPUMEM_SUCCESS);
  assert_int_equal(t.free_status, GPUMEM_SUCCESS);
  assert_int_equal(stats_of(theirs).alloc_count, 1);
  assert_int_equal(stats_of(mine).alloc_count, 0);
  assert_ptr_equal(thread_override(), mine);
  assert_null_allocates_from(mine);

  assert_ok(gpumem_allocator_set_thread(NULL, NULL));
  assert_ok(gpumem_allocator_destroy(mine));
  assert_ok(gpumem_allocator_destroy(theirs));
}

static void test_defaults_thread_override_released_at_thread_exit(void** state) {
  (void)state;
  gpumem_allocator_t* replaced = host_allocator();
  gpumem_allocator_t* last = host_allocator();
  pthread_barrier_t set, exit;
  assert_int_equal(pthread_barrier_init(&set, NULL, 2), 0);
  assert_int_equal(pthread_barrier_init(&exit, NULL, 2), 0);
  other_thread_t t;
  memset(&t, 0, sizeof t);
  t.own = replaced;
  t.also = last;
  t.allocate = true;
  t.remove = false; /* the thread ends with `last` still its override */
  t.set = &set;
  t.exit = &exit;
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, other_thread_main, &t), 0);
  pthread_barrier_wait(&set);

  /* While the thread lives, its override is relied on; the one it replaced is not. */
  assert_status(gpumem_allocator_destroy(last), GPUMEM_ERROR_BUSY);
  assert_detail_contains("thread's override");
  assert_ok(gpumem_allocator_destroy(replaced));
  assert_int_equal(t.alloc_status, GPUMEM_SUCCESS);
  assert_int_equal(stats_of(last).alloc_count, 1);
  assert_int_equal(stats_of(last).free_count, 1);

  pthread_barrier_wait(&exit);
  assert_int_equal(pthread_join(thread, NULL), 0);
  assert_ok(gpumem_allocator_destroy(last));
  pthread_barrier_destroy(&set);
  pthread_barrier_destroy(&exit);
}

/* ---- Bad input that needs no driver ---- */

static void test_defaults_default_bad_input(void** state) {
  (void)state;
  gpumem_allocator_t* a = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_allocator_get_default(0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_allocator is NULL");
  assert_status(gpumem_allocator_get_default(-1, &a), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("device is negative");
  assert_null(a);
  assert_status(gpumem_allocator_set_default(-1, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("device is negative");
  gpumem_allocator_t* h = host_allocator();
  assert_status(gpumem_allocator_set_default(-1, h), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("device is negative");
  /* Refused, so not relied on. */
  assert_ok(gpumem_allocator_destroy(h));
}

/* Without a driver, NULL (with no override) has nothing to mean. With one, see the GPU tests. */
static void test_defaults_null_without_driver_fails(void** state) {
  (void)state;
  if (gpu_available()) skip();
  void* p = (void*)0x1;
  const gpumem_status_t st = gpumem_alloc(NULL, 1000, NULL, &p);
  assert_true(st == GPUMEM_ERROR_NO_DRIVER || st == GPUMEM_ERROR_NO_DEVICE);
  assert_null(p);
  gpumem_allocator_t* a = (gpumem_allocator_t*)0x1;
  const gpumem_status_t got = gpumem_allocator_get_default(0, &a);
  assert_true(got == GPUMEM_ERROR_NO_DRIVER || got == GPUMEM_ERROR_NO_DEVICE);
  assert_null(a);
  gpumem_allocator_t* h = host_allocator();
  const gpumem_status_t set = gpumem_allocator_set_default(0, h);
  assert_true(set == GPUMEM_ERROR_NO_DRIVER || set == GPUMEM_ERROR_NO_DEVICE);
  /* Refused, so not relied on. */
  assert_ok(gpumem_allocator_destroy(h));
}

static void ignore_event(const gpumem_hook_info_t* info, void* user_data) {
  (void)info;
  (void)user_data;
}

/* Every call that takes a handle refuses this one with GPUMEM_ERROR_INVALID_HANDLE and changes
 * nothing. `mine` is a live allocator made before `bad` went bad: one made after could take a
 * destroyed handle's address and make it live again. */
static void assert_handle_refused(gpumem_allocator_t* bad, gpumem_allocator_t* mine) {
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(bad, 64, NULL, &p), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("is not a live gpumem allocator");
  assert_null(p);
  int x = 0;
  assert_status(gpumem_free(bad, &x, NULL), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("is not a live gpumem allocator");

  gpumem_allocator_stats_t s;
  memset(&s, 0xab, sizeof s);
  s.struct_size = sizeof s;
  assert_status(gpumem_allocator_get_stats(bad, &s), GPUMEM_ERROR_INVALID_HANDLE);
  assert_int_equal(s.struct_size, sizeof s);
  assert_int_equal(s.bytes_in_use, 0);
  assert_int_equal(s.alloc_count, 0);
  assert_int_equal(s.oom_count, 0);
  assert_status(gpumem_allocator_reset_peaks(bad), GPUMEM_ERROR_INVALID_HANDLE);
  int32_t device = 99;
  assert_status(gpumem_allocator_get_device(bad, &device), GPUMEM_ERROR_INVALID_HANDLE);

  uint64_t id = 77;
  assert_status(gpumem_allocator_add_hook(bad, GPUMEM_HOOK_ALL, ignore_event, NULL, &id), GPUMEM_ERROR_INVALID_HANDLE);
  assert_int_equal(id, 0);
  assert_status(gpumem_allocator_remove_hook(bad, 1), GPUMEM_ERROR_INVALID_HANDLE);

  /* The handle is checked before the device, so this is the same with or without a driver. */
  assert_status(gpumem_allocator_set_default(0, bad), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("is not a live gpumem allocator");

  assert_ok(gpumem_allocator_set_thread(mine, NULL));
  assert_status(gpumem_allocator_set_thread(bad, NULL), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("is not a live gpumem allocator");
  assert_ptr_equal(thread_override(), mine);
  assert_ok(gpumem_allocator_set_thread(NULL, NULL));

  assert_status(gpumem_allocator_destroy(bad), GPUMEM_ERROR_INVALID_HANDLE);
  assert_status(gpumem_allocator_destroy_force(bad), GPUMEM_ERROR_INVALID_HANDLE);

  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = bad;
  gpumem_allocator_t* pool = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_pool_create(&params, &pool), GPUMEM_ERROR_INVALID_HANDLE);
  assert_null(pool);
}

static void test_defaults_foreign_handle(void** state) {
  (void)state;
  /* Looks like nothing gpumem made: the caller's own memory. */
  struct {
    uint64_t words[8];
  } foreign;
  memset(&foreign, 0x5a, sizeof foreign);
  gpumem_allocator_t* mine = host_allocator();
  assert_handle_refused((gpumem_allocator_t*)&foreign, mine);
  assert_ok(gpumem_allocator_destroy(mine));
}

static void test_defaults_destroyed_handle(void** state) {
  (void)state;
#ifdef UNDER_ASAN
  /* The library recognises a destroyed allocator by reading its freed memory, which
   * AddressSanitizer rightly reports; this case is covered by the other builds. */
  skip();
#endif
  gpumem_allocator_t* mine = host_allocator();
  gpumem_allocator_t* a = host_allocator();
  assert_ok(gpumem_allocator_destroy(a));
  assert_handle_refused(a, mine);
  assert_ok(gpumem_allocator_destroy(mine));
}

/* ---- The process default: per device, so these need a GPU ---- */

static gpumem_allocator_t* device_pool(void) {
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_get_device(0, &pool));
  assert_non_null(pool);
  return pool;
}

static gpumem_allocator_t* host_pool(gpumem_allocator_t** out_upstream) {
  *out_upstream = host_allocator();
  return pool_over(*out_upstream);
}

static void test_defaults_null_is_device_pool(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* pool = device_pool();
  gpumem_allocator_t* again = NULL;
  assert_ok(gpumem_pool_get_device(0, &again));
  assert_ptr_equal(again, pool);
  gpumem_allocator_t* def = NULL;
  assert_ok(gpumem_allocator_get_default(0, &def));
  assert_ptr_equal(def, pool);
  int32_t device = 99;
  assert_ok(gpumem_allocator_get_device(NULL, &device));
  assert_int_equal(device, 0);

  const gpumem_allocator_stats_t before = stats_of(pool);
  void* p = NULL;
  assert_ok(gpumem_alloc(NULL, 1000, NULL, &p));
  assert_non_null(p);
  gpumem_allocator_stats_t after = stats_of(pool);
  assert_int_equal(after.alloc_count, before.alloc_count + 1);
  assert_int_equal(after.bytes_in_use, before.bytes_in_use + 1024);
  assert_int_equal(after.bytes_requested, before.bytes_requested + 1000);
  assert_ok(gpumem_memset(p, 0x11, 1, 1000));
  assert_ok(gpumem_free(NULL, p, NULL));
  after = stats_of(pool);
  assert_int_equal(after.free_count, before.free_count + 1);
  assert_int_equal(after.bytes_in_use, before.bytes_in_use);
}

static void test_defaults_device_pool_cannot_be_destroyed(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* pool = device_pool();
  assert_status(gpumem_allocator_destroy(pool), GPUMEM_ERROR_BUSY);
  assert_detail_contains("lives as long as the process");
  assert_status(gpumem_allocator_destroy_force(pool), GPUMEM_ERROR_BUSY);
  assert_detail_contains("lives as long as the process");
  assert_ptr_equal(device_pool(), pool);
  assert_null_allocates_from(pool);
}

static void test_defaults_set_default_redirects_null(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* dev_pool = device_pool();
  gpumem_allocator_t* upstream;
  gpumem_allocator_t* pool = host_pool(&upstream);

  assert_ok(gpumem_allocator_set_default(0, pool));
  gpumem_allocator_t* def = NULL;
  assert_ok(gpumem_allocator_get_default(0, &def));
  assert_ptr_equal(def, pool);
  const gpumem_allocator_stats_t dev_before = stats_of(dev_pool);
  assert_null_allocates_from(pool);
  int32_t device = 99;
  assert_ok(gpumem_allocator_get_device(NULL, &device));
  assert_int_equal(device, -1);
  const gpumem_allocator_stats_t dev_after = stats_of(dev_pool);
  assert_int_equal(dev_after.alloc_count, dev_before.alloc_count);

  /* A default is relied on. */
  assert_status(gpumem_allocator_destroy(pool), GPUMEM_ERROR_BUSY);
  assert_detail_contains("relied on 1 time:");
  assert_detail_contains("process default");

  assert_ok(gpumem_allocator_set_default(0, NULL));
  def = NULL;
  assert_ok(gpumem_allocator_get_default(0, &def));
  assert_ptr_equal(def, dev_pool);
  assert_null_allocates_from(dev_pool);
  assert_int_equal(stats_of(pool).alloc_count, 1);
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(upstream));
}

static void test_defaults_set_default_releases_replaced(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* a = host_allocator();
  gpumem_allocator_t* b = host_allocator();
  assert_ok(gpumem_allocator_set_default(0, a));
  assert_ok(gpumem_allocator_set_default(0, b));
  assert_null_allocates_from(b);
  assert_ok(gpumem_allocator_destroy(a));
  assert_status(gpumem_allocator_destroy(b), GPUMEM_ERROR_BUSY);
  assert_detail_contains("process default");
  assert_ok(gpumem_allocator_set_default(0, NULL));
  assert_ok(gpumem_allocator_destroy(b));
}

static void test_defaults_thread_override_beats_process_default(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* process = host_allocator();
  gpumem_allocator_t* later = host_allocator();
  gpumem_allocator_t* mine = host_allocator();
  assert_ok(gpumem_allocator_set_default(0, process));
  assert_ok(gpumem_allocator_set_thread(mine, NULL));
  assert_null_allocates_from(mine);
  /* Allowed while the override is set; the override keeps precedence on this thread. */
  assert_ok(gpumem_allocator_set_default(0, later));
  assert_null_allocates_from(mine);
  gpumem_allocator_t* def = NULL;
  assert_ok(gpumem_allocator_get_default(0, &def));
  assert_ptr_equal(def, later);
  assert_int_equal(stats_of(process).alloc_count, 0);
  assert_int_equal(stats_of(later).alloc_count, 0);

  assert_ok(gpumem_allocator_set_thread(NULL, NULL));
  assert_null_allocates_from(later);
  assert_int_equal(stats_of(mine).alloc_count, 2);

  assert_ok(gpumem_allocator_set_default(0, NULL));
  assert_ok(gpumem_allocator_destroy(process));
  assert_ok(gpumem_allocator_destroy(later));
  assert_ok(gpumem_allocator_destroy(mine));
}

static void test_defaults_other_thread_uses_process_default(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* process = host_allocator();
  gpumem_allocator_t* mine = host_allocator();
  assert_ok(gpumem_allocator_set_default(0, process));
  assert_ok(gpumem_allocator_set_thread(mine, NULL));

  other_thread_t t;
  memset(&t, 0, sizeof t);
  t.allocate = true;
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, other_thread_main, &t), 0);
  assert_int_equal(pthread_join(thread, NULL), 0);
  assert_null(t.seen);

  /* The other thread, with no override, allocated from the process default. */
  assert_int_equal(t.alloc_status, GPUMEM_SUCCESS);
  assert_int_equal(t.free_status, GPUMEM_SUCCESS);
  gpumem_allocator_stats_t s = stats_of(process);
  assert_int_equal(s.alloc_count, 1);
  assert_int_equal(s.free_count, 1);
  assert_int_equal(s.peak_bytes_in_use, 2000);
  assert_int_equal(stats_of(mine).alloc_count, 0);
  const gpumem_allocator_stats_t before = stats_of(process);
  assert_null_allocates_from(mine);
  assert_int_equal(stats_of(process).alloc_count, before.alloc_count);

  assert_ok(gpumem_allocator_set_thread(NULL, NULL));
  assert_ok(gpumem_allocator_set_default(0, NULL));
  assert_ok(gpumem_allocator_destroy(process));
  assert_ok(gpumem_allocator_destroy(mine));
}

static void test_defaults_invalid_device(void** state) {
  (void)state;
  require_gpu();
  const int32_t count = gpu_count();
  gpumem_allocator_t* a = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_allocator_get_default(count, &a), GPUMEM_ERROR_INVALID_DEVICE);
  assert_null(a);
  assert_status(gpumem_allocator_set_default(count, NULL), GPUMEM_ERROR_INVALID_DEVICE);
  gpumem_allocator_t* h = host_allocator();
  assert_status(gpumem_allocator_set_default(count, h), GPUMEM_ERROR_INVALID_DEVICE);
  assert_ok(gpumem_allocator_destroy(h)); /* refused, so not relied on */
  a = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_pool_get_device(count, &a), GPUMEM_ERROR_INVALID_DEVICE);
  assert_null(a);
}

int main(void) {
  /* The device pool's limit would otherwise come from the environment. */
  unsetenv("GPUMEM_GPU_MEMORY_LIMIT");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults_thread_override_starts_empty),
      cmocka_unit_test(test_defaults_thread_override_serves_null),
      cmocka_unit_test(test_defaults_thread_override_nests),
      cmocka_unit_test(test_defaults_thread_override_out_previous_optional),
      cmocka_unit_test(test_defaults_thread_override_blocks_destroy),
      cmocka_unit_test(test_defaults_thread_override_is_per_thread),
      cmocka_unit_test(test_defaults_thread_override_released_at_thread_exit),
      cmocka_unit_test(test_defaults_default_bad_input),
      cmocka_unit_test(test_defaults_null_without_driver_fails),
      cmocka_unit_test(test_defaults_foreign_handle),
      cmocka_unit_test(test_defaults_destroyed_handle),
      cmocka_unit_test(test_defaults_null_is_device_pool),
      cmocka_unit_test(test_defaults_device_pool_cannot_be_destroyed),
      cmocka_unit_test(test_defaults_set_default_redirects_null),
      cmocka_unit_test(test_defaults_set_default_releases_replaced),
      cmocka_unit_test(test_defaults_thread_override_beats_process_default),
      cmocka_unit_test(test_defaults_other_thread_uses_process_default),
      cmocka_unit_test(test_defaults_invalid_device),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
