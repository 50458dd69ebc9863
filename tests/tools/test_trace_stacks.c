/* The call stacks of a gpumem trace as gpumem viz reads them (tools/trace_stacks.c, over
 * tools/stack_table.c): a trace recorded here with caller frames, each record's stack by its index,
 * records of the same stack sharing it, frames shared between stacks, and the refusals: a damaged
 * trace, the tool out of host memory. A trace without frames gives none. Needs no GPU. */
#define _POSIX_C_SOURCE 200809L

#include "test_util.h"
#include "trace_stacks.h"

static int calloc_fails;
void* __real_calloc(size_t count, size_t size);
void* __wrap_calloc(size_t count, size_t size);
void* __wrap_calloc(size_t count, size_t size) { return calloc_fails ? NULL : __real_calloc(count, size); }

static char path[256];
static struct torch_snapshot s;

static int setup(void** state) {
  (void)state;
  temp_path(path, sizeof path, "trace_stacks", "trace");
  memset(&s, 0, sizeof s);
  return 0;
}

static int teardown(void** state) {
  (void)state;
  calloc_fails = 0;
  torch_snapshot_free(&s);
  remove(path);
  return 0;
}

/* The caller's frames of the next allocation: one a line, innermost first ("" for none). */
static const char* frames_now;

static size_t write_frames(char* buffer, size_t capacity, void* user_data) {
  (void)user_data;
  const size_t n = strlen(frames_now) < capacity ? strlen(frames_now) : capacity;
  memcpy(buffer, frames_now, n);
  return n;
}

static void* allocate(gpumem_allocator_t* a, const char* frames) {
  frames_now = frames;
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 256, NULL, &p));
  return p;
}

/* Records 0 to 7: allocations with stacks A, B, none (freed at once), A again; then the frees. */
static void record_trace(int with_frames) {
  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  gpumem_trace_params_t params;
  assert_ok(gpumem_trace_params_init(&params, sizeof params));
  params.frames = with_frames ? write_frames : NULL;
  gpumem_trace_t* t = NULL;
  assert_ok(gpumem_trace_start_with_params(host, path, &params, &t));
  void* a = allocate(host, "a.py:1 f\nmain.py:9 <module>");
  void* b = allocate(host, "b.py:2 g\nmain.py:9 <module>");
  assert_ok(gpumem_free(host, a, NULL));
  void* none = allocate(host, "");
  void* again = allocate(host, "a.py:1 f\nmain.py:9 <module>");
  assert_ok(gpumem_free(host, b, NULL));
  assert_ok(gpumem_free(host, none, NULL));
  assert_ok(gpumem_free(host, again, NULL));
  assert_ok(gpumem_trace_stop(t));
  assert_ok(gpumem_allocator_destroy(host));
}

/* Frame k of stack id, as text. */
static const char* frame_of(int32_t stack, size_t k) {
  assert_in_range(stack, 0, (int64_t)s.stack_count - 1);
  assert_true(k < s.stack_start[stack + 1] - s.stack_start[stack]);
  const uint32_t frame = s.stack_frames[s.stack_start[stack] + k];
  assert_true(frame < s.frame_count);
  assert_int_equal(s.frame_lengths[frame], strlen(s.frames[frame]));
  return s.frames[frame];
}

static void test_trace_stacks_gives_each_record_its_stack(void** state) {
  (void)state;
  record_trace(1);
  char error[512] = "";
  assert_int_equal(trace_stacks_read(path, UINT64_MAX, &s, error, sizeof error), 1);
  assert_string_equal(error, "");
  assert_null(s.records);
  assert_int_equal(s.device, -1);
  assert_int_equal(s.count, 8);
  const int32_t want[8] = {0, 1, -1, -1, 0, -1, -1, -1};
  for (size_t i = 0; i < 8; i++) assert_int_equal(s.stacks[i], want[i]);
  assert_int_equal(s.stack_count, 2);
  assert_int_equal(s.stack_start[1] - s.stack_start[0], 2);
  assert_int_equal(s.stack_start[2] - s.stack_start[1], 2);
  assert_string_equal(frame_of(0, 0), "a.py:1 f");
  assert_string_equal(frame_of(0, 1), "main.py:9 <module>");
  assert_string_equal(frame_of(1, 0), "b.py:2 g");
  assert_string_equal(frame_of(1, 1), "main.py:9 <module>");
  /* The outer frame both stacks have is kept once. */
  assert_int_equal(s.frame_count, 3);
  assert_int_equal(s.stack_frames[s.stack_start[0] + 1], s.stack_frames[s.stack_start[1] + 1]);
}

/* The records counted are read, and no more: those a recording adds meanwhile are not pictured. */
static void test_trace_stacks_reads_the_records_counted(void** state) {
  (void)state;
  record_trace(1);
  char error[512] = "";
  assert_int_equal(trace_stacks_read(path, 2, &s, error, sizeof error), 1);
  assert_int_equal(s.count, 2);
  assert_int_equal(s.stacks[1], 1);
  torch_snapshot_free(&s);
  /* The first record alone: A's stack, and not yet B's. */
  assert_int_equal(trace_stacks_read(path, 1, &s, error, sizeof error), 1);
  assert_int_equal(s.count, 1);
  assert_int_equal(s.stack_count, 1);
}

/* A trace without frames (format version 1) has no stacks, and leaves nothing to free. */
static void test_trace_stacks_of_a_trace_without_frames_are_none(void** state) {
  (void)state;
  record_trace(0);
  char error[512] = "";
  assert_int_equal(trace_stacks_read(path, UINT64_MAX, &s, error, sizeof error), 0);
  assert_string_equal(error, "");
  assert_int_equal(s.count, 0);
  assert_null(s.stacks);
  assert_int_equal(s.frame_count, 0);
  assert_int_equal(s.stack_count, 0);
  assert_int_equal(s.device, -1);
}

/* A record of an unknown kind after the last: the reader's refusal, naming the file and the byte. */
static void test_trace_stacks_refuses_a_damaged_trace(void** state) {
  (void)state;
  record_trace(1);
  FILE* f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  const long size = ftell(f);
  assert_int_equal(fputc(0x7f, f), 0x7f);
  assert_int_equal(fclose(f), 0);
  char error[1024] = "", want[512];
  assert_int_equal(trace_stacks_read(path, UINT64_MAX, &s, error, sizeof error), -1);
  snprintf(want, sizeof want, "%s is damaged at byte %ld: an unknown record kind", path, size);
  if (!strstr(error, want) || strncmp(error, "GPUMEM_ERROR_IO: ", 17) != 0)
    fail_msg("error \"%s\" does not say \"GPUMEM_ERROR_IO: ...%s\"", error, want);
  assert_int_equal(s.count, 0);
  assert_null(s.stacks);
  assert_int_equal(s.frame_count, 0);
}

static void test_trace_stacks_out_of_memory_is_told(void** state) {
  (void)state;
  record_trace(1);
  char error[1024] = "", want[512];
  calloc_fails = 1; /* the table of frames */
  assert_int_equal(trace_stacks_read(path, UINT64_MAX, &s, error, sizeof error), -1);
  calloc_fails = 0;
  snprintf(want, sizeof want, "%s: out of host memory for the trace's call stacks", path);
  assert_string_equal(error, want);
  assert_int_equal(s.count, 0);
  assert_int_equal(s.frame_count, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_trace_stacks_gives_each_record_its_stack, setup, teardown),
      cmocka_unit_test_setup_teardown(test_trace_stacks_reads_the_records_counted, setup, teardown),
      cmocka_unit_test_setup_teardown(test_trace_stacks_of_a_trace_without_frames_are_none, setup, teardown),
      cmocka_unit_test_setup_teardown(test_trace_stacks_refuses_a_damaged_trace, setup, teardown),
      cmocka_unit_test_setup_teardown(test_trace_stacks_out_of_memory_is_told, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
