/* The trace reader of the C API: a recording read back record by record, its header, and every
 * refusal; a file that is not a trace refused at its first bytes, however long it is, and a trace
 * read as it comes, through a buffer of a fixed size. Needs no GPU. */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

static char path[256], fifo[256];

static int setup(void** state) {
  (void)state;
  temp_path(path, sizeof path, "reader", "trace");
  temp_path(fifo, sizeof fifo, "reader", "fifo");
  return 0;
}

static int teardown(void** state) {
  (void)state;
  alarm(0);
  remove(path);
  remove(fifo);
  return 0;
}

/* A recording of a host allocator's allocs allocations and their frees, written to path; its size. */
static long record(int allocs) {
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_trace_t* trace = NULL;
  assert_ok(gpumem_trace_start(host, path, 0, &trace));
  for (int i = 0; i < allocs; i++) {
    void* p = NULL;
    assert_ok(gpumem_alloc(host, 64 + (size_t)i, (gpumem_stream_t)(uintptr_t)0x40, &p));
    assert_ok(gpumem_free(host, p, (gpumem_stream_t)(uintptr_t)0x40));
  }
  assert_ok(gpumem_trace_stop(trace));
  assert_ok(gpumem_allocator_destroy(host));
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  return (long)st.st_size;
}

static void write_file(const void* data, size_t size) {
  FILE* f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, size, f), size);
  assert_int_equal(fclose(f), 0);
}

/* The memory this process holds now, in KiB. */
static long resident_kib(void) {
  FILE* f = fopen("/proc/self/statm", "r");
  assert_non_null(f);
  long size = 0, resident = 0;
  assert_int_equal(fscanf(f, "%ld %ld", &size, &resident), 2);
  fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static gpumem_trace_record_t next_record(gpumem_trace_reader_t* r, bool* has) {
  gpumem_trace_record_t rec = trace_record();
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
  gpumem_trace_record_t rec = trace_record();
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

/* A file of zeros is no trace, and is refused after its first 8 bytes: /dev/zero has no end. Read
 * whole first, it grew the process without bound; the alarm fails the test if that comes back. */
static void test_trace_reader_refuses_zeros_at_once(void** state) {
  (void)state;
  alarm(20);
  static const char zeros[4096];
  write_file(zeros, sizeof zeros);
  gpumem_trace_reader_t* r = (gpumem_trace_reader_t*)&r;
  assert_status(gpumem_trace_reader_open(path, &r), GPUMEM_ERROR_IO);
  assert_null(r);
  assert_detail_contains("is not a gpumem trace (it does not start with GPUMEMTR)");
  assert_status(gpumem_trace_reader_open("/dev/zero", &r), GPUMEM_ERROR_IO);
  assert_null(r);
  assert_detail_contains("/dev/zero is not a gpumem trace (it does not start with GPUMEMTR)");
}

/* A file of 1 GiB (sparse: it takes no disk) is opened, refused or read through a buffer of 64 KiB:
 * while a reader is open the process holds a few KiB more, not the file. */
static void test_trace_reader_memory_does_not_grow_with_the_file(void** state) {
  (void)state;
  alarm(20);
  const long header = record(0);
  assert_int_equal(truncate(path, 1L << 30), 0); /* the header, then zeros: a record of kind 0 */
  const long before = resident_kib();
  gpumem_trace_reader_t* r = NULL;
  assert_ok(gpumem_trace_reader_open(path, &r));
  const long open = resident_kib();
  if (open - before > 16 << 10) fail_msg("an open reader holds %ld KiB", open - before);
  gpumem_trace_record_t rec;
  rec.struct_size = sizeof rec;
  bool has = true;
  assert_status(gpumem_trace_reader_next(r, &rec, &has), GPUMEM_ERROR_IO);
  char want[64];
  snprintf(want, sizeof want, "is damaged at byte %ld: an unknown record kind", header);
  assert_detail_contains(want);
  assert_ok(gpumem_trace_reader_close(r));
  assert_int_equal(truncate(path, 0), 0);
  assert_int_equal(truncate(path, 1L << 30), 0); /* zeros from the start: no trace at all */
  assert_status(gpumem_trace_reader_open(path, &r), GPUMEM_ERROR_IO);
  assert_detail_contains("is not a gpumem trace");
}

/* A child that writes data into the FIFO and keeps it open until told (its control pipe closes). */
static pid_t writer(const void* data, size_t size, int* told) {
  int control[2];
  assert_int_equal(pipe(control), 0);
  const pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(control[1]);
    FILE* f = fopen(fifo, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fflush(f) != 0) _exit(1);
    char c;
    while (read(control[0], &c, 1) > 0) continue;
    _exit(0);
  }
  close(control[0]);
  *told = control[1];
  return pid;
}

static void finish(pid_t pid, int told) {
  close(told);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Records are read as they arrive, with the writer still at work: no wait for the end of the file. */
static void test_trace_reader_reads_a_pipe_as_it_comes(void** state) {
  (void)state;
  alarm(20);
  const long size = record(2);
  static unsigned char data[4096];
  FILE* f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fread(data, 1, sizeof data, f), size);
  fclose(f);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  int told = -1;
  const pid_t pid = writer(data, (size_t)size, &told);
  gpumem_trace_reader_t* r = NULL;
  assert_ok(gpumem_trace_reader_open(fifo, &r));
  gpumem_trace_header_t h;
  h.struct_size = sizeof h;
  assert_ok(gpumem_trace_reader_get_header(r, &h));
  assert_string_equal(h.kind, "host");
  bool has = false;
  static const uint32_t events[] = {GPUMEM_TRACE_ALLOC, GPUMEM_TRACE_FREE, GPUMEM_TRACE_ALLOC, GPUMEM_TRACE_FREE};
  for (int i = 0; i < 4; i++) {
    const gpumem_trace_record_t rec = next_record(r, &has);
    assert_true(has);
    assert_int_equal(rec.event, events[i]);
  }
  finish(pid, told); /* only now does the file end */
  next_record(r, &has);
  assert_false(has);
  assert_ok(gpumem_trace_reader_close(r));
}

/* Eight bytes that are no magic are refused at once, though the writer has not finished. */
static void test_trace_reader_refuses_a_pipe_at_its_first_bytes(void** state) {
  (void)state;
  alarm(20);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  int told = -1;
  const pid_t pid = writer("NOTATRAC", 8, &told);
  gpumem_trace_reader_t* r = NULL;
  assert_status(gpumem_trace_reader_open(fifo, &r), GPUMEM_ERROR_IO);
  assert_detail_contains("is not a gpumem trace (it does not start with GPUMEMTR)");
  finish(pid, told);
}

/* Header sizes that do not fit are refused at byte 12, where the size is, with the numbers. */
static void test_trace_reader_refuses_bad_header_sizes(void** state) {
  (void)state;
  unsigned char data[4096];
  const long size = record(1);
  FILE* f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fread(data, 1, sizeof data, f), size);
  fclose(f);
  static const struct {
    uint32_t header_size;
    const char* detail;
  } cases[] = {
      {20,
       "is damaged at byte 12: a header size of 20 bytes, less than the 38 that its fields and its 4-byte kind "
       "take"},
      {0xffffffffu,
       "is damaged at byte 12: a header size of 4294967295 bytes, more than the 1048576 a gpumem "
       "trace's header may have"},
      {1000, "is damaged at byte 12: a header size of 1000 bytes, past the end of the file at byte "},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    unsigned char bad[4096];
    memcpy(bad, data, (size_t)size);
    for (int b = 0; b < 4; b++) bad[12 + b] = (unsigned char)(cases[i].header_size >> (8 * b));
    write_file(bad, (size_t)size);
    gpumem_trace_reader_t* r = (gpumem_trace_reader_t*)&r;
    assert_status(gpumem_trace_reader_open(path, &r), GPUMEM_ERROR_IO);
    assert_null(r);
    assert_detail_contains(cases[i].detail);
  }
  write_file(data, 20); /* the magic, the version and half the header */
  gpumem_trace_reader_t* r = NULL;
  assert_status(gpumem_trace_reader_open(path, &r), GPUMEM_ERROR_IO);
  assert_detail_contains("is damaged at byte 20: the header ends early");
}

/* Version 2's definitions that do not hold together are damage too, each at its byte. */
static void test_trace_reader_refuses_bad_frame_definitions(void** state) {
  (void)state;
  static const unsigned char header[38] = {'G', 'P', 'U', 'M',  'E',  'M',  'T',  'R', 2,   0,   0,   0,  38,
                                           0,   0,   0,   0xff, 0xff, 0xff, 0xff, 0,   0,   0,   0,   0,  0,
                                           0,   0,   0,   0,    0,    0,    4,    0,   'h', 'o', 's', 't'};
  static const struct {
    unsigned char body[8];
    size_t size;
    uint32_t version;
    const char* detail;
  } cases[] = {
      {{6, 3, 1, 'x'}, 4, 2, "is damaged at byte 39: an unknown kind of frame"},
      {{6, 2, 1, 'a', 8, 1, 2}, 7, 2, "is damaged at byte 44: frame 2, which no definition before it defines"},
      {{8, 0}, 2, 2, "is damaged at byte 39: a stack of 0 frames; a stack has 1 to 128"},
      {{1, 0, 1, 0, 0, 0x40, 0x40, 1}, 8, 2, "is damaged at byte 45: stack 1, which no definition before it defines"},
      {{6, 2, 0x81, 0x20},
       4,
       2,
       "is damaged at byte 40: a frame's text of 4097 bytes, more than the 4096 a frame's text, symbol or module "
       "path may have"},
      {{6, 2, 9, 'a', 'b'}, 5, 2, "is damaged at byte 43: a record ends early"},
      {{6, 2, 3, 'a', 0, 'b'}, 6, 2, "is damaged at byte 42: a NUL byte in a frame's text"},
      {{6, 2, 1, 'a'}, 4, 1, "is damaged at byte 38: an unknown record kind"}, /* no definitions in version 1 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    unsigned char data[64];
    memcpy(data, header, sizeof header);
    data[8] = (unsigned char)cases[i].version;
    memcpy(data + sizeof header, cases[i].body, cases[i].size);
    write_file(data, sizeof header + cases[i].size);
    gpumem_trace_reader_t* r = NULL;
    assert_ok(gpumem_trace_reader_open(path, &r));
    gpumem_trace_record_t rec;
    memset(&rec, 0, sizeof rec);
    rec.struct_size = sizeof rec;
    bool has = true;
    assert_status(gpumem_trace_reader_next(r, &rec, &has), GPUMEM_ERROR_IO);
    assert_false(has);
    assert_detail_contains(cases[i].detail);
    assert_ok(gpumem_trace_reader_close(r));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trace_reader_reads_a_recording),
      cmocka_unit_test(test_trace_reader_bad_input),
      cmocka_unit_test_teardown(test_trace_reader_refuses_zeros_at_once, teardown),
      cmocka_unit_test_teardown(test_trace_reader_memory_does_not_grow_with_the_file, teardown),
      cmocka_unit_test_teardown(test_trace_reader_reads_a_pipe_as_it_comes, teardown),
      cmocka_unit_test_teardown(test_trace_reader_refuses_a_pipe_at_its_first_bytes, teardown),
      cmocka_unit_test_teardown(test_trace_reader_refuses_bad_header_sizes, teardown),
      cmocka_unit_test_teardown(test_trace_reader_refuses_bad_frame_definitions, teardown),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
