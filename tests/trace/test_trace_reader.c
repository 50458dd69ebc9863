/* The trace reader of the C API: a recording read back record by record, its header, and every
 * refusal. Needs no GPU. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"

static char path[256];

static int setup(void** state) {
  (void)state;
  const char* dir = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/gpumem_reader_%d.trace", dir && *dir ? dir : "/tmp", (int)getpid());
  return 0;
}

static int teardown(void** state) {
  (void)state;
  remove(path);
  return 0;
}

static gpumem_trace_record_t next_record(gpumem_trace_reader_t* r, bool* has) {
  gpumem_trace_record_t rec;
  memset(&rec, 0, sizeof rec);
  rec.struct_size = sizeof rec;
  assert_ok(gpumem_trace_reader_next(r, &rec, has));
  return rec;
}

static void test_trace_reader_reads_a_recording(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_trace_t* trace = NULL;
  assert_ok(gpumem_trace_start(host, path, 0, &trace));
  void* p = NULL;
  assert_ok(gpumem_alloc(host, 3000, (gpumem_stream_t)(uintptr_t)0x40, &p));
  assert_ok(gpumem_free(host, p, (gpumem_stream_t)(uintptr_t)0x40));
  assert_ok(gpumem_trace_stop(trace));
  assert_ok(gpumem_allocator_destroy(host));

  gpumem_trace_reader_t* r = NULL;
  assert_ok(gpumem_trace_reader_open(path, &r));
  gpumem_trace_header_t h;
  memset(&h, 0, sizeof h);
  h.struct_size = sizeof h;
  assert_ok(gpumem_trace_reader_get_header(r, &h));
  assert_int_equal(h.version, 1);
  assert_int_equal(h.device, -1);
  assert_string_equal(h.kind, "host");
  assert_true(h.start_unix_ns > 1700000000ull * 1000000000ull);
  bool has = false;
  gpumem_trace_record_t a = next_record(r, &has);
  assert_true(has);
  assert_int_equal(a.event, GPUMEM_TRACE_ALLOC);
  assert_int_equal(a.size, 3000);
  assert_int_equal(a.stream, 0x40);
  assert_int_equal(a.address, (uint64_t)(uintptr_t)p);
  gpumem_trace_record_t f = next_record(r, &has);
  assert_true(has);
  assert_int_equal(f.event, GPUMEM_TRACE_FREE);
  assert_int_equal(f.address, (uint64_t)(uintptr_t)p);
  assert_true(f.time_ns >= a.time_ns);
  next_record(r, &has);
  assert_false(has); /* the end */
  next_record(r, &has);
  assert_false(has); /* and it stays there */
  assert_ok(gpumem_trace_reader_close(r));
}

static void test_trace_reader_bad_input(void** state) {
  (void)state;
  gpumem_trace_reader_t* r = (gpumem_trace_reader_t*)&r;
  assert_status(gpumem_trace_reader_open(NULL, &r), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(r);
  assert_detail_contains("path is NULL");
  assert_status(gpumem_trace_reader_open(path, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_status(gpumem_trace_reader_open("/nonexistent-dir/none.trace", &r), GPUMEM_ERROR_IO);
  assert_detail_contains("cannot open the trace file /nonexistent-dir/none.trace");
  FILE* f = fopen(path, "wb");
  assert_non_null(f);
  fputs("GPUMEMTR but nothing after", f);
  fclose(f);
  assert_status(gpumem_trace_reader_open(path, &r), GPUMEM_ERROR_IO);
  assert_null(r);

  /* A recording, then damage in its only record. */
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_trace_t* trace = NULL;
  assert_ok(gpumem_trace_start(host, path, 0, &trace));
  void* p = NULL;
  assert_ok(gpumem_alloc(host, 100, NULL, &p));
  assert_ok(gpumem_trace_stop(trace));
  assert_ok(gpumem_free(host, p, NULL));
  assert_ok(gpumem_allocator_destroy(host));
  f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, 38, SEEK_SET), 0); /* inside the first record (the header is 38 bytes) */
  fputc(0x9c, f);                              /* an unknown record kind */
  fclose(f);
  assert_ok(gpumem_trace_reader_open(path, &r));
  gpumem_trace_record_t rec;
  memset(&rec, 0, sizeof rec);
  rec.struct_size = sizeof rec;
  bool has = true;
  assert_status(gpumem_trace_reader_next(r, &rec, &has), GPUMEM_ERROR_IO);
  assert_false(has);
  assert_detail_contains("is damaged at byte 38: an unknown record kind");
  assert_status(gpumem_trace_reader_next(r, &rec, &has), GPUMEM_ERROR_IO); /* the same again */
  assert_status(gpumem_trace_reader_next(r, NULL, &has), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_status(gpumem_trace_reader_next(r, &rec, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  rec.struct_size = 8;
  assert_status(gpumem_trace_reader_next(r, &rec, &has), GPUMEM_ERROR_INVALID_ARGUMENT);
  rec.struct_size = sizeof rec;
  assert_ok(gpumem_trace_reader_close(r));
  assert_status(gpumem_trace_reader_close(r), GPUMEM_ERROR_INVALID_HANDLE);
  assert_status(gpumem_trace_reader_next(r, &rec, &has), GPUMEM_ERROR_INVALID_HANDLE);
  assert_ok(gpumem_trace_reader_close(NULL));
  gpumem_trace_header_t h;
  h.struct_size = sizeof h;
  assert_status(gpumem_trace_reader_get_header(NULL, &h), GPUMEM_ERROR_INVALID_HANDLE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trace_reader_reads_a_recording),
      cmocka_unit_test(test_trace_reader_bad_input),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
