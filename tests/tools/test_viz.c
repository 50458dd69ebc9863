/* What gpumem viz gathers and writes (tools/viz_data.c, tools/viz_json.c), below the command: a
 * trace that grows or shrinks between being counted and being replayed, and the call stacks of the
 * page's data, in the page's order, each frame whole, or no data at all when out of memory. Linked
 * with -Wl,--wrap=calloc, so that a test can make the data's tables fail. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"
#include "viz.h"

static int calloc_fails; /* set: every calloc of the tool's own code fails */
void* __real_calloc(size_t count, size_t size);
void* __wrap_calloc(size_t count, size_t size);
void* __wrap_calloc(size_t count, size_t size) { return calloc_fails ? NULL : __real_calloc(count, size); }

static char path[256];
static struct viz_trace* t;

static int setup(void** state) {
  (void)state;
  temp_path(path, sizeof path, "viz", "csv");
  t = calloc(1, sizeof *t);
  return t ? 0 : -1;
}

static int teardown(void** state) {
  (void)state;
  calloc_fails = 0;
  remove(path);
  viz_free(t);
  free(t);
  return 0;
}

static int teardown_calloc(void** state) {
  (void)state;
  calloc_fails = 0;
  return 0;
}

/* An RMM log of these rows (after the header) at path; append: after what it holds. */
static void write_log(const char* rows, int append) {
  FILE* f = fopen(path, append ? "a" : "w");
  assert_non_null(f);
  if (!append) fputs("Thread,Time,Action,Pointer,Size,Stream\n", f);
  fputs(rows, f);
  assert_int_equal(fclose(f), 0);
}

static const char kTwoAllocations[] =
    "1,1.000,allocate,0x7f0000000000,4096,0x0\n"
    "1,1.001,allocate,0x7f0000100000,8192,0x0\n";

/* The trace counted, then written again (rows after its header, or appended), then replayed
 * through the pool: viz_gather's status, error set. */
static int gather(const char* rows, int append, char* error, size_t error_size) {
  t->path = t->replayed = path;
  t->capacity = 80ULL << 30;
  t->records = replay_count_records(path, error, error_size);
  assert_string_equal(error, "");
  write_log(rows, append);
  t->configs[0].r.name = "pool";
  t->config_count = 1;
  return viz_gather(t, error, error_size);
}

/* Rows written after the trace was counted are left out: the page is of the records counted. */
static void test_viz_pictures_the_records_counted(void** state) {
  (void)state;
  write_log(kTwoAllocations, 0);
  char error[1024] = "";
  assert_int_equal(gather("1,1.002,free,0x7f0000000000,4096,0x0\n1,1.003,allocate,0x7f0000200000,65536,0x0\n", 1, error,
                          sizeof error),
                   0);
  assert_int_equal(t->records, 2);
  assert_int_equal(t->block_count, 2);
  assert_int_equal(t->blocks[0].free_record, VIZ_NEVER); /* its free came after the count */
  assert_int_equal(t->configs[0].r.peak_live, 4096 + 8192);
}

/* A trace cut short after it was counted is refused, and told so, rather than half pictured. */
static void test_viz_refuses_a_trace_that_shrank(void** state) {
  (void)state;
  write_log(kTwoAllocations, 0);
  char error[1024] = "";
  assert_int_equal(gather("1,1.000,allocate,0x7f0000000000,4096,0x0\n", 0, error, sizeof error), -1);
  if (!strstr(error, "changed while it was read: 2 records counted, then 1 read"))
    fail_msg("the error is \"%s\"", error);
}

/* ---- The call stacks in the page's data ---- */

static char* frames[3];
static size_t frame_lengths[3];
static uint32_t stack_frames[3] = {0, 1, 2};
static size_t stack_start[4] = {0, 1, 2, 3};
static struct torch_snapshot snapshot;
static uint64_t times[6] = {0, 1, 2, 3, 4, 5};
static struct viz_block blocks[3];
static uint64_t streams[1];
static struct viz_trace page; /* of the arrays above: never freed */

/* Three allocations of a snapshot, each with a stack of one frame: the first two drawn as bands,
 * the first with the snapshot's second stack, the second with its first; the smallest, with the
 * third, summed in the band "other". The second frame holds a NUL of its own. */
static void snapshot_trace(void) {
  static char zero[] = "zero (a.py:1)", one[] = "one\0half (a.py:2)", two[] = "two (a.py:3)";
  frames[0] = zero, frames[1] = one, frames[2] = two;
  frame_lengths[0] = strlen(zero), frame_lengths[1] = sizeof one - 1, frame_lengths[2] = strlen(two);
  snapshot = (struct torch_snapshot){.frames = frames,
                                     .frame_lengths = frame_lengths,
                                     .frame_count = 3,
                                     .stack_frames = stack_frames,
                                     .stack_start = stack_start,
                                     .stack_count = 3};
  blocks[0] = (struct viz_block){0, 3, 1 << 20, 0, 1, 1};
  blocks[1] = (struct viz_block){1, 4, 1 << 20, 0, 1, 0};
  blocks[2] = (struct viz_block){2, 5, 4096, 0, 1, 2};
  memset(&page, 0, sizeof page);
  page.path = "run.pickle";
  page.format = "PyTorch snapshot";
  page.snapshot = &snapshot;
  page.records = 6;
  page.times = times;
  page.blocks = blocks;
  page.block_count = 3;
  page.streams = streams;
  page.stream_count = 1;
  page.band_limit = 2;
}

/* The page's data, or NULL when viz_write_json failed. */
static char* page_data(void) {
  char* text = NULL;
  size_t size = 0;
  FILE* f = open_memstream(&text, &size);
  assert_non_null(f);
  const int got = viz_write_json(f, &page);
  assert_int_equal(fclose(f), 0);
  if (got == 0) return text;
  free(text);
  return NULL;
}

/* Each band names its stack by the page's ids, and each stack its frames: the frames whole. */
static void test_viz_writes_the_stacks_of_the_bands(void** state) {
  (void)state;
  snapshot_trace();
  char* data = page_data();
  assert_non_null(data);
  if (!strstr(data, "\"frames\":[\"one\\u0000half (a.py:2)\",\"zero (a.py:1)\"],\"stacks\":[[0],[1]]"))
    fail_msg("the frames and stacks are not the bands': %s", data);
  if (!strstr(data, "\"blocks\":[[0,0,3,3,1048576,0,0,1],[1,1,4,4,1048576,0,1,1]]"))
    fail_msg("the bands do not name their stacks: %s", data);
  if (strstr(data, "two (a.py:3)")) fail_msg("the data holds the stack of no band: %s", data);
  free(data);
}

/* Out of memory for the frames' table: no data at all, rather than stacks that name no frames. */
static void test_viz_writes_no_stacks_without_their_frames(void** state) {
  (void)state;
  snapshot_trace();
  calloc_fails = 1;
  char* data = page_data();
  calloc_fails = 0;
  assert_null(data);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_viz_pictures_the_records_counted, setup, teardown),
      cmocka_unit_test_setup_teardown(test_viz_refuses_a_trace_that_shrank, setup, teardown),
      cmocka_unit_test(test_viz_writes_the_stacks_of_the_bands),
      cmocka_unit_test_teardown(test_viz_writes_no_stacks_without_their_frames, teardown_calloc),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
