/* gpumem_trace_summarize(): a recording's figures as torch.cuda.memory_stats() gives them, and the
 * text of `gpumem summary`, with the largest allocations at the peak and the frames they came
 * from, given a piece at a time; a trace read once, from a pipe too. Needs no GPU. */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

#define MiB (1u << 20)

static char path[256], fifo[256];
static const char* where = ""; /* the caller frame of the next allocation */

static size_t write_where(char* buffer, size_t capacity, void* user_data) {
  (void)user_data;
  const size_t n = strlen(where) < capacity ? strlen(where) : capacity;
  memcpy(buffer, where, n);
  return n;
}

static int setup(void** state) {
  (void)state;
  temp_path(path, sizeof path, "summary", "trace");
  temp_path(fifo, sizeof fifo, "summary", "fifo");
  return 0;
}

static int teardown(void** state) {
  (void)state;
  alarm(0);
  remove(path);
  remove(fifo);
  return 0;
}

static void* alloc_at(gpumem_allocator_t* a, size_t size, const char* frame) {
  where = frame;
  void* p = NULL;
  assert_ok(gpumem_alloc(a, size, NULL, &p));
  return p;
}

/* A pool of 8 MiB at most, recorded with caller frames: 2 MiB from a, 1 MiB and 4 KiB from b (the
 * peak: 3 allocations, 3 MiB + 4 KiB), the 1 MiB freed, 512 bytes from c, 64 MiB refused, the rest
 * freed. */
static void record_run(void) {
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_pool_params_t pp = GPUMEM_POOL_PARAMS_INIT;
  pp.upstream = host;
  pp.limit = 8 * MiB;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&pp, &pool));
  gpumem_trace_params_t params = GPUMEM_TRACE_PARAMS_INIT;
  params.frames = write_where;
  gpumem_trace_t* t = NULL;
  assert_ok(gpumem_trace_start_with_params(pool, path, &params, &t));
  void* a = alloc_at(pool, 2 * MiB, "model.py:1 a");
  void* b = alloc_at(pool, MiB, "model.py:2 b");
  void* small = alloc_at(pool, 4096, "model.py:2 b");
  assert_ok(gpumem_free(pool, b, NULL));
  void* c = alloc_at(pool, 512, "model.py:3 c");
  void* p = NULL;
  assert_status(gpumem_alloc(pool, 64 * MiB, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_ok(gpumem_free(pool, a, NULL));
  assert_ok(gpumem_free(pool, small, NULL));
  assert_ok(gpumem_free(pool, c, NULL));
  assert_ok(gpumem_trace_stop(t));
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(host));
}

/* What the trace itself says of its upstream records, read record by record. */
struct upstream {
  uint64_t records, reserved_peak, reserved_total, segments_total;
};
static struct upstream read_upstream(void) {
  struct upstream u = {0, 0, 0, 0};
  gpumem_trace_reader_t* r = NULL;
  assert_ok(gpumem_trace_reader_open(path, &r));
  gpumem_trace_record_t rec = trace_record();
  bool has = false;
  uint64_t reserved = 0;
  while (gpumem_trace_reader_next(r, &rec, &has) == GPUMEM_SUCCESS && has) {
    ++u.records;
    if (rec.event == GPUMEM_TRACE_UPSTREAM_ALLOC) {
      reserved += rec.size;
      u.reserved_total += rec.size;
      ++u.segments_total;
      if (reserved > u.reserved_peak) u.reserved_peak = reserved;
    }
    if (rec.event == GPUMEM_TRACE_UPSTREAM_FREE) reserved -= rec.size;
  }
  assert_ok(gpumem_trace_reader_close(r));
  return u;
}

static gpumem_trace_summary_t figures_of(const char* file) {
  gpumem_trace_summary_t s;
  memset(&s, 0xa5, sizeof s);
  s.struct_size = sizeof s;
  assert_ok(gpumem_trace_summarize(file, 10, NULL, NULL, &s));
  assert_int_equal(s.struct_size, sizeof s);
  return s;
}

/* A summary's text as gpumem_trace_summarize() gives it, a piece at a time. */
struct text {
  char* data;
  size_t length, pieces;
};

static void collect(const char* piece, size_t length, void* user_data) {
  struct text* t = user_data;
  assert_true(length > 0);
  t->data = realloc(t->data, t->length + length + 1);
  assert_non_null(t->data);
  memcpy(t->data + t->length, piece, length);
  t->length += length;
  t->data[t->length] = '\0';
  ++t->pieces;
}

/* The text of a summary (freed by the caller), from one reading of the trace. */
static struct text summary_of(const char* file, uint32_t top, gpumem_trace_summary_t* figures) {
  struct text t = {NULL, 0, 0};
  assert_ok(gpumem_trace_summarize(file, top, collect, &t, figures));
  assert_non_null(t.data);
  assert_int_equal(strlen(t.data), t.length); /* no NUL inside */
  return t;
}

static char* text_of(const char* file, uint32_t top) { return summary_of(file, top, NULL).data; }

static void test_trace_summary_figures(void** state) {
  (void)state;
  record_run();
  const gpumem_trace_summary_t s = figures_of(path);
  assert_int_equal(s.allocated_bytes, 0);
  assert_int_equal(s.allocated_bytes_peak, 3 * MiB + 4096);
  assert_int_equal(s.allocated_bytes_total, 3 * MiB + 4096 + 512);
  assert_int_equal(s.freed_bytes_total, s.allocated_bytes_total);
  assert_int_equal(s.large_allocated_bytes_peak, 3 * MiB);
  assert_int_equal(s.small_allocated_bytes_peak, 4096 + 512); /* each class has a peak of its own */
  assert_int_equal(s.requested_bytes_peak, 3 * MiB + 4096);
  assert_int_equal(s.alloc_count, 0);
  assert_int_equal(s.alloc_count_peak, 3);
  assert_int_equal(s.alloc_count_total, 4);
  assert_int_equal(s.free_count_total, 4);
  assert_int_equal(s.large_alloc_count_total, 2);
  assert_int_equal(s.small_alloc_count_total, 2);
  assert_int_equal(s.peak_record_alloc_count, 3);
  assert_int_equal(s.failed_count, 1);
  assert_int_equal(s.oom_count, 1);
  assert_int_equal(s.first_failed_size, 64 * MiB);
  assert_int_equal(s.unknown_free_count, 0);
  const struct upstream u = read_upstream();
  assert_int_equal(s.records, u.records);
  assert_true(s.upstream_record_count > 0);
  assert_int_equal(s.reserved_bytes_peak, u.reserved_peak);
  assert_int_equal(s.reserved_bytes_total, u.reserved_total);
  assert_int_equal(s.segment_count_total, u.segments_total);
  assert_int_equal(s.version, 2);
  assert_int_equal(s.device, -1);
  assert_string_equal(s.kind, "pool");
}

/* The largest allocations at the peak, each with the frames it came from, named once. */
static void test_trace_summary_text_says_where_the_peak_came_from(void** state) {
  (void)state;
  record_run();
  const gpumem_trace_summary_t s = figures_of(path);
  char* text = text_of(path, 2);
  char heading[128];
  snprintf(heading, sizeof heading, "Largest allocations live at the peak (record %llu: 3 allocations, 3.00 MiB):",
           (unsigned long long)s.peak_record);
  assert_non_null(strstr(text, heading));
  assert_non_null(strstr(text, "| Allocated memory       |          0 B |     3.00 MiB |"));
  assert_non_null(strstr(
      text, "\nFailed allocations (out of memory or refused): 1, the first of 67108864 bytes; 1 out of memory\n"));
  const char* big = strstr(text, "      2.00 MiB      2097152");
  assert_non_null(big);
  assert_non_null(strstr(big, "\n      at model.py:1 a\n      1.00 MiB      1048576"));
  assert_non_null(strstr(big, "\n      at model.py:2 b\n  ... and 1 smaller\n"));
  free(text);

  /* All three: the 4 KiB came from where the 1 MiB did. */
  text = text_of(path, 3);
  const char* four = strstr(text, "    4.00 KiB         4096");
  assert_non_null(four);
  assert_non_null(strstr(four, "\n      at the frames of record "));
  free(text);
}

/* One call gives the figures and the text, which starts with the trace it sums up. */
static void test_trace_summary_figures_and_text_at_once(void** state) {
  (void)state;
  record_run();
  gpumem_trace_summary_t s;
  memset(&s, 0xa5, sizeof s);
  s.struct_size = sizeof s;
  struct text t = summary_of(path, 10, &s);
  const gpumem_trace_summary_t want = figures_of(path);
  assert_memory_equal(&s, &want, sizeof s);
  assert_memory_equal(t.data, path, strlen(path));
  assert_int_equal(t.pieces, 1); /* a short text comes whole */
  free(t.data);
}

/* A trace without frames, or without allocations, has no frames or no list. */
static void test_trace_summary_without_frames_or_allocations(void** state) {
  (void)state;
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_trace_t* t = NULL;
  assert_ok(gpumem_trace_start(host, path, 0, &t));
  assert_ok(gpumem_trace_stop(t));
  char* text = text_of(path, 10);
  assert_non_null(strstr(text, ": 0 records\n"));
  assert_null(strstr(text, "Largest allocations"));
  free(text);
  assert_int_equal(figures_of(path).peak_record, 0);

  assert_ok(gpumem_trace_start(host, path, 0, &t));
  void* p = NULL;
  assert_ok(gpumem_alloc(host, 1000, NULL, &p));
  assert_ok(gpumem_trace_stop(t));
  text = text_of(path, 10);
  assert_non_null(strstr(text, "(record 1: 1 allocations, 1000 B)"));
  assert_non_null(strstr(text, "(no upstream records: the traced allocator is not a pool"));
  assert_null(strstr(text, "      at "));
  free(text);
  const gpumem_trace_summary_t s = figures_of(path);
  assert_int_equal(s.version, 1);
  assert_int_equal(s.alloc_count, 1);
  assert_int_equal(s.upstream_record_count, 0);
  assert_string_equal(s.kind, "host");
  assert_ok(gpumem_free(host, p, NULL));
  assert_ok(gpumem_allocator_destroy(host));
}

/* Records 2000 allocations live at once, each from a frame of its own: a summary that lists
 * them all is far longer than 64 KiB. */
static void record_many(void) {
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_trace_params_t params = GPUMEM_TRACE_PARAMS_INIT;
  params.frames = write_where;
  gpumem_trace_t* t = NULL;
  assert_ok(gpumem_trace_start_with_params(host, path, &params, &t));
  enum { kCount = 2000 };
  static void* p[kCount];
  static char frame[64];
  for (int i = 0; i < kCount; ++i) {
    snprintf(frame, sizeof frame, "model.py:%d layer_%d", i + 1, i);
    p[i] = alloc_at(host, 256 + (size_t)i, frame);
  }
  for (int i = 0; i < kCount; ++i) assert_ok(gpumem_free(host, p[i], NULL));
  assert_ok(gpumem_trace_stop(t));
  assert_ok(gpumem_allocator_destroy(host));
}

/* One pass: a trace that arrives through a FIFO gives the figures and a text of more than 64 KiB
 * from one reading, as the file does. */
static void test_trace_summary_reads_a_pipe(void** state) {
  (void)state;
  alarm(20);
  record_many();
  gpumem_trace_summary_t want;
  memset(&want, 0, sizeof want);
  want.struct_size = sizeof want;
  struct text from_file = summary_of(path, 3000, &want);
  assert_true(from_file.length > 64 << 10);
  assert_true(from_file.pieces > 1);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  const pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    FILE* in = fopen(path, "rb");
    FILE* out = fopen(fifo, "wb");
    if (!in || !out) _exit(1);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, in)) > 0)
      if (fwrite(chunk, 1, n, out) != n) _exit(1);
    _exit(fclose(out) == 0 ? 0 : 1);
  }
  gpumem_trace_summary_t got;
  memset(&got, 0, sizeof got);
  got.struct_size = sizeof got;
  struct text from_fifo = summary_of(fifo, 3000, &got);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_memory_equal(&got, &want, sizeof got);
  assert_int_equal(got.alloc_count_peak, 2000);
  /* The same text but for its first line, which names the file it read. */
  const char* body_file = strchr(from_file.data, '\n');
  const char* body_fifo = strchr(from_fifo.data, '\n');
  assert_non_null(body_file);
  assert_non_null(body_fifo);
  assert_string_equal(body_fifo, body_file);
  assert_non_null(strstr(body_fifo, "\n      at model.py:2000 layer_1999\n"));
  free(from_file.data);
  free(from_fifo.data);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_trace_summary_figures, teardown),
      cmocka_unit_test_teardown(test_trace_summary_text_says_where_the_peak_came_from, teardown),
      cmocka_unit_test_teardown(test_trace_summary_figures_and_text_at_once, teardown),
      cmocka_unit_test_teardown(test_trace_summary_without_frames_or_allocations, teardown),
      cmocka_unit_test_teardown(test_trace_summary_reads_a_pipe, teardown),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
