/* Handle checks: a pointer is known to be one of gpumem's handles before anything is read through
 * it, so wild, misaligned, stack, heap, destroyed and other-type pointers are refused with
 * GPUMEM_ERROR_INVALID_HANDLE and a detail that says which, under the sanitizers without a report.
 * tests/abi/test_bad_input.c passes the same pointers to every function that takes a handle. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"

static gpumem_allocator_t* host(void) {
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_allocator_create_host(0, &a));
  return a;
}

/* The detail for a pointer: its address, and why it is not a live allocator. */
static void assert_refused_allocator(const void* p, const char* why) {
  gpumem_allocator_stats_t s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  assert_status(gpumem_allocator_get_stats((gpumem_allocator_t*)p, &s), GPUMEM_ERROR_INVALID_HANDLE);
  char text[160];
  snprintf(text, sizeof text, "%p is not a live gpumem allocator: %s", p, why);
  assert_detail_contains(text);
  void* out = (void*)0x1;
  assert_status(gpumem_alloc((gpumem_allocator_t*)p, 64, NULL, &out), GPUMEM_ERROR_INVALID_HANDLE);
  assert_null(out);
  assert_detail_contains(text);
}

static void test_handles_wild_pointers_refused_unread(void** state) {
  (void)state;
  const uintptr_t wild[] = {1, 7, 8, 12345, 0x10000, 0x7fffffff0000, UINTPTR_MAX - 7, UINTPTR_MAX};
  for (size_t i = 0; i < sizeof wild / sizeof wild[0]; ++i)
    assert_refused_allocator((void*)wild[i], "gpumem made no handle at that address");
  assert_status(gpumem_allocator_destroy((gpumem_allocator_t*)(uintptr_t)12345), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("0x3039 is not a live gpumem allocator: gpumem made no handle at that address");
}

/* Memory of the caller's that holds a live handle's bytes, its mark included: not gpumem's. */
static void test_handles_copies_refused(void** state) {
  (void)state;
  gpumem_allocator_t* a = host();
  uint64_t on_stack[4];
  memcpy(on_stack, a, sizeof on_stack);
  assert_refused_allocator(on_stack, "gpumem made no handle at that address");
  uint64_t* on_heap = malloc(sizeof on_stack);
  assert_non_null(on_heap);
  memcpy(on_heap, a, sizeof on_stack);
  assert_refused_allocator(on_heap, "gpumem made no handle at that address");
  free(on_heap);
  assert_ok(gpumem_allocator_destroy(a));
}

/* Inside gpumem's handles: misaligned ones are refused before any read, aligned ones by the mark. */
static void test_handles_inside_a_handle_refused(void** state) {
  (void)state;
  gpumem_allocator_t* a = host();
  for (size_t offset = 1; offset < 8; ++offset)
    assert_refused_allocator((char*)a + offset, "gpumem made no handle at that address");
  for (size_t offset = 8; offset <= 64; offset += 8)
    assert_refused_allocator((char*)a + offset, "another kind of handle, or the inside of one");
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_handles_destroyed_refused(void** state) {
  (void)state;
  gpumem_allocator_t* a = host();
  assert_ok(gpumem_allocator_destroy(a));
  assert_refused_allocator(a, "it was destroyed");
  assert_status(gpumem_allocator_destroy(a), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("it was destroyed");
  /* Its memory is never reused: a new allocator is elsewhere, and the old handle stays refused. */
  gpumem_allocator_t* b = host();
  assert_ptr_not_equal(a, b);
  assert_refused_allocator(a, "it was destroyed");
  assert_ok(gpumem_allocator_destroy(b));
}

/* Each type's handle is refused as another type's. */
static void test_handles_other_types_refused(void** state) {
  (void)state;
  char dir[] = "/tmp/gpumem-test-handles-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[64];
  snprintf(path, sizeof path, "%s/t.trace", dir);
  gpumem_allocator_t* a = host();
  gpumem_trace_t* trace = NULL;
  assert_ok(gpumem_trace_start(a, path, 0, &trace));
  gpumem_trace_t* stopped = NULL;
  gpumem_allocator_t* b = host();
  char other[64];
  snprintf(other, sizeof other, "%s/u.trace", dir);
  assert_ok(gpumem_trace_start(b, other, 0, &stopped));
  assert_ok(gpumem_trace_stop(stopped));
  gpumem_trace_reader_t* reader = NULL;
  assert_ok(gpumem_trace_reader_open(other, &reader));
  gpumem_trace_reader_t* closed = NULL;
  assert_ok(gpumem_trace_reader_open(other, &closed));
  assert_ok(gpumem_trace_reader_close(closed));

  assert_refused_allocator(trace, "another kind of handle, or the inside of one");
  assert_refused_allocator(reader, "another kind of handle, or the inside of one");

  assert_status(gpumem_trace_stop((gpumem_trace_t*)a), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("is not a trace being recorded (stopped already, or never started): another kind");
  assert_status(gpumem_trace_stop((gpumem_trace_t*)reader), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("another kind of handle");
  assert_status(gpumem_trace_stop(stopped), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("it was destroyed");
  assert_status(gpumem_trace_stop((gpumem_trace_t*)((char*)trace + 1)), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("gpumem made no handle at that address");
  assert_status(gpumem_trace_stop(NULL), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("it is NULL");

  gpumem_trace_header_t header;
  memset(&header, 0, sizeof header);
  header.struct_size = sizeof header;
  assert_status(gpumem_trace_reader_get_header((gpumem_trace_reader_t*)trace, &header), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("is not an open trace reader (closed already, or never opened): another kind");
  assert_status(gpumem_trace_reader_get_header((gpumem_trace_reader_t*)a, &header), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("another kind of handle");
  assert_status(gpumem_trace_reader_get_header(closed, &header), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("it was destroyed");
  assert_status(gpumem_trace_reader_close((gpumem_trace_reader_t*)((char*)reader + 4)), GPUMEM_ERROR_INVALID_HANDLE);
  assert_detail_contains("gpumem made no handle at that address");

  /* Arrays live in a registry: nothing else is ever taken for one. */
  gpumem_array_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  const void* not_arrays[] = {a, trace, reader, (char*)a + 1, &desc};
  for (size_t i = 0; i < sizeof not_arrays / sizeof not_arrays[0]; ++i) {
    assert_status(gpumem_array_get_desc(not_arrays[i], &desc), GPUMEM_ERROR_INVALID_HANDLE);
    assert_detail_contains("is not a live gpumem array");
    assert_status(gpumem_array_destroy((gpumem_array_t*)not_arrays[i]), GPUMEM_ERROR_INVALID_HANDLE);
  }

  assert_ok(gpumem_trace_reader_close(reader));
  assert_ok(gpumem_trace_stop(trace));
  assert_ok(gpumem_allocator_destroy(a));
  assert_ok(gpumem_allocator_destroy(b));
  unlink(path);
  unlink(other);
  assert_int_equal(rmdir(dir), 0);
}

/* Handles keep working, and destroyed ones stay refused, as the space they live in grows. */
static void test_handles_many(void** state) {
  (void)state;
  enum { kCount = 20000 };
  gpumem_allocator_t* first = host();
  gpumem_allocator_t* pool = pool_over(first);
  gpumem_allocator_t* destroyed[16];
  size_t n = 0;
  for (int i = 0; i < kCount; ++i) {
    gpumem_allocator_t* a = host();
    if (i % (kCount / 16) == 0 && n < 16) destroyed[n++] = a;
    assert_ok(gpumem_allocator_destroy(a));
  }
  gpumem_allocator_t* last = pool_over(first);
  void* p = NULL;
  assert_ok(gpumem_alloc(pool, 100, NULL, &p));
  assert_ok(gpumem_free(pool, p, NULL));
  assert_ok(gpumem_alloc(last, 100, NULL, &p));
  assert_ok(gpumem_free(last, p, NULL));
  for (size_t i = 0; i < n; ++i) assert_refused_allocator(destroyed[i], "it was destroyed");
  assert_ok(gpumem_allocator_destroy(last));
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(first));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_handles_wild_pointers_refused_unread), cmocka_unit_test(test_handles_copies_refused),
      cmocka_unit_test(test_handles_inside_a_handle_refused),      cmocka_unit_test(test_handles_destroyed_refused),
      cmocka_unit_test(test_handles_other_types_refused),          cmocka_unit_test(test_handles_many),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
