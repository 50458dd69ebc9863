/* gpumem replay's own rules (tools/replay.c): what a replay counts for
 * rows of 0 bytes and for sizes a configuration does not take, that it reads no record past those
 * counted, and that running out of memory for its own bookkeeping is reported as the tool's failure. Linked with
 * -Wl,--wrap=calloc, so that a test can make the replay's tables fail to grow. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <unistd.h>

#include "replay.h"
#include "test_util.h"

static int calloc_fails; /* set: every calloc of the replay's own code fails */
void* __real_calloc(size_t count, size_t size);
void* __wrap_calloc(size_t count, size_t size);
void* __wrap_calloc(size_t count, size_t size) { return calloc_fails ? NULL : __real_calloc(count, size); }

static char path[256];

static int setup(void** state) {
  (void)state;
  temp_path(path, sizeof path, "replay", "csv");
  return 0;
}

static int teardown(void** state) {
  (void)state;
  calloc_fails = 0;
  remove(path);
  return 0;
}

/* Writes an RMM log of the rows given (after the header) to path. */
static void write_log(const char* rows) {
  FILE* f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "Thread,Time,Action,Pointer,Size,Stream\n%s", rows);
  assert_int_equal(fclose(f), 0);
}

static struct replay_result replay(const char* config) {
  struct replay_result r;
  memset(&r, 0, sizeof r);
  r.name = config;
  char error[512] = "";
  const uint64_t records = replay_count_records(path, error, sizeof error);
  assert_string_equal(error, "");
  replay_run(path, 80ULL << 30, records, &r, NULL);
  return r;
}

/* RMM's replay gives its resource 0-byte allocations, which return NULL, and then frees that NULL:
 * nothing happens, so nothing is counted as made, failed or unmatched; they are counted as skipped. */
static void test_replay_skips_rows_of_0_bytes(void** state) {
  (void)state;
  write_log(
      "1,1.000,allocate,0x0,0,0x0\n"
      "1,1.001,allocate,0x7f0000000000,0,0x0\n"
      "1,1.002,allocate,0x7f0000100000,4096,0x0\n"
      "1,1.003,free,0x7f0000000000,0,0x0\n"
      "1,1.004,free,0x0,0,0x0\n"
      "1,1.005,free,0x7f0000100000,4096,0x0\n");
  const struct replay_result r = replay("pool");
  assert_string_equal(r.error, "");
  assert_int_equal(r.skipped, 4);
  assert_int_equal(r.allocs, 1);
  assert_int_equal(r.frees, 1);
  assert_int_equal(r.failed, 0);
  assert_int_equal(r.refused, 0);
  assert_int_equal(r.unmatched_frees, 0);
  assert_int_equal(r.peak_live, 4096);
}

static void test_replay_tells_refusals_from_out_of_memory(void** state) {
  (void)state;
  write_log(
      "1,1.000,allocate,0x7f0000000000,18446744073709551615,0x0\n"
      "1,1.001,allocate,0x7f0000100000,4096,0x0\n");
  struct replay_result r = replay("pool");
  assert_string_equal(r.error, "");
  assert_int_equal(r.allocs, 1);
  assert_int_equal(r.failed + r.refused, 1);
  if (r.refused) { /* a size the pool cannot round: not for want of memory */
    assert_non_null(strstr(r.first_refusal, "record 0, 18446744073709551615 bytes: GPUMEM_ERROR_"));
    assert_null(strstr(r.first_refusal, "GPUMEM_ERROR_OUT_OF_MEMORY"));
  }
  r = replay("device"); /* the simulated device has no such room: out of memory */
  assert_int_equal(r.failed, 1);
  assert_int_equal(r.first_failure_record, 0);
  assert_int_equal(r.refused, 0);
  write_log("1,1.000,allocate,0x0,4096,0x0\n");
  r = replay("pool");
  assert_non_null(strstr(r.error, "record 0: an allocation of 4096 bytes at address 0"));
  assert_false(r.tool_failed);
}

static void count_step(void* context, const struct replay_step* step) {
  uint64_t* steps = context;
  assert_int_equal(step->index, *steps);
  ++*steps;
}

/* A trace still being written has more records by the time it is replayed than when it was
 * counted: the replay stops at those counted, which its observer made room for. */
static void test_replay_reads_no_further_than_the_records_counted(void** state) {
  (void)state;
  write_log(
      "1,1.000,allocate,0x7f0000000000,4096,0x0\n"
      "1,1.001,allocate,0x7f0000100000,8192,0x0\n");
  char error[512] = "";
  const uint64_t records = replay_count_records(path, error, sizeof error);
  assert_int_equal(records, 2);
  FILE* f = fopen(path, "a");
  assert_non_null(f);
  fputs("1,1.002,allocate,0x7f0000200000,65536,0x0\n1,1.003,free,0x7f0000000000,4096,0x0\n", f);
  assert_int_equal(fclose(f), 0);
  uint64_t steps = 0;
  const struct replay_observer observer = {&steps, count_step, 0, NULL};
  struct replay_result r;
  memset(&r, 0, sizeof r);
  r.name = "pool";
  replay_run(path, 80ULL << 30, records, &r, &observer);
  assert_string_equal(r.error, "");
  assert_int_equal(steps, 2);
  assert_int_equal(r.allocs, 2);
  assert_int_equal(r.frees, 0);
  assert_int_equal(r.peak_live, 4096 + 8192);
}

static void test_replay_reports_its_own_bookkeeping_failing(void** state) {
  (void)state;
  write_log("1,1.000,allocate,0x7f0000000000,4096,0x0\n1,1.001,free,0x7f0000000000,4096,0x0\n");
  calloc_fails = 1;
  const struct replay_result r = replay("pool");
  assert_true(r.tool_failed);
  assert_non_null(strstr(r.error, "out of host memory for the replay's own table of live allocations"));
  assert_non_null(strstr(r.error, "a failure of the tool, not of the configuration"));
  assert_int_equal(r.failed, 0); /* the configuration did not run out of memory */
  char* argv[] = {path, "--config", "pool", "--config", "device"};
  assert_int_equal(replay_main(5, argv), 1);
  calloc_fails = 0;
  assert_int_equal(replay_main(5, argv), 0);
}

/* A configuration is read before anything is replayed, and refused in the terms its user wrote. */
static void test_replay_reads_configurations(void** state) {
  (void)state;
  struct replay_config c;
  char why[512];
  assert_int_equal(replay_config_parse("pool:limit=10GB", &c, why, sizeof why), 0);
  assert_true(c.pool);
  assert_int_equal(c.limit, 10000000000ULL);
  assert_int_equal(c.unit, 0);
  assert_int_equal(replay_config_parse("pool:vm", &c, why, sizeof why), 0);
  assert_int_equal(c.unit, 32ULL << 20);
  assert_int_equal(replay_config_parse("pool:unit=2mib,vm", &c, why, sizeof why), 0);
  assert_int_equal(c.unit, 2ULL << 20);
  assert_int_equal(replay_config_parse("device", &c, why, sizeof why), 0);
  assert_false(c.pool);
  static const struct {
    const char* name;
    const char* why;
  } refused[] = {
      {"frobnicate", "unknown configuration; give device, pool, or pool: with options vm, unit=SIZE and limit=SIZE"},
      {"pools", "unknown configuration"},
      {"pool:vm,colour=red", "unknown option \"colour=red\" of pool; give device, pool"},
      {"pool:vm,unit=3MiB", "unit=3MiB is 3145728 bytes, not a power of two of at least 512 bytes"},
      {"pool:vm,unit=256", "unit=256 is 256 bytes, not a power of two"},
      {"pool:vm,unit=0", "unit=0 is 0 bytes"},
      {"pool:limit=8XB", "limit=8XB: give bytes (1073741824), or a number with a unit"},
      {"pool:limit=16777216TiB", "limit=16777216TiB: more than 2^64 - 1 bytes"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    why[0] = 0;
    assert_int_equal(replay_config_parse(refused[i].name, &c, why, sizeof why), -1);
    if (!strstr(why, refused[i].why)) fail_msg("%s: \"%s\", not \"%s\"", refused[i].name, why, refused[i].why);
    if (strstr(why, "->") || strstr(why, "map_unit"))
      fail_msg("%s: \"%s\" names the library's fields", refused[i].name, why);
  }
  /* Refused before the trace is read: a missing trace would exit 1. */
  char* argv[] = {"/nonexistent-dir/none.trace", "--config", "pool", "--config", "pool:vm,unit=3MiB"};
  assert_int_equal(replay_main(5, argv), 2);
}

/* Results printed, a replay in which allocations failed exits 1. */
static void test_replay_exits_1_when_allocations_failed(void** state) {
  (void)state;
  write_log(
      "1,1.000,allocate,0x7f0000000000,1048576,0x0\n"
      "1,1.001,allocate,0x7f0000100000,1048576,0x0\n");
  char* limited[] = {path, "--config", "device", "--config=pool:limit=1MiB"};
  assert_int_equal(replay_main(4, limited), 1);
  char* roomy[] = {path, "--config", "device", "--device-memory=2MiB", "--format=csv"};
  assert_int_equal(replay_main(5, roomy), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_replay_skips_rows_of_0_bytes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replay_tells_refusals_from_out_of_memory, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replay_reads_no_further_than_the_records_counted, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replay_reports_its_own_bookkeeping_failing, setup, teardown),
      cmocka_unit_test(test_replay_reads_configurations),
      cmocka_unit_test_setup_teardown(test_replay_exits_1_when_allocations_failed, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
