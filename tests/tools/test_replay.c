/* gpumem replay's own rules (tools/replay.c): sizes on the command line, what a replay counts for
 * rows of 0 bytes and for sizes a configuration does not take, and that running out of memory for
 * its own bookkeeping is reported as the tool's failure. Linked with -Wl,--wrap=calloc, so that a
 * test can make the replay's tables fail to grow. */
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
  const char* dir = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/gpumem_replay_%d.csv", dir && *dir ? dir : "/tmp", (int)getpid());
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
  replay_run(path, 80ULL << 30, 0, &r, NULL);
  return r;
}

static void test_replay_parses_sizes(void** state) {
  (void)state;
  uint64_t v = 0;
  assert_int_equal(replay_parse_size("1073741824", &v), 0);
  assert_int_equal(v, 1ULL << 30);
  assert_int_equal(replay_parse_size("1.5GiB", &v), 0);
  assert_int_equal(v, 3ULL << 29);
  assert_int_equal(replay_parse_size("8388608TiB", &v), 0);
  assert_int_equal(v, 1ULL << 63);
  assert_int_equal(replay_parse_size("18446744073709551615", &v), 0);
  assert_int_equal(v, UINT64_MAX);
  assert_int_equal(replay_parse_size("16777215TiB", &v), 0);
  assert_int_equal(v, UINT64_MAX - (1ULL << 40) + 1);
  static const char* const not_sizes[] = {"nan", "inf", "-1",    "-0",  "+1", " 1",  "1e3",    "0x10",
                                          ".5",  "1.",  "1 GiB", "GiB", "",   "1GB", "NaNGiB", "infTiB"};
  for (size_t i = 0; i < sizeof not_sizes / sizeof not_sizes[0]; i++) {
    v = 7;
    if (replay_parse_size(not_sizes[i], &v) != -1) fail_msg("\"%s\" was taken as a size", not_sizes[i]);
    assert_int_equal(v, 7); /* untouched */
  }
  static const char* const too_large[] = {"18446744073709551616", "16777216TiB", "99999999999999999999999GiB",
                                          "16777216.5TiB"};
  for (size_t i = 0; i < sizeof too_large / sizeof too_large[0]; i++)
    if (replay_parse_size(too_large[i], &v) != -2) fail_msg("\"%s\" was not refused as too large", too_large[i]);
  /* The command's option: exit status 2 for every refusal, 0 bytes included. */
  assert_int_equal(replay_size_option("replay", "--device-memory", "nan", &v), 2);
  assert_int_equal(replay_size_option("replay", "--device-memory", "16777216TiB", &v), 2);
  assert_int_equal(replay_size_option("replay", "--device-memory", "0", &v), 2);
  assert_int_equal(replay_size_option("replay", "--device-memory", "2GiB", &v), 0);
  assert_int_equal(v, 2ULL << 30);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replay_parses_sizes),
      cmocka_unit_test_setup_teardown(test_replay_skips_rows_of_0_bytes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replay_tells_refusals_from_out_of_memory, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replay_reports_its_own_bookkeeping_failing, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
