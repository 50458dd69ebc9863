/* Frames in traces: each allocation's native call stack and the caller's own frames, recorded by
 * gpumem_trace_start_with_params() and read back with gpumem_trace_reader_get_frame(); each
 * distinct stack written once; a recording without frames stays format version 1. Needs no GPU. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

static char path[256];

static int setup(void** state) {
  (void)state;
  temp_path(path, sizeof path, "frames", "trace");
  return 0;
}

static int teardown(void** state) {
  (void)state;
  remove(path);
  return 0;
}

/* What the caller-frames callback writes, and what it was given. */
struct caller {
  const char* text;
  size_t capacity;
  int calls;
  gpumem_allocator_t* allocate_from; /* an allocation of its own, from there, on each call */
};

static size_t write_frames(char* buffer, size_t capacity, void* user_data) {
  struct caller* c = user_data;
  c->calls++;
  c->capacity = capacity;
  if (c->allocate_from) {
    void* p = NULL;
    if (gpumem_alloc(c->allocate_from, 32, NULL, &p) == GPUMEM_SUCCESS) (void)gpumem_free(c->allocate_from, p, NULL);
  }
  const size_t n = strlen(c->text) < capacity ? strlen(c->text) : capacity;
  memcpy(buffer, c->text, n);
  return n;
}

static gpumem_trace_t* start(gpumem_allocator_t* a, uint32_t flags, uint32_t max_frames, struct caller* c) {
  gpumem_trace_params_t params;
  assert_ok(gpumem_trace_params_init(&params, sizeof params));
  params.flags = flags;
  params.max_frames = max_frames;
  params.frames = c ? write_frames : NULL;
  params.frames_user_data = c;
  gpumem_trace_t* t = NULL;
  assert_ok(gpumem_trace_start_with_params(a, path, &params, &t));
  return t;
}

/* The calls whose return addresses the native frames must hold: never inlined, and (GCC's noipa)
 * never cloned for their constant arguments, or the return address would lie in a clone. */
#if defined(__clang__)
#define CALLED_AS_WRITTEN __attribute__((noinline))
#else
#define CALLED_AS_WRITTEN __attribute__((noinline, noipa))
#endif
CALLED_AS_WRITTEN static void* allocate_here(gpumem_allocator_t* a, size_t size) {
  void* p = NULL;
  assert_ok(gpumem_alloc(a, size, NULL, &p));
  return p;
}
CALLED_AS_WRITTEN static void* allocate_there(gpumem_allocator_t* a, size_t size) {
  void* p = NULL;
  assert_ok(gpumem_alloc(a, size, NULL, &p));
  return p;
}

static gpumem_trace_reader_t* open_trace(uint32_t version) {
  gpumem_trace_reader_t* r = NULL;
  assert_ok(gpumem_trace_reader_open(path, &r));
  gpumem_trace_header_t h;
  h.struct_size = sizeof h;
  assert_ok(gpumem_trace_reader_get_header(r, &h));
  assert_int_equal(h.version, version);
  return r;
}

static gpumem_trace_record_t next(gpumem_trace_reader_t* r) {
  gpumem_trace_record_t rec;
  memset(&rec, 0xa5, sizeof rec);
  rec.struct_size = sizeof rec;
  bool has = false;
  assert_ok(gpumem_trace_reader_next(r, &rec, &has));
  assert_true(has);
  return rec;
}

static gpumem_trace_frame_t frame(gpumem_trace_reader_t* r, uint32_t index) {
  gpumem_trace_frame_t f;
  memset(&f, 0xa5, sizeof f);
  f.struct_size = sizeof f;
  assert_ok(gpumem_trace_reader_get_frame(r, index, &f));
  return f;
}

static long file_size(void) {
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  return (long)st.st_size;
}

static void test_trace_frames_params_init_gives_the_macro(void** state) {
  (void)state;
  gpumem_trace_params_t params;
  memset(&params, 0xa5, sizeof params);
  assert_ok(gpumem_trace_params_init(&params, sizeof params));
  const gpumem_trace_params_t macro = GPUMEM_TRACE_PARAMS_INIT;
  assert_memory_equal(&params, &macro, sizeof params);
  assert_int_equal(params.flags, 0);
  assert_int_equal(params.max_frames, 16);
  assert_null(params.frames);
}

/* The first native frame is the function that called gpumem_alloc(); none is libgpumem's own. */
static void test_trace_frames_native_start_at_the_caller(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_trace_t* t = start(host, GPUMEM_TRACE_NATIVE_FRAMES, 16, NULL);
  void* p = allocate_here(host, 64);
  assert_ok(gpumem_free(host, p, NULL));
  assert_ok(gpumem_trace_stop(t));
  assert_ok(gpumem_allocator_destroy(host));

  gpumem_trace_reader_t* r = open_trace(2);
  const gpumem_trace_record_t a = next(r);
  assert_int_equal(a.event, GPUMEM_TRACE_ALLOC);
  assert_int_equal(a.address, (uint64_t)(uintptr_t)p);
  assert_int_not_equal(a.stack, 0);
  assert_in_range(a.frame_count, 2, 16);
  const gpumem_trace_frame_t first = frame(r, 0);
  assert_int_equal(first.kind, GPUMEM_TRACE_FRAME_NATIVE);
  const uintptr_t here = (uintptr_t)allocate_here;
  assert_in_range(first.address, here, here + 512);
  assert_non_null(strstr(first.module, "test_trace_frames"));
  assert_true(first.module_offset > 0 && first.module_offset <= first.address);
  bool symbol = false;
  for (uint32_t i = 0; i < a.frame_count; ++i) {
    const gpumem_trace_frame_t f = frame(r, i);
    assert_int_equal(f.kind, GPUMEM_TRACE_FRAME_NATIVE);
    assert_null(strstr(f.module, "libgpumem"));
    if (f.symbol[0]) {
      symbol = true;
      assert_memory_equal(f.text, f.symbol, strlen(f.symbol)); /* "symbol+0x1a (module+0x1234)" */
      assert_memory_equal(f.text + strlen(f.symbol), "+0x", 3);
    }
  }
  assert_true(symbol); /* cmocka's and libc's exported functions are on the way to main() */
  const gpumem_trace_record_t f = next(r);
  assert_int_equal(f.event, GPUMEM_TRACE_FREE);
  assert_int_equal(f.stack, 0);
  assert_int_equal(f.frame_count, 0);
  gpumem_trace_frame_t none;
  memset(&none, 0, sizeof none);
  none.struct_size = sizeof none;
  assert_status(gpumem_trace_reader_get_frame(r, 0, &none), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("the last record has 0 frames");
  assert_ok(gpumem_trace_reader_close(r));
}

/* Allocations from one place share a stack, written once; another place has another. */
static void test_trace_frames_one_stack_per_place(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_trace_t* t = start(host, GPUMEM_TRACE_NATIVE_FRAMES, 16, NULL);
  void* p[1000];
  for (int i = 0; i < 1000; ++i) p[i] = allocate_here(host, 64);
  void* q = allocate_there(host, 64);
  for (int i = 0; i < 1000; ++i) assert_ok(gpumem_free(host, p[i], NULL));
  assert_ok(gpumem_free(host, q, NULL));
  assert_ok(gpumem_trace_stop(t));
  const long with_frames = file_size();

  gpumem_trace_reader_t* r = open_trace(2);
  const gpumem_trace_record_t first = next(r);
  for (int i = 1; i < 1000; ++i) assert_int_equal(next(r).stack, first.stack);
  const gpumem_trace_record_t other = next(r);
  assert_int_not_equal(other.stack, first.stack);
  const uintptr_t there = (uintptr_t)allocate_there;
  assert_in_range(frame(r, 0).address, there, there + 512);
  assert_ok(gpumem_trace_reader_close(r));

  /* The same calls recorded without frames: the frames cost their definitions once, and a byte or
   * two for each allocation's stack. */
  gpumem_trace_t* plain = NULL;
  assert_ok(gpumem_trace_start(host, path, 0, &plain));
  for (int i = 0; i < 1000; ++i) p[i] = allocate_here(host, 64);
  q = allocate_there(host, 64);
  for (int i = 0; i < 1000; ++i) assert_ok(gpumem_free(host, p[i], NULL));
  assert_ok(gpumem_free(host, q, NULL));
  assert_ok(gpumem_trace_stop(plain));
  assert_in_range(with_frames - file_size(), 1001, 1001 * 2 + 8192);
  assert_ok(gpumem_allocator_destroy(host));
}

/* The callback's lines come back as caller frames, after the native ones, innermost first. */
static void test_trace_frames_caller_frames_after_the_native(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  struct caller c = {"model.py:10 forward\ntrain.py:3 <module>\n", 0, 0, NULL};
  gpumem_trace_t* t = start(host, GPUMEM_TRACE_NATIVE_FRAMES, 8, &c);
  void* p = allocate_here(host, 64);
  assert_ok(gpumem_free(host, p, NULL));
  assert_ok(gpumem_trace_stop(t));
  assert_int_equal(c.calls, 1); /* the allocation's, not the free's */
  assert_int_equal(c.capacity, 8 * 512);
  assert_ok(gpumem_allocator_destroy(host));

  gpumem_trace_reader_t* r = open_trace(2);
  const gpumem_trace_record_t a = next(r);
  assert_in_range(a.frame_count, 3, 10);
  const uintptr_t here = (uintptr_t)allocate_here;
  assert_in_range(frame(r, 0).address, here, here + 512);
  const gpumem_trace_frame_t inner = frame(r, a.frame_count - 2), outer = frame(r, a.frame_count - 1);
  assert_int_equal(inner.kind, GPUMEM_TRACE_FRAME_CALLER);
  assert_string_equal(inner.text, "model.py:10 forward");
  assert_string_equal(outer.text, "train.py:3 <module>");
  assert_int_equal(outer.address, 0);
  assert_string_equal(outer.module, "");
  assert_string_equal(outer.symbol, "");
  assert_int_equal(frame(r, a.frame_count - 3).kind, GPUMEM_TRACE_FRAME_NATIVE);
  assert_ok(gpumem_trace_reader_close(r));
}

/* At most max_frames lines are kept, empty ones skipped, each cut to 4096 bytes. */
static void test_trace_frames_caller_lines_are_bounded(void** state) {
  (void)state;
  static char text[6000]; /* within the 10 * 512 bytes the callback is given */
  memset(text, 'x', 5000);
  strcpy(text + 5000, "\n\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\n");
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  struct caller c = {text, 0, 0, NULL};
  gpumem_trace_t* t = start(host, 0, 10, &c);
  void* p = allocate_here(host, 64);
  assert_ok(gpumem_free(host, p, NULL));
  assert_ok(gpumem_trace_stop(t));
  assert_ok(gpumem_allocator_destroy(host));

  gpumem_trace_reader_t* r = open_trace(2);
  const gpumem_trace_record_t a = next(r);
  assert_int_equal(a.frame_count, 10);
  assert_int_equal(strlen(frame(r, 0).text), 4096);
  assert_string_equal(frame(r, 1).text, "b");
  assert_string_equal(frame(r, 9).text, "j");
  assert_ok(gpumem_trace_reader_close(r));
}

/* An allocation the callback makes from the traced allocator is recorded without caller frames,
 * and does not call the callback again. */
static void test_trace_frames_callback_allocations_have_none(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  struct caller c = {"outer.py:1 f", 0, 0, host};
  gpumem_trace_t* t = start(host, 0, 16, &c);
  void* p = allocate_here(host, 64);
  assert_ok(gpumem_free(host, p, NULL));
  assert_ok(gpumem_trace_stop(t));
  assert_int_equal(c.calls, 1);
  assert_ok(gpumem_allocator_destroy(host));

  gpumem_trace_reader_t* r = open_trace(2);
  const gpumem_trace_record_t inner = next(r);
  assert_int_equal(inner.size, 32);
  assert_int_equal(inner.frame_count, 0);
  assert_int_equal(next(r).event, GPUMEM_TRACE_FREE);
  const gpumem_trace_record_t outer = next(r);
  assert_int_equal(outer.size, 64);
  assert_int_equal(outer.frame_count, 1);
  assert_string_equal(frame(r, 0).text, "outer.py:1 f");
  assert_ok(gpumem_trace_reader_close(r));
}

/* A failed allocation says where it came from too. */
static void test_trace_frames_failed_allocations_carry_them(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = host;
  params.limit = 4096;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&params, &pool));
  struct caller c = {"big.py:7 load", 0, 0, NULL};
  gpumem_trace_t* t = start(pool, GPUMEM_TRACE_NATIVE_FRAMES, 4, &c);
  void* p = NULL;
  assert_status(gpumem_alloc(pool, 1 << 20, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_ok(gpumem_trace_stop(t));
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(host));

  gpumem_trace_reader_t* r = open_trace(2);
  const gpumem_trace_record_t failed = next(r);
  assert_int_equal(failed.event, GPUMEM_TRACE_ALLOC_FAILED);
  assert_int_equal(failed.status, GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_in_range(failed.frame_count, 2, 5);
  assert_string_equal(frame(r, failed.frame_count - 1).text, "big.py:7 load");
  assert_ok(gpumem_trace_reader_close(r));
}

/* A callback that stops its own recording on its second call. */
struct stopper {
  gpumem_trace_t* trace;
  int calls;
  gpumem_status_t stopped; /* what gpumem_trace_stop() returned there */
};

static size_t stop_on_second_call(char* buffer, size_t capacity, void* user_data) {
  struct stopper* s = user_data;
  if (++s->calls == 2) s->stopped = gpumem_trace_stop(s->trace);
  const char text[] = "stop.py:1 f";
  const size_t n = sizeof text - 1 < capacity ? sizeof text - 1 : capacity;
  memcpy(buffer, text, n);
  return n;
}

/* The callback may stop its own recording: the allocation it was called for succeeds and is not
 * recorded, nothing after it is, and the file is complete. On a pool too, whose lock is not held. */
static void test_trace_frames_callback_may_stop_the_recording(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_pool_params_t pp = GPUMEM_POOL_PARAMS_INIT;
  pp.upstream = host;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&pp, &pool));
  gpumem_allocator_t* traced[2] = {host, pool};
  for (int k = 0; k < 2; ++k) {
    struct stopper s = {NULL, 0, GPUMEM_ERROR_INTERNAL};
    gpumem_trace_params_t params = GPUMEM_TRACE_PARAMS_INIT;
    params.flags = GPUMEM_TRACE_NATIVE_FRAMES;
    params.frames = stop_on_second_call;
    params.frames_user_data = &s;
    assert_ok(gpumem_trace_start_with_params(traced[k], path, &params, &s.trace));
    void* p[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; ++i) assert_ok(gpumem_alloc(traced[k], 64 * (size_t)(i + 1), NULL, &p[i]));
    assert_int_equal(s.calls, 2); /* not called once stopped */
    assert_ok(s.stopped);
    assert_status(gpumem_trace_stop(s.trace), GPUMEM_ERROR_INVALID_HANDLE); /* stopped already */
    for (int i = 0; i < 3; ++i) assert_ok(gpumem_free(traced[k], p[i], NULL));

    gpumem_trace_reader_t* r = open_trace(2);
    gpumem_trace_record_t rec = next(r);
    while (rec.event == GPUMEM_TRACE_UPSTREAM_ALLOC) rec = next(r);
    assert_int_equal(rec.event, GPUMEM_TRACE_ALLOC);
    assert_int_equal(rec.size, 64);
    assert_string_equal(frame(r, rec.frame_count - 1).text, "stop.py:1 f");
    /* The second allocation's upstream block may be recorded before its callback ran: nothing
     * else follows. */
    bool has = true;
    while (has) {
      memset(&rec, 0, sizeof rec);
      rec.struct_size = sizeof rec;
      assert_ok(gpumem_trace_reader_next(r, &rec, &has));
      if (has) assert_int_equal(rec.event, GPUMEM_TRACE_UPSTREAM_ALLOC);
    }
    assert_ok(gpumem_trace_reader_close(r));
  }
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(host));
}

/* Without frames the file is of version 1, which gpumem 0.3 reads, and its records have none. */
static void test_trace_frames_none_is_version_1(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_trace_t* t = start(host, 0, 16, NULL);
  void* p = allocate_here(host, 64);
  assert_ok(gpumem_free(host, p, NULL));
  assert_ok(gpumem_trace_stop(t));
  assert_ok(gpumem_allocator_destroy(host));
  gpumem_trace_reader_t* r = open_trace(1);
  const gpumem_trace_record_t a = next(r);
  assert_int_equal(a.stack, 0);
  assert_int_equal(a.frame_count, 0);
  assert_ok(gpumem_trace_reader_close(r));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trace_frames_params_init_gives_the_macro),
      cmocka_unit_test_teardown(test_trace_frames_native_start_at_the_caller, teardown),
      cmocka_unit_test_teardown(test_trace_frames_one_stack_per_place, teardown),
      cmocka_unit_test_teardown(test_trace_frames_caller_frames_after_the_native, teardown),
      cmocka_unit_test_teardown(test_trace_frames_caller_lines_are_bounded, teardown),
      cmocka_unit_test_teardown(test_trace_frames_callback_allocations_have_none, teardown),
      cmocka_unit_test_teardown(test_trace_frames_failed_allocations_carry_them, teardown),
      cmocka_unit_test_teardown(test_trace_frames_callback_may_stop_the_recording, teardown),
      cmocka_unit_test_teardown(test_trace_frames_none_is_version_1, teardown),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
