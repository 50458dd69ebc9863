/* Hooks (CuPy's memory hooks): every event with its fields, masks, order, removal, hooks that call
 * gpumem, and bad input. The per-kind tests run on every allocator kind, as the conformance suite
 * does; host kinds run in CI, GPU kinds skip without a device. */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_cuda.h"

#include "alloc_kinds.h"

/* ---- The kinds ---- */

/* An upstream that always refuses with the status its context points to. */
static gpumem_status_t refusing_alloc(void* context, size_t size, int32_t device, gpumem_stream_t stream,
                                      void** out_ptr) {
  (void)size;
  (void)device;
  (void)stream;
  (void)out_ptr;
  return *(const gpumem_status_t*)context;
}

typedef struct kind {
  const char* name;
  gpumem_status_t (*create_raw)(gpumem_allocator_t** out);
  bool pool;
  bool needs_gpu;
  int32_t device;
} kind_t;

static const kind_t kinds[] = {
    {"host", create_host, false, false, -1},
    {"pool_host", create_host, true, false, -1},
    {"functions", create_functions, false, false, -1},
    {"pool_functions", create_functions, true, false, -1},
    {"device", create_device, false, true, 0},
    {"device_async", create_device_async, false, true, 0},
    {"device_async_default_pool", create_device_async_default_pool, false, true, 0},
    {"managed", create_managed, false, true, 0},
    {"pinned", create_pinned, false, true, -1},
    {"pool_device", create_device, true, true, 0},
    {"pool_device_async", create_device_async, true, true, 0},
    {"pool_device_async_default_pool", create_device_async_default_pool, true, true, 0},
    {"pool_managed", create_managed, true, true, 0},
    {"pool_pinned", create_pinned, true, true, -1},
};
#define KIND_COUNT (sizeof kinds / sizeof kinds[0])

static const kind_t* begin(void** state) {
  const kind_t* k = *state;
  if (k->needs_gpu) require_gpu();
  return k;
}

static gpumem_allocator_t* make(const kind_t* k, gpumem_allocator_t** out_upstream) {
  gpumem_allocator_t* raw = NULL;
  assert_ok(k->create_raw(&raw));
  *out_upstream = NULL;
  if (!k->pool) return raw;
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = raw;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&params, &pool));
  *out_upstream = raw;
  return pool;
}

static void unmake(gpumem_allocator_t* a, gpumem_allocator_t* upstream) {
  assert_ok(gpumem_allocator_destroy(a));
  assert_ok(gpumem_allocator_destroy(upstream));
}

/* A caller's stream for GPU kinds; for host kinds any value is only a key. */
static gpumem_stream_t stream_for(const kind_t* k) {
  return k->needs_gpu ? test_stream_create(0) : (gpumem_stream_t)0x1000;
}

static void stream_done(const kind_t* k, gpumem_stream_t s) {
  if (!k->needs_gpu) return;
  test_stream_sync(s);
  test_stream_destroy(s);
}

/* ---- Recording hooks ---- */

#define MAX_EVENTS 64

typedef struct recorder {
  gpumem_hook_info_t events[MAX_EVENTS];
  int tag[MAX_EVENTS]; /* which hook saw it, for order tests */
  int count;
} recorder_t;

typedef struct tagged {
  recorder_t* log;
  int tag;
} tagged_t;

static void record(recorder_t* r, const gpumem_hook_info_t* info, int tag) {
  if (r->count < MAX_EVENTS) {
    r->events[r->count] = *info;
    r->tag[r->count] = tag;
  }
  r->count++;
}

static void record_hook(const gpumem_hook_info_t* info, void* user_data) { record(user_data, info, 0); }

static void tagged_hook(const gpumem_hook_info_t* info, void* user_data) {
  const tagged_t* t = user_data;
  record(t->log, info, t->tag);
}

static const char* event_name(uint32_t event) {
  switch (event) {
    case GPUMEM_HOOK_MALLOC_PRE:
      return "MALLOC_PRE";
    case GPUMEM_HOOK_MALLOC_POST:
      return "MALLOC_POST";
    case GPUMEM_HOOK_UPSTREAM_ALLOC_PRE:
      return "UPSTREAM_ALLOC_PRE";
    case GPUMEM_HOOK_UPSTREAM_ALLOC_POST:
      return "UPSTREAM_ALLOC_POST";
    case GPUMEM_HOOK_FREE_PRE:
      return "FREE_PRE";
    case GPUMEM_HOOK_FREE_POST:
      return "FREE_POST";
    default:
      return "(unknown)";
  }
}

/* The recorded events are exactly these, in this order. */
static void assert_events(const recorder_t* r, const uint32_t* expected, int n) {
  bool same = r->count == n;
  for (int i = 0; same && i < n; i++) same = r->events[i].event == expected[i];
  if (!same) {
    print_error("recorded %d event(s):", r->count);
    for (int i = 0; i < r->count && i < MAX_EVENTS; i++) print_error(" %s", event_name(r->events[i].event));
    print_error("\nexpected %d:", n);
    for (int i = 0; i < n; i++) print_error(" %s", event_name(expected[i]));
    print_error("\n");
    fail();
  }
}

/* One event's fields, all of them. */
static void assert_info(const gpumem_hook_info_t* e, uint32_t event, int32_t device, gpumem_allocator_t* a, size_t size,
                        size_t mem_size, void* ptr, gpumem_stream_t stream, gpumem_status_t status) {
  assert_int_equal(e->struct_size, sizeof(gpumem_hook_info_t));
  assert_int_equal(e->event, event);
  assert_int_equal(e->device, device);
  assert_ptr_equal(e->allocator, a);
  assert_int_equal(e->size, size);
  assert_int_equal(e->mem_size, mem_size);
  assert_ptr_equal(e->ptr, ptr);
  assert_ptr_equal(e->stream, stream);
  assert_int_equal(e->status, status);
}

/* The free events: @c size is the bytes asked for, or 0 where not known, as the header allows. */
static void assert_free_info(const gpumem_hook_info_t* e, uint32_t event, int32_t device, gpumem_allocator_t* a,
                             size_t asked, size_t mem_size, void* ptr, gpumem_stream_t stream, gpumem_status_t status) {
  assert_true(e->size == 0 || e->size == asked);
  assert_info(e, event, device, a, e->size, mem_size, ptr, stream, status);
}

static uint64_t add(gpumem_allocator_t* a, uint32_t events, gpumem_hook_fn fn, void* user_data) {
  uint64_t id = 0;
  assert_ok(gpumem_allocator_add_hook(a, events, fn, user_data, &id));
  assert_true(id != 0);
  return id;
}

/* ---- Per kind ---- */

static void test_hooks_events_delivered(void** state) {
  const kind_t* k = begin(state);
  gpumem_stream_t s = stream_for(k);
  gpumem_stream_t free_stream = k->needs_gpu ? NULL : (gpumem_stream_t)0x2000;
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(k, &up);
  recorder_t r, ur;
  memset(&r, 0, sizeof r);
  memset(&ur, 0, sizeof ur);
  add(a, GPUMEM_HOOK_ALL, record_hook, &r);
  if (up) add(up, GPUMEM_HOOK_ALL, record_hook, &ur);

  void* p = NULL;
  assert_ok(gpumem_alloc(a, 1000, s, &p));
  if (k->needs_gpu) test_stream_sync(s); /* the free below is on another stream */
  if (k->pool) {
    static const uint32_t want[] = {GPUMEM_HOOK_MALLOC_PRE, GPUMEM_HOOK_UPSTREAM_ALLOC_PRE,
                                    GPUMEM_HOOK_UPSTREAM_ALLOC_POST, GPUMEM_HOOK_MALLOC_POST};
    assert_events(&r, want, 4);
    assert_info(&r.events[0], GPUMEM_HOOK_MALLOC_PRE, k->device, a, 1000, 0, NULL, s, GPUMEM_SUCCESS);
    /* A new block of exactly the rounded size, which the allocation starts. */
    assert_info(&r.events[1], GPUMEM_HOOK_UPSTREAM_ALLOC_PRE, k->device, a, 1024, 1024, NULL, s, GPUMEM_SUCCESS);
    assert_info(&r.events[2], GPUMEM_HOOK_UPSTREAM_ALLOC_POST, k->device, a, 1024, 1024, p, s, GPUMEM_SUCCESS);
    assert_info(&r.events[3], GPUMEM_HOOK_MALLOC_POST, k->device, a, 1000, 1024, p, s, GPUMEM_SUCCESS);
    /* The upstream is an allocator too: its own hooks saw the pool's request. */
    static const uint32_t up_want[] = {GPUMEM_HOOK_MALLOC_PRE, GPUMEM_HOOK_MALLOC_POST};
    assert_events(&ur, up_want, 2);
    assert_info(&ur.events[0], GPUMEM_HOOK_MALLOC_PRE, k->device, up, 1024, 0, NULL, s, GPUMEM_SUCCESS);
    assert_info(&ur.events[1], GPUMEM_HOOK_MALLOC_POST, k->device, up, 1024, 1024, p, s, GPUMEM_SUCCESS);
  } else {
    static const uint32_t want[] = {GPUMEM_HOOK_MALLOC_PRE, GPUMEM_HOOK_MALLOC_POST};
    assert_events(&r, want, 2);
    assert_info(&r.events[0], GPUMEM_HOOK_MALLOC_PRE, k->device, a, 1000, 0, NULL, s, GPUMEM_SUCCESS);
    assert_info(&r.events[1], GPUMEM_HOOK_MALLOC_POST, k->device, a, 1000, 1000, p, s, GPUMEM_SUCCESS);
  }

  r.count = 0;
  ur.count = 0;
  assert_ok(gpumem_free(a, p, free_stream));
  static const uint32_t free_want[] = {GPUMEM_HOOK_FREE_PRE, GPUMEM_HOOK_FREE_POST};
  assert_events(&r, free_want, 2);
  const size_t mem = k->pool ? 1024 : 1000;
  assert_free_info(&r.events[0], GPUMEM_HOOK_FREE_PRE, k->device, a, 1000, mem, p, free_stream, GPUMEM_SUCCESS);
  assert_free_info(&r.events[1], GPUMEM_HOOK_FREE_POST, k->device, a, 1000, mem, p, free_stream, GPUMEM_SUCCESS);
  assert_int_equal(ur.count, 0); /* a pool keeps the block */
  /* Freed on another stream, a pool over GPU memory hands the block out again only once that
   * stream's work up to the free is done. */
  if (k->needs_gpu) {
    test_cu_push(0); /* the legacy stream of device 0's primary context, where the free was */
    test_stream_sync(free_stream);
    test_cu_pop();
  }

  if (k->pool) {
    /* From the cache: no upstream events. */
    r.count = 0;
    void* again = NULL;
    assert_ok(gpumem_alloc(a, 1000, s, &again));
    assert_ptr_equal(again, p);
    static const uint32_t want[] = {GPUMEM_HOOK_MALLOC_PRE, GPUMEM_HOOK_MALLOC_POST};
    assert_events(&r, want, 2);
    assert_info(&r.events[1], GPUMEM_HOOK_MALLOC_POST, k->device, a, 1000, 1024, p, s, GPUMEM_SUCCESS);
    assert_int_equal(ur.count, 0);
    assert_ok(gpumem_free(a, again, s));

    /* Destroying the pool gives the block back through the upstream's free. */
    assert_ok(gpumem_allocator_destroy(a));
    assert_events(&ur, free_want, 2);
    assert_free_info(&ur.events[0], GPUMEM_HOOK_FREE_PRE, k->device, up, 1024, 1024, p, s, GPUMEM_SUCCESS);
    assert_free_info(&ur.events[1], GPUMEM_HOOK_FREE_POST, k->device, up, 1024, 1024, p, s, GPUMEM_SUCCESS);
    assert_ok(gpumem_allocator_destroy(up));
  } else {
    unmake(a, up);
  }
  stream_done(k, s);
}

static void test_hooks_failure_status_delivered(void** state) {
  const kind_t* k = begin(state);
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(k, &up);
  recorder_t r;
  memset(&r, 0, sizeof r);
  add(a, GPUMEM_HOOK_ALL, record_hook, &r);
  static const uint32_t malloc_want[] = {GPUMEM_HOOK_MALLOC_PRE, GPUMEM_HOOK_MALLOC_POST};
  static const uint32_t free_want[] = {GPUMEM_HOOK_FREE_PRE, GPUMEM_HOOK_FREE_POST};

  void* p = (void*)0x1;
  const gpumem_status_t st = gpumem_alloc(a, SIZE_MAX, NULL, &p);
  assert_true(st != GPUMEM_SUCCESS);
  assert_null(p);
  /* A pool refuses it before anything is asked of its upstream. */
  if (k->pool) assert_int_equal(st, GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_events(&r, malloc_want, 2);
  assert_info(&r.events[0], GPUMEM_HOOK_MALLOC_PRE, k->device, a, SIZE_MAX, 0, NULL, NULL, GPUMEM_SUCCESS);
  assert_info(&r.events[1], GPUMEM_HOOK_MALLOC_POST, k->device, a, SIZE_MAX, 0, NULL, NULL, st);

  if (k->pool) {
    /* Out of memory by the pool's limit: the POST carries it. */
    assert_ok(gpumem_pool_set_limit(a, 1024));
    r.count = 0;
    p = (void*)0x1;
    assert_status(gpumem_alloc(a, 2000, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
    assert_null(p);
    assert_events(&r, malloc_want, 2);
    assert_info(&r.events[0], GPUMEM_HOOK_MALLOC_PRE, k->device, a, 2000, 0, NULL, NULL, GPUMEM_SUCCESS);
    assert_info(&r.events[1], GPUMEM_HOOK_MALLOC_POST, k->device, a, 2000, 0, NULL, NULL, GPUMEM_ERROR_OUT_OF_MEMORY);
  }

  /* A refused free: its POST carries GPUMEM_ERROR_NOT_OWNED. */
  int on_stack = 0;
  r.count = 0;
  assert_status(gpumem_free(a, &on_stack, NULL), GPUMEM_ERROR_NOT_OWNED);
  assert_events(&r, free_want, 2);
  assert_free_info(&r.events[0], GPUMEM_HOOK_FREE_PRE, k->device, a, 0, 0, &on_stack, NULL, GPUMEM_SUCCESS);
  assert_free_info(&r.events[1], GPUMEM_HOOK_FREE_POST, k->device, a, 0, 0, &on_stack, NULL, GPUMEM_ERROR_NOT_OWNED);
  unmake(a, up);
}

static void test_hooks_masks_filter(void** state) {
  const kind_t* k = begin(state);
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(k, &up);
  recorder_t some, upstream_only, pre_only;
  memset(&some, 0, sizeof some);
  memset(&upstream_only, 0, sizeof upstream_only);
  memset(&pre_only, 0, sizeof pre_only);
  add(a, GPUMEM_HOOK_MALLOC_POST | GPUMEM_HOOK_FREE_PRE, record_hook, &some);
  add(a, GPUMEM_HOOK_UPSTREAM_ALLOC_POST, record_hook, &upstream_only);
  add(a, GPUMEM_HOOK_MALLOC_PRE | GPUMEM_HOOK_FREE_PRE, record_hook, &pre_only);

  void* p = NULL;
  assert_ok(gpumem_alloc(a, 600, NULL, &p));
  assert_ok(gpumem_free(a, p, NULL));
  static const uint32_t some_want[] = {GPUMEM_HOOK_MALLOC_POST, GPUMEM_HOOK_FREE_PRE};
  assert_events(&some, some_want, 2);
  assert_ptr_equal(some.events[0].ptr, p);
  assert_int_equal(some.events[0].mem_size, k->pool ? 1024 : 600);
  static const uint32_t pre_want[] = {GPUMEM_HOOK_MALLOC_PRE, GPUMEM_HOOK_FREE_PRE};
  assert_events(&pre_only, pre_want, 2);
  if (k->pool) {
    static const uint32_t up_want[] = {GPUMEM_HOOK_UPSTREAM_ALLOC_POST};
    assert_events(&upstream_only, up_want, 1);
    assert_ptr_equal(upstream_only.events[0].ptr, p);
  } else {
    /* Only pools have an upstream. */
    assert_int_equal(upstream_only.count, 0);
  }
  unmake(a, up);
}

static void test_hooks_run_in_order_added(void** state) {
  const kind_t* k = begin(state);
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(k, &up);
  recorder_t log;
  memset(&log, 0, sizeof log);
  tagged_t hooks[3] = {{&log, 1}, {&log, 2}, {&log, 3}};
  for (int i = 0; i < 3; i++) add(a, GPUMEM_HOOK_ALL, tagged_hook, &hooks[i]);

  void* p = NULL;
  assert_ok(gpumem_alloc(a, 100, NULL, &p));
  assert_ok(gpumem_free(a, p, NULL));
  /* Each event reaches hooks 1, 2, 3 in turn before the next event. */
  const int events = k->pool ? 6 : 4;
  assert_int_equal(log.count, 3 * events);
  for (int e = 0; e < events; e++) {
    for (int h = 0; h < 3; h++) {
      assert_int_equal(log.tag[3 * e + h], h + 1);
      assert_int_equal(log.events[3 * e + h].event, log.events[3 * e].event);
    }
  }
  assert_int_equal(log.events[0].event, GPUMEM_HOOK_MALLOC_PRE);
  assert_int_equal(log.events[3 * (events - 1)].event, GPUMEM_HOOK_FREE_POST);
  unmake(a, up);
}

static void test_hooks_remove_stops_delivery(void** state) {
  const kind_t* k = begin(state);
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(k, &up);
  recorder_t first, second;
  memset(&first, 0, sizeof first);
  memset(&second, 0, sizeof second);
  const uint64_t id1 = add(a, GPUMEM_HOOK_ALL, record_hook, &first);
  const uint64_t id2 = add(a, GPUMEM_HOOK_MALLOC_PRE, record_hook, &second);
  assert_true(id1 != id2);

  assert_ok(gpumem_allocator_remove_hook(a, id1));
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 100, NULL, &p));
  assert_ok(gpumem_free(a, p, NULL));
  assert_int_equal(first.count, 0);
  assert_int_equal(second.count, 1);

  assert_ok(gpumem_allocator_remove_hook(a, id2));
  assert_ok(gpumem_alloc(a, 100, NULL, &p));
  assert_ok(gpumem_free(a, p, NULL));
  assert_int_equal(first.count, 0);
  assert_int_equal(second.count, 1);

  assert_status(gpumem_allocator_remove_hook(a, id2), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("no hook with id");
  assert_status(gpumem_allocator_remove_hook(a, 0), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("no hook with id 0");
  assert_status(gpumem_allocator_remove_hook(a, 987654321), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("no hook with id 987654321");
  unmake(a, up);
}

typedef struct reentrant {
  gpumem_allocator_t* self;
  gpumem_allocator_t* other;
  recorder_t* added_log;
  uint64_t my_id, added_id;
  int calls;
  gpumem_status_t add_status, remove_status, alloc_status, free_status;
} reentrant_t;

/* Adds a hook, removes itself, and allocates elsewhere, all from inside a delivery. */
static void reentrant_hook(const gpumem_hook_info_t* info, void* user_data) {
  reentrant_t* r = user_data;
  (void)info;
  r->calls++;
  r->add_status = gpumem_allocator_add_hook(r->self, GPUMEM_HOOK_ALL, record_hook, r->added_log, &r->added_id);
  r->remove_status = gpumem_allocator_remove_hook(r->self, r->my_id);
  void* p = NULL;
  r->alloc_status = gpumem_alloc(r->other, 64, NULL, &p);
  r->free_status = gpumem_free(r->other, p, NULL);
}

static void test_hooks_hook_may_call_gpumem(void** state) {
  const kind_t* k = begin(state);
  gpumem_allocator_t* up;
  gpumem_allocator_t* a = make(k, &up);
  gpumem_allocator_t* other = NULL;
  assert_ok(gpumem_allocator_create_host(0, &other));
  recorder_t added;
  memset(&added, 0, sizeof added);
  reentrant_t r;
  memset(&r, 0, sizeof r);
  r.self = a;
  r.other = other;
  r.added_log = &added;
  r.add_status = r.remove_status = r.alloc_status = r.free_status = GPUMEM_ERROR_INTERNAL;
  r.my_id = add(a, GPUMEM_HOOK_MALLOC_PRE, reentrant_hook, &r);

  void* p = NULL;
  assert_ok(gpumem_alloc(a, 100, NULL, &p));
  assert_int_equal(r.calls, 1);
  assert_int_equal(r.add_status, GPUMEM_SUCCESS);
  assert_int_equal(r.remove_status, GPUMEM_SUCCESS);
  assert_int_equal(r.alloc_status, GPUMEM_SUCCESS);
  assert_int_equal(r.free_status, GPUMEM_SUCCESS);
  assert_true(r.added_id != 0 && r.added_id != r.my_id);
  gpumem_allocator_stats_t os;
  memset(&os, 0, sizeof os);
  os.struct_size = sizeof os;
  assert_ok(gpumem_allocator_get_stats(other, &os));
  assert_int_equal(os.alloc_count, 1);
  assert_int_equal(os.free_count, 1);

  /* The next call reaches the added hook, not the removed one. */
  added.count = 0;
  void* q = NULL;
  assert_ok(gpumem_alloc(a, 2222, NULL, &q));
  assert_int_equal(r.calls, 1);
  int pre = 0;
  for (int i = 0; i < added.count; i++) {
    if (added.events[i].event == GPUMEM_HOOK_MALLOC_PRE) {
      assert_int_equal(added.events[i].size, 2222);
      pre++;
    }
  }
  assert_int_equal(pre, 1);
  assert_ok(gpumem_free(a, q, NULL));
  assert_ok(gpumem_free(a, p, NULL));
  assert_ok(gpumem_allocator_remove_hook(a, r.added_id));
  unmake(a, up);
  assert_ok(gpumem_allocator_destroy(other));
}

/* ---- Once ---- */

static void test_hooks_pool_upstream_failure_delivered(void** state) {
  (void)state;
  gpumem_status_t refusal = GPUMEM_ERROR_OUT_OF_MEMORY;
  gpumem_allocator_t* up = NULL;
  assert_ok(create_functions_with(refusing_alloc, &refusal, &up));
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = up;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&params, &pool));
  recorder_t r;
  memset(&r, 0, sizeof r);
  add(pool, GPUMEM_HOOK_ALL, record_hook, &r);

  /* Out of memory: tried, cached blocks released (none), tried again; no reclaim callback is
   * registered in this process. */
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(pool, 1000, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  static const uint32_t oom_want[] = {GPUMEM_HOOK_MALLOC_PRE,          GPUMEM_HOOK_UPSTREAM_ALLOC_PRE,
                                      GPUMEM_HOOK_UPSTREAM_ALLOC_POST, GPUMEM_HOOK_UPSTREAM_ALLOC_PRE,
                                      GPUMEM_HOOK_UPSTREAM_ALLOC_POST, GPUMEM_HOOK_MALLOC_POST};
  assert_events(&r, oom_want, 6);
  assert_info(&r.events[1], GPUMEM_HOOK_UPSTREAM_ALLOC_PRE, -1, pool, 1024, 1024, NULL, NULL, GPUMEM_SUCCESS);
  assert_info(&r.events[2], GPUMEM_HOOK_UPSTREAM_ALLOC_POST, -1, pool, 1024, 1024, NULL, NULL,
              GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_info(&r.events[4], GPUMEM_HOOK_UPSTREAM_ALLOC_POST, -1, pool, 1024, 1024, NULL, NULL,
              GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_info(&r.events[5], GPUMEM_HOOK_MALLOC_POST, -1, pool, 1000, 0, NULL, NULL, GPUMEM_ERROR_OUT_OF_MEMORY);

  /* Any other refusal is not retried and reaches the caller as it is. */
  refusal = GPUMEM_ERROR_NOT_SUPPORTED;
  r.count = 0;
  p = (void*)0x1;
  assert_status(gpumem_alloc(pool, 1000, NULL, &p), GPUMEM_ERROR_NOT_SUPPORTED);
  assert_null(p);
  static const uint32_t other_want[] = {GPUMEM_HOOK_MALLOC_PRE, GPUMEM_HOOK_UPSTREAM_ALLOC_PRE,
                                        GPUMEM_HOOK_UPSTREAM_ALLOC_POST, GPUMEM_HOOK_MALLOC_POST};
  assert_events(&r, other_want, 4);
  assert_int_equal(r.events[2].status, GPUMEM_ERROR_NOT_SUPPORTED);
  assert_int_equal(r.events[3].status, GPUMEM_ERROR_NOT_SUPPORTED);

  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(up));
}

static void test_hooks_add_bad_input(void** state) {
  (void)state;
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_allocator_create_host(0, &a));
  recorder_t r;
  memset(&r, 0, sizeof r);
  uint64_t id = 77;

  assert_status(gpumem_allocator_add_hook(a, GPUMEM_HOOK_ALL, NULL, &r, &id), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("hook is NULL");
  assert_int_equal(id, 0);
  id = 77;
  assert_status(gpumem_allocator_add_hook(a, 0, record_hook, &r, &id), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("events 0x0");
  assert_int_equal(id, 0);
  id = 77;
  assert_status(gpumem_allocator_add_hook(a, 0x40, record_hook, &r, &id), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("events 0x40");
  assert_int_equal(id, 0);
  id = 77;
  assert_status(gpumem_allocator_add_hook(a, GPUMEM_HOOK_ALL | 0x40, record_hook, &r, &id),
                GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("events 0x7f");
  assert_int_equal(id, 0);
  id = 77;
  assert_status(gpumem_allocator_add_hook(a, 0x80000000u, record_hook, &r, &id), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_int_equal(id, 0);
  assert_status(gpumem_allocator_add_hook(a, GPUMEM_HOOK_ALL, record_hook, &r, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_hook_id is NULL");
  id = 77;
  assert_status(gpumem_allocator_add_hook(NULL, GPUMEM_HOOK_ALL, record_hook, &r, &id), GPUMEM_ERROR_INVALID_HANDLE);
  assert_int_equal(id, 0);
  assert_status(gpumem_allocator_remove_hook(NULL, 1), GPUMEM_ERROR_INVALID_HANDLE);

  /* None of the refused hooks was added. */
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 100, NULL, &p));
  assert_ok(gpumem_free(a, p, NULL));
  assert_int_equal(r.count, 0);
  assert_ok(gpumem_allocator_destroy(a));
}

/* ---- The table: each per-kind test once per kind ---- */

typedef struct per_kind {
  const char* name;
  CMUnitTestFunction fn;
} per_kind_t;

static const per_kind_t per_kind[] = {
    {"test_hooks_events_delivered", test_hooks_events_delivered},
    {"test_hooks_failure_status_delivered", test_hooks_failure_status_delivered},
    {"test_hooks_masks_filter", test_hooks_masks_filter},
    {"test_hooks_run_in_order_added", test_hooks_run_in_order_added},
    {"test_hooks_remove_stops_delivery", test_hooks_remove_stops_delivery},
    {"test_hooks_hook_may_call_gpumem", test_hooks_hook_may_call_gpumem},
};
#define PER_KIND_COUNT (sizeof per_kind / sizeof per_kind[0])

int main(void) {
  static char names[PER_KIND_COUNT * KIND_COUNT][96];
  static struct CMUnitTest tests[PER_KIND_COUNT * KIND_COUNT + 2];
  size_t n = 0;
  for (size_t t = 0; t < PER_KIND_COUNT; t++) {
    for (size_t k = 0; k < KIND_COUNT; k++) {
      snprintf(names[n], sizeof names[n], "%s/%s", per_kind[t].name, kinds[k].name);
      tests[n] = (struct CMUnitTest){names[n], per_kind[t].fn, NULL, NULL, (void*)&kinds[k]};
      n++;
    }
  }
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_hooks_pool_upstream_failure_delivered);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_hooks_add_bad_input);
  return _cmocka_run_group_tests("test_hooks", tests, n, NULL, NULL);
}
