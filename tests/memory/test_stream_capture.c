/* (One file over the limit: each synchronous function meets each capture scenario here, through one
 * table and one harness.) Synchronous calls while a stream is being captured into a CUDA graph: refused with
 * GPUMEM_ERROR_STREAM_CAPTURE before they reach the driver, whose refusal would invalidate the
 * capture, so the capture goes on; nothing is half done. Every synchronous function is tried in each
 * capture mode (global, thread-local, relaxed), with the capture on this thread or another, on a
 * blocking stream or the per-thread default stream. Stream-ordered calls on the capturing stream
 * are captured, and the graph does their work each time it is launched.
 *
 * CTest runs the binary twice: with the argument "model" over the fake driver (tests/driver), which
 * breaks a capture wherever the driver would (GPUMEM_CUDA_DRIVER names it); and on a GPU, where the
 * tests that need real memory run too, and all skip without a device. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_bytes.h"
#include "test_cuda.h"

typedef int (*test_cu_fn_begin_capture)(gpumem_stream_t s, int mode);
typedef int (*test_cu_fn_end_capture)(gpumem_stream_t s, void** graph);
typedef int (*test_cu_fn_is_capturing)(gpumem_stream_t s, int* status);
typedef int (*test_cu_fn_exchange_mode)(int* mode);
typedef int (*test_cu_fn_graph_destroy)(void* graph);
typedef int (*test_cu_fn_graph_instantiate)(void** exec, void* graph, unsigned long long flags);
typedef int (*test_cu_fn_graph_launch)(void* exec, gpumem_stream_t s);
typedef int (*test_cu_fn_graph_exec_destroy)(void* exec);

/* cuda.h's values. */
enum { MODE_GLOBAL = 0, MODE_THREAD_LOCAL = 1, MODE_RELAXED = 2 };
enum { STATUS_NONE = 0, STATUS_ACTIVE = 1, STATUS_INVALIDATED = 2 };
enum { CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901 };

enum { kSize = 4096 };

/* Over the fake driver ("model"): no real memory, and the fake's hooks to read. */
static bool model;

static void* fake_hook(const char* name) {
  void* lib = dlopen(getenv("GPUMEM_CUDA_DRIVER"), RTLD_NOW | RTLD_LOCAL);
  assert_non_null(lib);
  void* fn = dlsym(lib, name);
  assert_non_null(fn);
  return fn;
}

/* Calls the fake refused for a capture (and broke it), since it was loaded. */
static size_t fake_invalidating_calls(void) {
  return ((size_t(*)(void))fake_hook("fake_cuda_capture_invalidating_calls"))();
}

/* Tests that need memory a GPU has, or the driver's graphs. */
#define require_real_gpu()                          \
  do {                                              \
    require_gpu();                                  \
    if (model) {                                    \
      print_message("needs a GPU, not the fake\n"); \
      skip();                                       \
    }                                               \
  } while (0)

/* ---- Captures, on this thread or another ----------------------------------------------------- */

typedef struct {
  const char* name;
  int mode;               /* the capture's */
  bool other_thread;      /* begun, and ended, on a thread of its own */
  bool per_thread_stream; /* on the per-thread default stream of the capturing thread */
  int thread_mode;        /* this thread's capture interaction mode during the calls */
} scenario_t;

typedef struct {
  const scenario_t* scenario;
  gpumem_stream_t stream;
  pthread_t thread;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  int stage; /* 1: begun, 2: to end, 3: ended */
  int begin_result, end_result;
  int previous_thread_mode;
  bool open;
} capture_t;

/* One capture at a time, here, so that a failed test's teardown can end it. */
static capture_t the_capture;

static int exchange_mode(int mode) {
  assert_int_equal(((test_cu_fn_exchange_mode)test_cu_symbol("cuThreadExchangeStreamCaptureMode"))(&mode), 0);
  return mode;
}

/* Begins the capture on the calling thread; a blocking stream (flags 0) unless the per-thread one. */
static void capture_start_here(capture_t* c) {
  test_cu_push(0);
  if (c->scenario->per_thread_stream) {
    c->stream = GPUMEM_STREAM_PER_THREAD;
  } else {
    assert_int_equal(((test_cu_fn_stream_create)test_cu_symbol("cuStreamCreate"))(&c->stream, 0), 0);
  }
  c->begin_result = ((test_cu_fn_begin_capture)test_cu_symbol("cuStreamBeginCapture_v2"))(c->stream, c->scenario->mode);
  test_cu_pop();
}

static int capture_finish_here(capture_t* c) {
  void* graph = NULL;
  test_cu_push(0);
  const int r = ((test_cu_fn_end_capture)test_cu_symbol("cuStreamEndCapture"))(c->stream, &graph);
  test_cu_pop();
  if (graph) assert_int_equal(((test_cu_fn_graph_destroy)test_cu_symbol("cuGraphDestroy"))(graph), 0);
  if (!c->scenario->per_thread_stream) test_stream_destroy(c->stream);
  return r;
}

static void* capture_thread(void* arg) {
  capture_t* c = arg;
  capture_start_here(c);
  pthread_mutex_lock(&c->mutex);
  c->stage = 1;
  pthread_cond_broadcast(&c->cond);
  while (c->stage != 2) pthread_cond_wait(&c->cond, &c->mutex);
  pthread_mutex_unlock(&c->mutex);
  const int r = capture_finish_here(c);
  pthread_mutex_lock(&c->mutex);
  c->end_result = r;
  c->stage = 3;
  pthread_cond_broadcast(&c->cond);
  pthread_mutex_unlock(&c->mutex);
  return NULL;
}

static capture_t* capture_begin(const scenario_t* scenario) {
  capture_t* c = &the_capture;
  assert_false(c->open);
  memset(c, 0, sizeof *c);
  c->scenario = scenario;
  if (scenario->other_thread) {
    pthread_mutex_init(&c->mutex, NULL);
    pthread_cond_init(&c->cond, NULL);
    assert_int_equal(pthread_create(&c->thread, NULL, capture_thread, c), 0);
    pthread_mutex_lock(&c->mutex);
    while (c->stage != 1) pthread_cond_wait(&c->cond, &c->mutex);
    pthread_mutex_unlock(&c->mutex);
  } else {
    capture_start_here(c);
  }
  c->open = true;
  assert_int_equal(c->begin_result, 0);
  c->previous_thread_mode = exchange_mode(scenario->thread_mode);
  return c;
}

/* The capture's status as the driver tells it. */
static int capture_status(const capture_t* c) {
  int status = -1;
  test_cu_push(0);
  assert_int_equal(((test_cu_fn_is_capturing)test_cu_symbol("cuStreamIsCapturing"))(c->stream, &status), 0);
  test_cu_pop();
  return status;
}

/* Ends the capture; the driver's answer: 0 for a graph, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED for a
 * capture something broke. */
static int capture_end(capture_t* c) {
  c->open = false;
  exchange_mode(c->previous_thread_mode);
  if (!c->scenario->other_thread) return capture_finish_here(c);
  pthread_mutex_lock(&c->mutex);
  c->stage = 2;
  pthread_cond_broadcast(&c->cond);
  while (c->stage != 3) pthread_cond_wait(&c->cond, &c->mutex);
  pthread_mutex_unlock(&c->mutex);
  assert_int_equal(pthread_join(c->thread, NULL), 0);
  pthread_mutex_destroy(&c->mutex);
  pthread_cond_destroy(&c->cond);
  return c->end_result;
}

/* After each test: a capture a failed test left open is ended. */
static int end_open_capture(void** state) {
  (void)state;
  if (the_capture.open) capture_end(&the_capture);
  return 0;
}

static const scenario_t kScenarios[] = {
    {"global mode", MODE_GLOBAL, false, false, MODE_GLOBAL},
    {"thread-local mode", MODE_THREAD_LOCAL, false, false, MODE_GLOBAL},
    {"relaxed mode", MODE_RELAXED, false, false, MODE_GLOBAL},
    {"global mode, on another thread", MODE_GLOBAL, true, false, MODE_GLOBAL},
    {"thread-local mode, on another thread", MODE_THREAD_LOCAL, true, false, MODE_GLOBAL},
    {"relaxed mode, on another thread", MODE_RELAXED, true, false, MODE_GLOBAL},
    {"global mode, on the per-thread default stream", MODE_GLOBAL, false, true, MODE_GLOBAL},
    {"global mode, with this thread in relaxed mode", MODE_GLOBAL, false, false, MODE_RELAXED},
    {"global mode, on another thread, with this thread in thread-local mode", MODE_GLOBAL, true, false,
     MODE_THREAD_LOCAL},
};

/* ---- The memory the calls work on, made before the capture -------------------------------------- */

typedef struct {
  unsigned char* dev; /* device memory */
  unsigned char* dev2;
  unsigned char* managed;
  unsigned char* pinned;     /* gpumem_host_alloc; over the fake (which allocates nothing) a registration */
  unsigned char* registered; /* gpumem_host_register */
  unsigned char* plain;      /* whole pages of plain host memory */
  unsigned char* to_pin;     /* whole pages no registration covers */
  unsigned char* cached;     /* pinned and unpinned: kept registered in the pinning service's cache */
  gpumem_array_t* array;     /* a GPU only */
  bool staging;              /* gpumem holds staging buffers (a GPU only) */
} fixture_t;

static unsigned char* pages(size_t n) {
  void* p = NULL;
  assert_int_equal(posix_memalign(&p, (size_t)sysconf(_SC_PAGESIZE), n), 0);
  memset(p, 0x5a, n);
  return p;
}

static unsigned char* registered_pages(size_t n) {
  unsigned char* p = pages(n);
  assert_ok(gpumem_host_register(p, n, 0));
  return p;
}

static void fixture_make(fixture_t* f) {
  memset(f, 0, sizeof *f);
  if (model) {
    f->dev = ((void* (*)(int, size_t))fake_hook("fake_cuda_device_memory"))(0, kSize);
    f->dev2 = ((void* (*)(int, size_t))fake_hook("fake_cuda_device_memory"))(0, kSize);
    f->managed = ((void* (*)(void))fake_hook("fake_cuda_managed_address"))();
    f->pinned = registered_pages(kSize);
    assert_non_null(f->dev);
    assert_non_null(f->dev2);
  } else {
    f->dev = memory_alloc(KIND_DEVICE, 0, kSize);
    f->dev2 = memory_alloc(KIND_DEVICE, 0, kSize);
    f->managed = memory_alloc(KIND_MANAGED, 0, kSize);
    f->pinned = memory_alloc(KIND_PINNED, 0, kSize);
    f->array = array_create_on(0, GPUMEM_FORMAT_U8, 1, 1, 1, 0);
    /* A staged copy (pageable host memory to the device, 1 MiB or more) leaves buffers held. */
    enum { kStaged = 4 << 20 };
    unsigned char* big = memory_alloc(KIND_DEVICE, 0, kStaged);
    unsigned char* host = checked_malloc(kStaged);
    memset(host, 1, kStaged);
    assert_ok(gpumem_copy(big, host, kStaged));
    free(host);
    memory_free(KIND_DEVICE, big);
    size_t held = 0;
    assert_ok(gpumem_copy_staging_get_held(&held));
    f->staging = held > 0;
  }
  f->registered = registered_pages(kSize);
  f->plain = pages(kSize);
  f->to_pin = pages(kSize);
  f->cached = pages(kSize);
  assert_ok(gpumem_pin(f->cached, kSize, 0));
  assert_ok(gpumem_unpin(f->cached, kSize));
}

static void fixture_free(fixture_t* f) {
  if (model) {
    assert_ok(gpumem_host_unregister(f->pinned));
    free(f->pinned);
  } else {
    memory_free(KIND_DEVICE, f->dev);
    memory_free(KIND_DEVICE, f->dev2);
    memory_free(KIND_MANAGED, f->managed);
    memory_free(KIND_PINNED, f->pinned);
    assert_ok(gpumem_array_destroy(f->array));
    assert_ok(gpumem_copy_staging_release());
  }
  assert_ok(gpumem_host_unregister(f->registered));
  free(f->registered);
  assert_ok(gpumem_pin_forget(f->cached, kSize));
  free(f->cached);
  free(f->plain);
  free(f->to_pin);
}

/* ---- The synchronous calls ------------------------------------------------------------------ */

static copy_side_t side(void* p) {
  const copy_side_t s = {p, NULL, 8, 2, 1, 64, 16};
  return s;
}
/* 48 x 12 x 3 bytes inside a 4 KiB buffer of 4 slices of 16 rows of 64 bytes, on either side. */
static gpumem_copy3d_t box3d(void* dst, void* src) { return copy3d_of(side(dst), side(src), 48, 12, 3); }
static gpumem_copy2d_t box2d(void* dst, void* src) {
  const gpumem_copy3d_t c = box3d(dst, src);
  return copy2d_of_3d(&c);
}

static gpumem_status_t call_device_alloc(fixture_t* f) {
  (void)f;
  void* p = (void*)0x1;
  const gpumem_status_t st = gpumem_device_alloc(0, kSize, &p);
  assert_null(p);
  return st;
}
static gpumem_status_t call_device_free(fixture_t* f) { return gpumem_device_free(f->dev); }
static gpumem_status_t call_host_alloc(fixture_t* f) {
  (void)f;
  void* p = (void*)0x1;
  const gpumem_status_t st = gpumem_host_alloc(kSize, 0, &p);
  assert_null(p);
  return st;
}
static gpumem_status_t call_host_free(fixture_t* f) { return gpumem_host_free(f->pinned); }
static gpumem_status_t call_host_register(fixture_t* f) { return gpumem_host_register(f->plain, kSize, 0); }
static gpumem_status_t call_host_unregister(fixture_t* f) { return gpumem_host_unregister(f->registered); }
static gpumem_status_t call_managed_alloc(fixture_t* f) {
  (void)f;
  void* p = (void*)0x1;
  const gpumem_status_t st = gpumem_managed_alloc(0, kSize, 0, &p);
  assert_null(p);
  return st;
}
static gpumem_status_t call_managed_free(fixture_t* f) { return gpumem_managed_free(f->managed); }
static gpumem_status_t call_memset8(fixture_t* f) { return gpumem_memset(f->dev, 0x11, 1, kSize); }
static gpumem_status_t call_memset16(fixture_t* f) { return gpumem_memset(f->dev, 0x1122, 2, kSize / 2); }
static gpumem_status_t call_memset32(fixture_t* f) { return gpumem_memset(f->managed, 0x11223344u, 4, kSize / 4); }
static gpumem_status_t call_copy_h2d(fixture_t* f) { return gpumem_copy(f->dev, f->plain, kSize); }
static gpumem_status_t call_copy_d2h(fixture_t* f) { return gpumem_copy(f->plain, f->dev, kSize); }
static gpumem_status_t call_copy_d2d(fixture_t* f) { return gpumem_copy(f->dev2, f->dev, kSize); }
static gpumem_status_t call_copy_pinned(fixture_t* f) { return gpumem_copy(f->registered, f->managed, kSize); }
static gpumem_status_t call_copy2d_d2d(fixture_t* f) {
  const gpumem_copy2d_t c = box2d(f->dev2, f->dev);
  return gpumem_copy2d(&c);
}
static gpumem_status_t call_copy2d_h2d(fixture_t* f) {
  const gpumem_copy2d_t c = box2d(f->dev, f->plain);
  return gpumem_copy2d(&c);
}
static gpumem_status_t call_copy2d_d2h(fixture_t* f) {
  const gpumem_copy2d_t c = box2d(f->plain, f->dev);
  return gpumem_copy2d(&c);
}
static gpumem_status_t call_copy3d_d2d(fixture_t* f) {
  const gpumem_copy3d_t c = box3d(f->dev2, f->dev);
  return gpumem_copy3d(&c);
}
static gpumem_status_t call_copy3d_h2d(fixture_t* f) {
  const gpumem_copy3d_t c = box3d(f->dev, f->plain);
  return gpumem_copy3d(&c);
}
static gpumem_status_t call_copy3d_d2h(fixture_t* f) {
  const gpumem_copy3d_t c = box3d(f->plain, f->dev);
  return gpumem_copy3d(&c);
}
static gpumem_status_t call_memset_async_legacy(fixture_t* f) {
  return gpumem_memset_async(f->dev, 0x11, 1, kSize, NULL);
}
static gpumem_status_t call_copy_async_legacy(fixture_t* f) {
  return gpumem_copy_async(f->dev, f->plain, kSize, GPUMEM_STREAM_LEGACY);
}
static gpumem_status_t call_copy2d_async_legacy(fixture_t* f) {
  const gpumem_copy2d_t c = box2d(f->dev2, f->dev);
  return gpumem_copy2d_async(&c, NULL);
}
static gpumem_status_t call_copy3d_async_legacy(fixture_t* f) {
  const gpumem_copy3d_t c = box3d(f->dev, f->plain);
  return gpumem_copy3d_async(&c, NULL);
}
static gpumem_status_t call_device_alloc_async_legacy(fixture_t* f) {
  (void)f;
  void* p = (void*)0x1;
  const gpumem_status_t st = gpumem_device_alloc_async(0, kSize, NULL, &p);
  assert_null(p);
  return st;
}
static gpumem_status_t call_prefetch_legacy(fixture_t* f) {
  return gpumem_managed_prefetch(f->managed, kSize, 0, GPUMEM_STREAM_LEGACY);
}
static gpumem_status_t call_array_create(fixture_t* f) {
  (void)f;
  const gpumem_array_desc_t desc = {sizeof(gpumem_array_desc_t), 0, GPUMEM_FORMAT_F32, 1, 1, 1, 0};
  gpumem_array_t* array = (gpumem_array_t*)0x1;
  const gpumem_status_t st = gpumem_array_create(&desc, &array);
  assert_null(array);
  return st;
}
static gpumem_status_t call_array_destroy(fixture_t* f) { return gpumem_array_destroy(f->array); }
static gpumem_status_t call_pin(fixture_t* f) { return gpumem_pin(f->to_pin, kSize, 0); }
static gpumem_status_t call_pin_forget(fixture_t* f) { return gpumem_pin_forget(f->cached, kSize); }
static gpumem_status_t call_pin_cache_flush(fixture_t* f) {
  (void)f;
  return gpumem_pin_cache_flush();
}
static gpumem_status_t call_staging_release(fixture_t* f) {
  (void)f;
  return gpumem_copy_staging_release();
}

typedef struct {
  const char* label;
  const char* fn;     /* named at the start of the detail */
  const char* advice; /* a piece of what the detail says to do */
  gpumem_status_t (*call)(fixture_t* f);
  int needs; /* 0: always; 1: an array (a GPU); 2: staging buffers held (a GPU) */
} sync_call_t;

static const sync_call_t kCalls[] = {
    {"gpumem_device_alloc", "gpumem_device_alloc", "gpumem_device_alloc_async on the capturing stream",
     call_device_alloc, 0},
    {"gpumem_device_free", "gpumem_device_free", "gpumem_device_free_async on the capturing stream", call_device_free,
     0},
    {"gpumem_host_alloc", "gpumem_host_alloc", "before the capture begins", call_host_alloc, 0},
    {"gpumem_host_free", "gpumem_host_free", "after the capture ends", call_host_free, 0},
    {"gpumem_host_register", "gpumem_host_register", "before the capture begins", call_host_register, 0},
    {"gpumem_host_unregister", "gpumem_host_unregister", "after the capture ends", call_host_unregister, 0},
    {"gpumem_managed_alloc", "gpumem_managed_alloc", "before the capture begins", call_managed_alloc, 0},
    {"gpumem_managed_free", "gpumem_managed_free", "after the capture ends", call_managed_free, 0},
    {"gpumem_memset, 8-bit", "gpumem_memset", "gpumem_memset_async", call_memset8, 0},
    {"gpumem_memset, 16-bit", "gpumem_memset", "gpumem_memset_async", call_memset16, 0},
    {"gpumem_memset, 32-bit, managed", "gpumem_memset", "gpumem_memset_async", call_memset32, 0},
    {"gpumem_copy, host to device", "gpumem_copy", "gpumem_copy_async", call_copy_h2d, 0},
    {"gpumem_copy, device to host", "gpumem_copy", "gpumem_copy_async", call_copy_d2h, 0},
    {"gpumem_copy, device to device", "gpumem_copy", "gpumem_copy_async", call_copy_d2d, 0},
    {"gpumem_copy, managed to registered", "gpumem_copy", "gpumem_copy_async", call_copy_pinned, 0},
    {"gpumem_copy2d, device to device", "gpumem_copy2d", "gpumem_copy2d_async", call_copy2d_d2d, 0},
    {"gpumem_copy2d, host to device", "gpumem_copy2d", "gpumem_copy2d_async", call_copy2d_h2d, 0},
    {"gpumem_copy2d, device to host", "gpumem_copy2d", "gpumem_copy2d_async", call_copy2d_d2h, 0},
    {"gpumem_copy3d, device to device", "gpumem_copy3d", "gpumem_copy3d_async", call_copy3d_d2d, 0},
    {"gpumem_copy3d, host to device", "gpumem_copy3d", "gpumem_copy3d_async", call_copy3d_h2d, 0},
    {"gpumem_copy3d, device to host", "gpumem_copy3d", "gpumem_copy3d_async", call_copy3d_d2h, 0},
    {"gpumem_memset_async on the legacy stream", "gpumem_memset_async", "on the capturing stream",
     call_memset_async_legacy, 0},
    {"gpumem_copy_async on the legacy stream", "gpumem_copy_async", "on the capturing stream", call_copy_async_legacy,
     0},
    {"gpumem_copy2d_async on the legacy stream", "gpumem_copy2d_async", "on the capturing stream",
     call_copy2d_async_legacy, 0},
    {"gpumem_copy3d_async on the legacy stream", "gpumem_copy3d_async", "on the capturing stream",
     call_copy3d_async_legacy, 0},
    {"gpumem_device_alloc_async on the legacy stream", "gpumem_device_alloc_async", "on the capturing stream",
     call_device_alloc_async_legacy, 0},
    {"gpumem_managed_prefetch on the legacy stream", "gpumem_managed_prefetch", "on the capturing stream",
     call_prefetch_legacy, 0},
    {"gpumem_array_create", "gpumem_array_create", "before the capture begins", call_array_create, 0},
    {"gpumem_array_destroy", "gpumem_array_destroy", "after the capture ends", call_array_destroy, 1},
    {"gpumem_pin of pages not registered", "gpumem_pin", "before the capture begins", call_pin, 0},
    {"gpumem_pin_forget of a cached registration", "gpumem_pin_forget", "after the capture ends", call_pin_forget, 0},
    {"gpumem_pin_cache_flush", "gpumem_pin_cache_flush", "after the capture ends", call_pin_cache_flush, 0},
    {"gpumem_copy_staging_release", "gpumem_copy_staging_release", "after the capture ends", call_staging_release, 2},
};

static bool call_possible(const sync_call_t* call, const fixture_t* f) {
  return call->needs == 0 || (call->needs == 1 && f->array) || (call->needs == 2 && f->staging);
}

/* Each call refused with a detail that names it and says what to do, under a capture of its own
 * that is still active afterwards and ends with its graph; every call is tried, and each that
 * fails is reported, before the test fails. */
static void refuses_every_sync_call(const scenario_t* scenario) {
  require_gpu();
  fixture_t f;
  fixture_make(&f);
  gpumem_pin_stats_t before = {.struct_size = sizeof before};
  assert_ok(gpumem_pin_get_stats(&before));
  const size_t broken_before = model ? fake_invalidating_calls() : 0;

  print_message("capture: %s\n", scenario->name);
  int failures = 0;
  for (size_t i = 0; i < sizeof kCalls / sizeof kCalls[0]; i++) {
    const sync_call_t* call = &kCalls[i];
    if (!call_possible(call, &f)) continue;
    capture_t* c = capture_begin(scenario);
    const gpumem_status_t st = call->call(&f);
    char detail[2048];
    snprintf(detail, sizeof detail, "%s", gpumem_last_error_detail());
    const int32_t cuda_result = gpumem_last_cuda_result();
    const int status = capture_status(c);
    const int ended = capture_end(c);
    char start[64];
    snprintf(start, sizeof start, "%s: refused while a stream is being captured", call->fn);
    const bool refused = st == GPUMEM_ERROR_STREAM_CAPTURE && strstr(detail, start) &&
                         strstr(detail, "the capture is still valid") && strstr(detail, call->advice) &&
                         cuda_result == 0;
    const bool kept = status == STATUS_ACTIVE && ended == 0;
    print_message("%-48s %s, %s\n", call->label, refused ? "refused" : "NOT REFUSED AS IT SHOULD BE",
                  kept ? "capture kept" : "CAPTURE BROKEN");
    if (!refused || !kept) {
      print_error("%s: returned %s (detail: %s); capture status %d, cuStreamEndCapture %d\n", call->label,
                  gpumem_status_name(st), detail, status, ended);
      failures++;
    }
  }
  if (model) assert_int_equal(fake_invalidating_calls(), broken_before);

  /* Nothing changed: the pinning service holds what it held. */
  gpumem_pin_stats_t after = {.struct_size = sizeof after};
  assert_ok(gpumem_pin_get_stats(&after));
  assert_int_equal(after.bytes_registered, before.bytes_registered);
  assert_int_equal(after.bytes_cached, before.bytes_cached);
  assert_int_equal(after.registrations, before.registrations);
  fixture_free(&f);
  assert_int_equal(failures, 0);
}

static void test_stream_capture_refuses_in_global_mode(void** state) {
  (void)state;
  refuses_every_sync_call(&kScenarios[0]);
}
static void test_stream_capture_refuses_in_thread_local_mode(void** state) {
  (void)state;
  refuses_every_sync_call(&kScenarios[1]);
}
static void test_stream_capture_refuses_in_relaxed_mode(void** state) {
  (void)state;
  refuses_every_sync_call(&kScenarios[2]);
}
static void test_stream_capture_refuses_in_global_mode_on_another_thread(void** state) {
  (void)state;
  refuses_every_sync_call(&kScenarios[3]);
}
static void test_stream_capture_refuses_in_thread_local_mode_on_another_thread(void** state) {
  (void)state;
  refuses_every_sync_call(&kScenarios[4]);
}
static void test_stream_capture_refuses_in_relaxed_mode_on_another_thread(void** state) {
  (void)state;
  refuses_every_sync_call(&kScenarios[5]);
}
static void test_stream_capture_refuses_on_the_per_thread_stream(void** state) {
  (void)state;
  refuses_every_sync_call(&kScenarios[6]);
}
static void test_stream_capture_refuses_with_this_thread_relaxed(void** state) {
  (void)state;
  refuses_every_sync_call(&kScenarios[7]);
}
static void test_stream_capture_refuses_with_this_thread_thread_local(void** state) {
  (void)state;
  refuses_every_sync_call(&kScenarios[8]);
}

/* The detail says which capture: the legacy stream's answer for a blocking stream, the per-thread
 * stream's own. */
static void test_stream_capture_detail_says_which_capture(void** state) {
  (void)state;
  require_gpu();
  capture_t* c = capture_begin(&kScenarios[0]);
  assert_status(call_device_alloc(NULL), GPUMEM_ERROR_STREAM_CAPTURE);
  assert_detail_contains("a blocking stream of device 0's context is being captured");
  assert_detail_contains("CUDA_ERROR_STREAM_CAPTURE_IMPLICIT");
  assert_detail_contains("allocating device memory synchronously (cuMemAlloc) would break the capture");
  assert_int_equal(capture_end(c), 0);

  c = capture_begin(&kScenarios[6]);
  assert_status(call_host_alloc(NULL), GPUMEM_ERROR_STREAM_CAPTURE);
  assert_detail_contains("is being captured");
  assert_int_equal(capture_end(c), 0);
}

/* Pins that the cache serves, unpins, and budget changes need no driver call to succeed: they go
 * on during a capture, which they leave alone; an eviction the capture refuses waits in the cache. */
static void test_stream_capture_pin_cache_needs_no_driver(void** state) {
  (void)state;
  require_gpu();
  fixture_t f;
  fixture_make(&f);
  gpumem_pin_stats_t before = {.struct_size = sizeof before};
  assert_ok(gpumem_pin_get_stats(&before));
  capture_t* c = capture_begin(&kScenarios[0]);
  assert_ok(gpumem_pin(f.cached, kSize, 0));
  assert_ok(gpumem_unpin(f.cached, kSize));
  assert_ok(gpumem_pin_cache_set_budget(0));
  gpumem_pin_stats_t during = {.struct_size = sizeof during};
  assert_ok(gpumem_pin_get_stats(&during));
  assert_int_equal(during.bytes_cached, before.bytes_cached);
  assert_int_equal(during.cache_budget, 0);
  assert_int_equal(capture_status(c), STATUS_ACTIVE);
  assert_int_equal(capture_end(c), 0);
  assert_ok(gpumem_pin_cache_set_budget(before.cache_budget));
  fixture_free(&f);
}

/* With no capture the same calls reach the driver (over the fake, which has no memory to give,
 * they fail as it answers); after a capture has ended they do too. */
static void test_stream_capture_no_capture_no_refusal(void** state) {
  (void)state;
  require_gpu();
  if (!model) skip(); /* on a GPU they would succeed, which the other tests show */
  fixture_t f;
  fixture_make(&f);
  for (int round = 0; round < 2; round++) {
    assert_status(call_device_alloc(&f), GPUMEM_ERROR_OUT_OF_MEMORY);
    assert_status(call_host_alloc(&f), GPUMEM_ERROR_OUT_OF_MEMORY);
    assert_ok(call_memset8(&f));
    assert_ok(call_memset_async_legacy(&f));
    assert_ok(call_prefetch_legacy(&f));
    capture_t* c = capture_begin(&kScenarios[0]);
    assert_int_equal(capture_end(c), 0);
  }
  fixture_free(&f);
}

/* A stream-ordered call on the capturing stream is captured, not refused: a node of the graph. */
static void test_stream_capture_captures_async_calls(void** state) {
  (void)state;
  require_gpu();
  fixture_t f;
  fixture_make(&f);
  for (size_t k = 0; k < 3; k++) {
    const scenario_t* scenario = &kScenarios[k];
    print_message("capture: %s\n", scenario->name);
    const size_t captured_before = model ? ((size_t(*)(void))fake_hook("fake_cuda_captured_calls"))() : 0;
    capture_t* c = capture_begin(scenario);
    assert_ok(gpumem_memset_async(f.dev, 0x11, 1, kSize, c->stream));
    assert_ok(gpumem_memset_async(f.dev2, 0x11223344u, 4, kSize / 4, c->stream));
    const gpumem_copy2d_t c2 = box2d(f.dev2, f.registered);
    assert_ok(gpumem_copy2d_async(&c2, c->stream));
    const gpumem_copy3d_t c3 = box3d(f.dev, f.dev2);
    assert_ok(gpumem_copy3d_async(&c3, c->stream));
    assert_ok(gpumem_copy_async(f.registered, f.dev, kSize, c->stream));
    assert_int_equal(capture_status(c), STATUS_ACTIVE);
    assert_int_equal(capture_end(c), 0);
    /* Over the fake, each reached the capturing stream: five pieces of work captured. */
    if (model) assert_int_equal(((size_t(*)(void))fake_hook("fake_cuda_captured_calls"))() - captured_before, 5);
  }
  fixture_free(&f);
}

/* What gpumem cannot see: a capture on a non-blocking stream it is not given leaves the legacy
 * stream free, so the driver alone judges a synchronous call. In global mode it refuses (and, as
 * ever, invalidates the capture); the detail says that a capture is the cause. */
static void test_stream_capture_non_blocking_stream_left_to_driver(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t s = test_stream_create(0);
  assert_int_equal(((test_cu_fn_begin_capture)test_cu_symbol("cuStreamBeginCapture_v2"))(s, MODE_GLOBAL), 0);
  assert_status(call_device_alloc(NULL), GPUMEM_ERROR_STREAM_CAPTURE);
  assert_detail_contains("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
  assert_detail_contains("a stream is being captured into a CUDA graph");
  void* graph = NULL;
  assert_int_equal(((test_cu_fn_end_capture)test_cu_symbol("cuStreamEndCapture"))(s, &graph),
                   CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  assert_null(graph);
  test_stream_destroy(s);
}

/* ---- On a GPU: the bytes --------------------------------------------------------------------- */

static void test_stream_capture_refuses_sync_copy_and_memset(void** state) {
  (void)state;
  require_real_gpu();
  void* dev = NULL;
  assert_ok(gpumem_device_alloc(0, kSize, &dev));
  unsigned char host[kSize];
  memset(host, 0x5a, sizeof host);
  assert_ok(gpumem_copy(dev, host, kSize));
  unsigned char other[kSize];
  memset(other, 0x33, sizeof other);

  capture_t* c = capture_begin(&kScenarios[0]);
  assert_status(gpumem_copy(dev, other, kSize), GPUMEM_ERROR_STREAM_CAPTURE);
  assert_detail_contains("gpumem_copy: refused");
  assert_status(gpumem_memset(dev, 1, 1, kSize), GPUMEM_ERROR_STREAM_CAPTURE);
  assert_detail_contains("gpumem_memset: refused");
  assert_int_equal(capture_end(c), 0);

  /* Nothing was done: the device holds what it held, and the same calls work now. */
  unsigned char back[kSize];
  assert_ok(gpumem_copy(back, dev, kSize));
  assert_memory_equal(back, host, kSize);
  assert_ok(gpumem_copy(dev, other, kSize));
  assert_ok(gpumem_copy(back, dev, kSize));
  assert_memory_equal(back, other, kSize);
  assert_ok(gpumem_device_free(dev));
}

static void test_stream_capture_records_async_memset(void** state) {
  (void)state;
  require_real_gpu();
  void* dev = NULL;
  assert_ok(gpumem_device_alloc(0, kSize, &dev));
  capture_t* c = capture_begin(&kScenarios[0]);
  assert_ok(gpumem_memset_async(dev, 0x11, 1, kSize, c->stream));
  assert_int_equal(capture_end(c), 0);
  assert_ok(gpumem_device_free(dev));
}

/* Where a region lies in a buffer: x bytes into row y of slice z, rows of pitch bytes, rows rows per
 * slice. */
typedef struct {
  size_t x, y, z, pitch, rows;
} place_t;

static copy_side_t at(void* p, const place_t* l) {
  const copy_side_t side = {p, NULL, l->x, l->y, l->z, l->pitch, l->rows};
  return side;
}

/* Copies a width x height x depth box as the copy under test should, to compute what to expect. */
static void box_apply(unsigned char* dst, const place_t* d, const unsigned char* src, const place_t* s, size_t width,
                      size_t height, size_t depth) {
  for (size_t k = 0; k < depth; k++)
    for (size_t r = 0; r < height; r++)
      memcpy(dst + ((d->z + k) * d->rows + d->y + r) * d->pitch + d->x,
             src + ((s->z + k) * s->rows + s->y + r) * s->pitch + s->x, width);
}

/* 2D: 64 rows of 64 bytes; 3D: 4 slices of 16 rows of 64 bytes; both kSize bytes in all. */
static const place_t k2dPlace = {8, 2, 0, 64, 64};
static const place_t k3dPlace = {4, 1, 1, 64, 16};

/* Each synchronous 2D and 3D copy is refused, whether it would run gpumem's kernel (device to
 * device) or the driver (with host memory), and writes nothing to device or host memory. */
static void test_stream_capture_refuses_sync_copy2d_and_copy3d(void** state) {
  (void)state;
  require_real_gpu();
  unsigned char* dev_a = memory_alloc(KIND_DEVICE, 0, kSize);
  unsigned char* dev_b = memory_alloc(KIND_DEVICE, 0, kSize);
  unsigned char a[kSize];
  unsigned char b[kSize];
  unsigned char host[kSize];
  unsigned char host_before[kSize];
  unsigned char back[kSize];
  fill_pattern(a, kSize, 1);
  fill_pattern(b, kSize, 2);
  fill_pattern(host_before, kSize, 3);
  memcpy(host, host_before, kSize);
  assert_ok(gpumem_copy(dev_a, a, kSize));
  assert_ok(gpumem_copy(dev_b, b, kSize));

  static const char* const directions[] = {"device to device", "host to device", "device to host"};
  void* const dsts[] = {dev_b, dev_b, host};
  void* const srcs[] = {dev_a, host, dev_a};
  gpumem_copy2d_t c2[3];
  gpumem_copy3d_t c3[3];
  for (int i = 0; i < 3; i++) {
    c2[i] = copy2d_of(at(dsts[i], &k2dPlace), at(srcs[i], &k2dPlace), 48, 60);
    c3[i] = copy3d_of(at(dsts[i], &k3dPlace), at(srcs[i], &k3dPlace), 40, 12, 3);
  }

  capture_t* c = capture_begin(&kScenarios[0]);
  for (int i = 0; i < 3; i++) {
    print_message("2D, %s\n", directions[i]);
    assert_status(gpumem_copy2d(&c2[i]), GPUMEM_ERROR_STREAM_CAPTURE);
    assert_detail_contains("gpumem_copy2d: refused");
  }
  for (int i = 0; i < 3; i++) {
    print_message("3D, %s\n", directions[i]);
    assert_status(gpumem_copy3d(&c3[i]), GPUMEM_ERROR_STREAM_CAPTURE);
    assert_detail_contains("gpumem_copy3d: refused");
  }
  assert_memory_equal(host, host_before, kSize);
  assert_int_equal(capture_end(c), 0);

  assert_ok(gpumem_copy(back, dev_b, kSize));
  assert_memory_equal(back, b, kSize);
  assert_ok(gpumem_copy(back, dev_a, kSize));
  assert_memory_equal(back, a, kSize);
  assert_memory_equal(host, host_before, kSize);

  /* Nothing was left half done: after the capture the same copies work. */
  assert_ok(gpumem_copy2d(&c2[0]));
  unsigned char expected[kSize];
  memcpy(expected, b, kSize);
  box_apply(expected, &k2dPlace, a, &k2dPlace, 48, 60, 1);
  assert_ok(gpumem_copy(back, dev_b, kSize));
  assert_memory_equal(back, expected, kSize);
  assert_ok(gpumem_copy3d(&c3[2]));
  memcpy(expected, host_before, kSize);
  box_apply(expected, &k3dPlace, a, &k3dPlace, 40, 12, 3);
  assert_memory_equal(host, expected, kSize);

  memory_free(KIND_DEVICE, dev_a);
  memory_free(KIND_DEVICE, dev_b);
}

/* Allocations and frees through allocator handles (and so a pool's growth) are refused as the
 * gpumem_device_alloc family is, unless this thread's captures are relaxed: the driver lets them
 * run then, and pools grow during a capture so (as PyTorch's does). */
static void test_stream_capture_allocator_handles(void** state) {
  (void)state;
  require_gpu();
  gpumem_allocator_t* dev = NULL;
  assert_ok(gpumem_allocator_create_device(0, &dev));
  capture_t* c = capture_begin(&kScenarios[0]);
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(dev, 4096, NULL, &p), GPUMEM_ERROR_STREAM_CAPTURE);
  assert_null(p);
  assert_detail_contains("gpumem_alloc: refused while a stream is being captured");
  assert_int_equal(gpumem_last_cuda_result(), 0);
  assert_int_equal(capture_status(c), STATUS_ACTIVE);
  assert_int_equal(capture_end(c), 0);

  c = capture_begin(&kScenarios[7]); /* global mode elsewhere, this thread relaxed */
  const gpumem_status_t st = gpumem_alloc(dev, 4096, NULL, &p);
  assert_true(st != GPUMEM_ERROR_STREAM_CAPTURE); /* over the fake, its answer; on a GPU, memory */
  if (st == GPUMEM_SUCCESS) assert_ok(gpumem_free(dev, p, NULL));
  assert_int_equal(capture_status(c), STATUS_ACTIVE);
  assert_int_equal(capture_end(c), 0);
  assert_ok(gpumem_allocator_destroy(dev));
}

/* The calls gpumem does not check ask the driver only questions, or give it advice: none breaks a
 * capture in global mode. Should the driver ever refuse one, this fails and names it. */
static void test_stream_capture_queries_leave_capture_valid(void** state) {
  (void)state;
  require_real_gpu();
  fixture_t f;
  fixture_make(&f);
  void* mapped = NULL;
  assert_ok(gpumem_host_alloc(kSize, GPUMEM_HOST_ALLOC_DEVICEMAP, &mapped));
  capture_t* c = capture_begin(&kScenarios[0]);
  gpumem_pointer_info_t info = {.struct_size = sizeof info};
  print_message("gpumem_pointer_get_info\n");
  assert_ok(gpumem_pointer_get_info(f.dev, &info));
  assert_int_equal(capture_status(c), STATUS_ACTIVE);
  print_message("gpumem_host_get_device_pointer\n");
  void* device_ptr = NULL;
  assert_ok(gpumem_host_get_device_pointer(mapped, &device_ptr));
  assert_int_equal(capture_status(c), STATUS_ACTIVE);
  print_message("gpumem_device_get_info\n");
  gpumem_device_info_t device = {.struct_size = sizeof device};
  assert_ok(gpumem_device_get_info(0, &device));
  assert_int_equal(capture_status(c), STATUS_ACTIVE);
  print_message("gpumem_device_query_memory\n");
  size_t free_bytes = 0, total = 0;
  assert_ok(gpumem_device_query_memory(0, &free_bytes, &total));
  assert_int_equal(capture_status(c), STATUS_ACTIVE);
  print_message("gpumem_managed_get_range_info\n");
  gpumem_managed_range_info_t range = {.struct_size = sizeof range};
  assert_ok(gpumem_managed_get_range_info(f.managed, kSize, &range));
  assert_int_equal(capture_status(c), STATUS_ACTIVE);
  /* Advice is not a question: the driver refuses it during the capture and ends the capture
   * (seen on the H200), so gpumem refuses first. */
  print_message("gpumem_managed_advise\n");
  assert_status(gpumem_managed_advise(f.managed, kSize, GPUMEM_ADVICE_SET_READ_MOSTLY, 0), GPUMEM_ERROR_STREAM_CAPTURE);
  assert_detail_contains("gpumem_managed_advise: refused while a stream is being captured");
  assert_int_equal(capture_status(c), STATUS_ACTIVE);
  assert_int_equal(capture_end(c), 0);
  assert_ok(gpumem_host_free(mapped));
  fixture_free(&f);
}

/* The graph's buffers: a 1D chain (pinned -> device, a memset inside, device -> pinned), and a 2D
 * and a 3D chain (pinned -> device by the driver, device -> device by gpumem's kernel, device ->
 * pinned by the driver). Layouts differ on every side so that a mixed-up pitch or offset shows. */
enum { k1dBytes = 65536, k1dMemsetOffset = 4096, k1dMemsetCount = 1000 };
static const uint32_t k1dMemsetValue = 0xC0FFEE11u;

/* A 2D or 3D chain copies one region from stage to stage: pinned, device (by the driver), device
 * (by gpumem's kernel), pinned (by the driver). */
enum { STAGES = 4, CHAINS = 2 };
static const kind_t kStageKinds[STAGES] = {KIND_PINNED, KIND_DEVICE, KIND_DEVICE, KIND_PINNED};

typedef struct {
  int dims;
  size_t width, height, depth, slices;
  place_t place[STAGES]; /* where the region lies in the buffer of each stage */
} chain_t;

static const chain_t kChains[CHAINS] = {
    {2, 201, 37, 1, 1, {{3, 1, 0, 301, 40}, {5, 2, 0, 257, 45}, {7, 4, 0, 263, 44}, {9, 3, 0, 250, 42}}},
    {3, 111, 17, 5, 7, {{2, 1, 1, 131, 20}, {4, 3, 0, 127, 22}, {1, 0, 2, 140, 19}, {6, 2, 1, 129, 21}}},
};

static size_t stage_bytes(int chain, int stage) {
  const chain_t* c = &kChains[chain];
  return c->place[stage].pitch * c->place[stage].rows * c->slices;
}

typedef struct {
  unsigned char* in1;
  unsigned char* out1;
  unsigned char* dev1;
  unsigned char* stage[CHAINS][STAGES];
} graph_buffers_t;

static graph_buffers_t graph_buffers_create(void) {
  graph_buffers_t b;
  b.in1 = memory_alloc(KIND_PINNED, 0, k1dBytes);
  b.out1 = memory_alloc(KIND_PINNED, 0, k1dBytes);
  b.dev1 = memory_alloc(KIND_DEVICE, 0, k1dBytes);
  for (int k = 0; k < CHAINS; k++) {
    for (int i = 0; i < STAGES; i++) b.stage[k][i] = memory_alloc(kStageKinds[i], 0, stage_bytes(k, i));
    /* The driver writes stage 1 inside the box only, and gpumem's kernel reads whole 16-byte words
     * around the box's rows (writing only the box): set the rest once, for compute-sanitizer's
     * initcheck. */
    assert_ok(gpumem_memset(b.stage[k][1], 0, 1, stage_bytes(k, 1)));
  }
  return b;
}

static void graph_buffers_destroy(graph_buffers_t* b) {
  memory_free(KIND_PINNED, b->in1);
  memory_free(KIND_PINNED, b->out1);
  memory_free(KIND_DEVICE, b->dev1);
  for (int k = 0; k < CHAINS; k++)
    for (int i = 0; i < STAGES; i++) memory_free(kStageKinds[i], b->stage[k][i]);
}

/* New sources, and poison in every destination, so that each launch has to write every byte
 * checked afterwards. The 1D chain takes seeds seed and seed + 1; chain k seed + 2 + 2k (its
 * source), seed + 3 + 2k (its pinned destination) and seed + 6 + k (its device destination). */
static void graph_inputs(const graph_buffers_t* b, unsigned seed) {
  fill_pattern(b->in1, k1dBytes, seed);
  fill_pattern(b->out1, k1dBytes, seed + 1);
  for (int k = 0; k < CHAINS; k++) {
    const size_t n = stage_bytes(k, 2);
    fill_pattern(b->stage[k][0], stage_bytes(k, 0), seed + 2 + 2 * (unsigned)k);
    fill_pattern(b->stage[k][3], stage_bytes(k, 3), seed + 3 + 2 * (unsigned)k);
    unsigned char* poison = checked_malloc(n);
    fill_pattern(poison, n, seed + 6 + (unsigned)k);
    assert_ok(gpumem_copy(b->stage[k][2], poison, n));
    free(poison);
  }
}

/* What a launch must have produced from the inputs graph_inputs(seed) set. */
static void graph_check(const graph_buffers_t* b, unsigned seed, const char* what) {
  print_message("checking the graph's output after the %s\n", what);
  unsigned char* source = checked_malloc(k1dBytes);
  fill_pattern(source, k1dBytes, seed);
  for (size_t i = 0; i < k1dMemsetCount; i++) memcpy(source + k1dMemsetOffset + 4 * i, &k1dMemsetValue, 4);
  assert_memory_equal(b->out1, source, k1dBytes);
  free(source);

  for (int k = 0; k < CHAINS; k++) {
    const chain_t* c = &kChains[k];
    const size_t n_out = stage_bytes(k, 3);
    const size_t n_dev = stage_bytes(k, 2);
    unsigned char* chain_source = checked_malloc(stage_bytes(k, 0));
    unsigned char* expected = checked_malloc(n_out > n_dev ? n_out : n_dev);
    unsigned char* got = checked_malloc(n_dev);
    print_message("the %dD chain\n", c->dims);

    fill_pattern(chain_source, stage_bytes(k, 0), seed + 2 + 2 * (unsigned)k);
    fill_pattern(expected, n_out, seed + 3 + 2 * (unsigned)k);
    box_apply(expected, &c->place[3], chain_source, &c->place[0], c->width, c->height, c->depth);
    assert_memory_equal(b->stage[k][3], expected, n_out);
    fill_pattern(expected, n_dev, seed + 6 + (unsigned)k);
    box_apply(expected, &c->place[2], chain_source, &c->place[0], c->width, c->height, c->depth);
    assert_ok(gpumem_copy(got, b->stage[k][2], n_dev));
    assert_memory_equal(got, expected, n_dev);

    free(chain_source);
    free(expected);
    free(got);
  }
}

/* Captures a chain's three copies, stage to stage, on the capturing stream. */
static void chain_capture(const graph_buffers_t* b, int k, gpumem_stream_t s) {
  const chain_t* c = &kChains[k];
  for (int i = 0; i + 1 < STAGES; i++) {
    const gpumem_copy3d_t c3 = copy3d_of(at(b->stage[k][i + 1], &c->place[i + 1]), at(b->stage[k][i], &c->place[i]),
                                         c->width, c->height, c->depth);
    const gpumem_copy2d_t c2 = copy2d_of_3d(&c3);
    assert_ok(c->dims == 3 ? gpumem_copy3d_async(&c3, s) : gpumem_copy2d_async(&c2, s));
  }
}

static void graph_launch_and_wait(void* exec, gpumem_stream_t stream) {
  assert_int_equal(((test_cu_fn_graph_launch)test_cu_symbol("cuGraphLaunch"))(exec, stream), 0);
  test_stream_sync(stream);
}

/* The async copies and memset on the capturing stream become graph nodes: the graph does the work
 * when launched, and again, from the sources' new bytes, when launched a second time. */
static void test_stream_capture_graph_of_async_copies_replays(void** state) {
  (void)state;
  require_real_gpu();
  graph_buffers_t b = graph_buffers_create();
  gpumem_stream_t launch = test_stream_create(0);
  graph_inputs(&b, 10);

  gpumem_stream_t s = NULL;
  test_cu_push(0);
  assert_int_equal(((test_cu_fn_stream_create)test_cu_symbol("cuStreamCreate"))(&s, 0), 0);
  test_cu_pop();
  assert_int_equal(((test_cu_fn_begin_capture)test_cu_symbol("cuStreamBeginCapture_v2"))(s, MODE_GLOBAL), 0);
  assert_ok(gpumem_copy_async(b.dev1, b.in1, k1dBytes, s));
  assert_ok(gpumem_memset_async(b.dev1 + k1dMemsetOffset, k1dMemsetValue, 4, k1dMemsetCount, s));
  assert_ok(gpumem_copy_async(b.out1, b.dev1, k1dBytes, s));
  for (int k = 0; k < CHAINS; k++) chain_capture(&b, k, s);
  void* graph = NULL;
  assert_int_equal(((test_cu_fn_end_capture)test_cu_symbol("cuStreamEndCapture"))(s, &graph), 0);
  assert_non_null(graph);
  test_stream_destroy(s);

  /* Captured, not run: the destinations still hold their poison. */
  unsigned char* poison = checked_malloc(k1dBytes);
  fill_pattern(poison, k1dBytes, 11);
  assert_memory_equal(b.out1, poison, k1dBytes);
  free(poison);

  void* exec = NULL;
  test_cu_push(0); /* the driver instantiates in the current context */
  assert_int_equal(((test_cu_fn_graph_instantiate)test_cu_symbol("cuGraphInstantiateWithFlags"))(&exec, graph, 0), 0);
  test_cu_pop();
  assert_non_null(exec);

  graph_launch_and_wait(exec, launch);
  graph_check(&b, 10, "first launch");

  graph_inputs(&b, 20);
  graph_launch_and_wait(exec, launch);
  graph_check(&b, 20, "second launch, with new sources");

  assert_int_equal(((test_cu_fn_graph_exec_destroy)test_cu_symbol("cuGraphExecDestroy"))(exec), 0);
  assert_int_equal(((test_cu_fn_graph_destroy)test_cu_symbol("cuGraphDestroy"))(graph), 0);
  test_stream_destroy(launch);
  graph_buffers_destroy(&b);
}

int main(int argc, char** argv) {
  model = argc > 1 && strcmp(argv[1], "model") == 0;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_stream_capture_refuses_in_global_mode, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_refuses_in_thread_local_mode, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_refuses_in_relaxed_mode, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_refuses_in_global_mode_on_another_thread, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_refuses_in_thread_local_mode_on_another_thread, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_refuses_in_relaxed_mode_on_another_thread, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_refuses_on_the_per_thread_stream, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_refuses_with_this_thread_relaxed, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_refuses_with_this_thread_thread_local, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_detail_says_which_capture, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_pin_cache_needs_no_driver, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_no_capture_no_refusal, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_captures_async_calls, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_non_blocking_stream_left_to_driver, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_refuses_sync_copy_and_memset, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_records_async_memset, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_refuses_sync_copy2d_and_copy3d, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_queries_leave_capture_valid, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_allocator_handles, end_open_capture),
      cmocka_unit_test_teardown(test_stream_capture_graph_of_async_copies_replays, end_open_capture),
  };
  if (model && getenv("GPUMEM_CUDA_DRIVER") == NULL) {
    fprintf(stderr, "model: GPUMEM_CUDA_DRIVER must name the fake driver (run this test through CTest)\n");
    return 1;
  }
  if (!gpu_available()) {
    printf("all tests need a GPU: %s\n", gpumem_last_error_detail());
    return 77;
  }
  return cmocka_run_group_tests(tests, NULL, NULL);
}
