/* Hooks removed while they run: gpumem_allocator_remove_hook() returns once no other thread is
 * inside the hook, after which it never runs again; a hook that removes itself returns at once
 * (its own call is not waited for), also while another thread is inside it. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

typedef struct slow {
  atomic_int inside;   /* calls that have started */
  atomic_int finished; /* calls that have returned */
  gpumem_allocator_t* allocator;
  uint64_t id;
  atomic_int remove_self; /* the next call removes its hook */
  gpumem_status_t self_removal;
} slow_t;

static void sleep_ms(long ms) {
  const struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static void slow_hook(const gpumem_hook_info_t* info, void* user_data) {
  (void)info;
  slow_t* s = user_data;
  atomic_fetch_add(&s->inside, 1);
  if (atomic_exchange(&s->remove_self, 0)) s->self_removal = gpumem_allocator_remove_hook(s->allocator, s->id);
  sleep_ms(200);
  atomic_fetch_add(&s->finished, 1);
}

static void* alloc_once(void* arg) {
  slow_t* s = arg;
  void* p = NULL;
  if (gpumem_alloc(s->allocator, 64, NULL, &p) == GPUMEM_SUCCESS) gpumem_free(s->allocator, p, NULL);
  return NULL;
}

static void wait_inside(slow_t* s, int calls) {
  while (atomic_load(&s->inside) < calls) sleep_ms(1);
}

static void test_threads_hooks_remove_waits_for_a_running_hook(void** state) {
  (void)state;
  slow_t s;
  memset(&s, 0, sizeof s);
  assert_ok(gpumem_allocator_create_host(0, &s.allocator));
  assert_ok(gpumem_allocator_add_hook(s.allocator, GPUMEM_HOOK_MALLOC_POST, slow_hook, &s, &s.id));
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, alloc_once, &s), 0);
  wait_inside(&s, 1);
  assert_ok(gpumem_allocator_remove_hook(s.allocator, s.id));
  /* Returned only once the call on the other thread had left the hook. */
  assert_int_equal(atomic_load(&s.finished), 1);
  alloc_once(&s);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(atomic_load(&s.inside), 1);
  assert_ok(gpumem_allocator_destroy(s.allocator));
}

static void test_threads_hooks_remove_from_inside_itself(void** state) {
  (void)state;
  slow_t s;
  memset(&s, 0, sizeof s);
  s.self_removal = -1000;
  assert_ok(gpumem_allocator_create_host(0, &s.allocator));
  assert_ok(gpumem_allocator_add_hook(s.allocator, GPUMEM_HOOK_MALLOC_POST, slow_hook, &s, &s.id));
  /* Another thread is inside the hook first; the call that removes it waits for that one only. */
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, alloc_once, &s), 0);
  wait_inside(&s, 1);
  atomic_store(&s.remove_self, 1);
  alloc_once(&s);
  assert_ok(s.self_removal);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(atomic_load(&s.finished), 2);
  alloc_once(&s);
  assert_int_equal(atomic_load(&s.inside), 2);
  /* Alone on its thread, too. */
  assert_ok(gpumem_allocator_add_hook(s.allocator, GPUMEM_HOOK_MALLOC_POST, slow_hook, &s, &s.id));
  atomic_store(&s.remove_self, 1);
  s.self_removal = -1000;
  alloc_once(&s);
  assert_ok(s.self_removal);
  alloc_once(&s);
  assert_int_equal(atomic_load(&s.inside), 3);
  assert_ok(gpumem_allocator_destroy(s.allocator));
}

static void slow_reclaim(int32_t device, size_t size, void* user_data) {
  (void)device, (void)size;
  slow_hook(NULL, user_data);
}

static void* alloc_too_much(void* arg) {
  slow_t* s = arg;
  void* p = NULL;
  if (gpumem_alloc(s->allocator, 1 << 20, NULL, &p) == GPUMEM_SUCCESS) gpumem_free(s->allocator, p, NULL);
  return NULL;
}

static void test_threads_hooks_reclaim_remove_waits(void** state) {
  (void)state;
  slow_t s;
  memset(&s, 0, sizeof s);
  gpumem_allocator_t* up = NULL;
  assert_ok(gpumem_allocator_create_host(0, &up));
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = up;
  params.limit = 3 << 19;
  assert_ok(gpumem_pool_create(&params, &s.allocator));
  /* Held: a second MiB is over the limit, and the pool asks the reclaim callbacks. */
  void* held = NULL;
  assert_ok(gpumem_alloc(s.allocator, 1 << 20, NULL, &held));
  assert_ok(gpumem_reclaim_add(slow_reclaim, &s, &s.id));
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, alloc_too_much, &s), 0);
  wait_inside(&s, 1);
  assert_ok(gpumem_reclaim_remove(s.id));
  assert_int_equal(atomic_load(&s.finished), 1);
  assert_int_equal(pthread_join(t, NULL), 0);
  alloc_too_much(&s);
  assert_int_equal(atomic_load(&s.inside), 1);
  assert_ok(gpumem_free(s.allocator, held, NULL));
  assert_ok(gpumem_allocator_destroy(s.allocator));
  assert_ok(gpumem_allocator_destroy(up));
}

/* A former default destroyed from inside a hook of the call that resolved NULL to the current
 * one: the destroy waits for the calls that may still use the old default, but not for the call
 * it is made from (else it waits for ever: alarm() ends the test then). */
static gpumem_allocator_t* former_default;
static gpumem_status_t destroyed_from_hook = 1;
static void destroy_former_default(const gpumem_hook_info_t* info, void* user_data) {
  (void)info;
  (void)user_data;
  destroyed_from_hook = gpumem_allocator_destroy(former_default);
}

static void test_threads_hooks_former_default_destroyed_from_a_hook(void** state) {
  (void)state;
  gpumem_allocator_t* current = NULL;
  uint64_t id = 0;
  void* p = NULL;
  assert_int_equal(gpumem_allocator_create_host(0, &former_default), GPUMEM_SUCCESS);
  assert_int_equal(gpumem_allocator_create_host(0, &current), GPUMEM_SUCCESS);
  assert_int_equal(gpumem_allocator_set_default(0, former_default), GPUMEM_SUCCESS);
  assert_int_equal(gpumem_allocator_set_default(0, current), GPUMEM_SUCCESS);
  assert_int_equal(gpumem_allocator_add_hook(current, GPUMEM_HOOK_MALLOC_POST, destroy_former_default, NULL, &id),
                   GPUMEM_SUCCESS);
  alarm(30);
  assert_int_equal(gpumem_alloc(NULL, 64, NULL, &p), GPUMEM_SUCCESS);
  alarm(0);
  assert_int_equal(destroyed_from_hook, GPUMEM_SUCCESS);
  assert_int_equal(gpumem_free(NULL, p, NULL), GPUMEM_SUCCESS);
  assert_int_equal(gpumem_allocator_set_default(0, NULL), GPUMEM_SUCCESS);
  assert_int_equal(gpumem_allocator_remove_hook(current, id), GPUMEM_SUCCESS);
  assert_int_equal(gpumem_allocator_destroy(current), GPUMEM_SUCCESS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_hooks_former_default_destroyed_from_a_hook),
      cmocka_unit_test(test_threads_hooks_remove_waits_for_a_running_hook),
      cmocka_unit_test(test_threads_hooks_remove_from_inside_itself),
      cmocka_unit_test(test_threads_hooks_reclaim_remove_waits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
