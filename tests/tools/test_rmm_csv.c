/* RMM's CSV log as gpumem replay reads it (tools/rmm_csv.c): rows as records, and every row RMM
 * would not have written refused with its line, never guessed at. */
#define _POSIX_C_SOURCE 200809L

#include "rmm_csv.h"
#include "test_util.h"

#define HEADER RMM_CSV_HEADER "\n"

static FILE* file;
static struct rmm_csv csv;
static char error[256];

static int teardown(void** state) {
  (void)state;
  if (file) fclose(file);
  file = NULL;
  return 0;
}

/* Opens text as a log; its header must be taken. */
static void open_log(const char* text) {
  teardown(NULL);
  file = fmemopen((void*)text, strlen(text), "r");
  assert_non_null(file);
  assert_int_equal(rmm_csv_open(&csv, file, "run.csv"), 1);
}

static int next(gpumem_trace_record_t* rec) {
  memset(rec, 0, sizeof *rec);
  rec->struct_size = sizeof *rec;
  error[0] = '\0';
  return rmm_csv_next(&csv, rec, error, sizeof error);
}

/* The row after the header is refused, with this message. */
static void assert_refused(const char* rows, const char* message) {
  char text[1024];
  snprintf(text, sizeof text, HEADER "%s", rows);
  open_log(text);
  gpumem_trace_record_t rec;
  int got;
  while ((got = next(&rec)) == 1) continue;
  assert_int_equal(got, -1);
  if (!strstr(error, message)) fail_msg("\"%s\" does not contain \"%s\"", error, message);
}

static void test_rmm_csv_reads_rows_as_records(void** state) {
  (void)state;
  open_log(HEADER
           "140573312345856,1634567890.100000,allocate,0x7f8a40000000,1048576,0x0\r\n"
           "140573312345856,1634567890.100500,free,0x7f8a40000000,1048576,0x7f8a38001020\n"
           "7,1634567890.200000,allocate failure,0x0,99999999999,0x0");
  gpumem_trace_record_t rec;
  assert_int_equal(next(&rec), 1);
  assert_int_equal(rec.struct_size, sizeof rec);
  assert_int_equal(rec.event, GPUMEM_TRACE_ALLOC);
  assert_int_equal(rec.address, 0x7f8a40000000ULL);
  assert_int_equal(rec.size, 1048576);
  assert_int_equal(rec.mem_size, 1048576);
  assert_int_equal(rec.time_ns, 0);
  assert_int_equal(next(&rec), 1);
  assert_int_equal(rec.event, GPUMEM_TRACE_FREE);
  assert_int_equal(rec.stream, 0x7f8a38001020ULL);
  assert_true(rec.time_ns > 499000 && rec.time_ns < 501000); /* 500 us, as doubles give it */
  assert_int_equal(next(&rec), 1);
  assert_int_equal(rec.event, GPUMEM_TRACE_ALLOC_FAILED);
  assert_int_equal(rec.size, 99999999999ULL);
  assert_int_equal(rec.status, GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_int_equal(next(&rec), 0);
  assert_int_equal(next(&rec), 0);
}

static void test_rmm_csv_reads_older_times(void** state) {
  (void)state;
  open_log(HEADER "1,10:59:59:999000,allocate,7f0000000000,4096,0\n1,11:00:00:000500,free,7f0000000000,4096,0\n");
  gpumem_trace_record_t rec;
  assert_int_equal(next(&rec), 1);
  assert_int_equal(next(&rec), 1);
  assert_true(rec.time_ns > 1499000 && rec.time_ns < 1501000);
}

static void test_rmm_csv_refuses_bad_sizes_with_their_line(void** state) {
  (void)state;
  const char* ok = "1,1634567890.1,allocate,0x7f0000000000,4096,0x0\n";
  char rows[512];
  snprintf(rows, sizeof rows, "%s1,1634567890.2,allocate,0x7f0000100000,-5,0x0\n", ok);
  assert_refused(rows, "run.csv, line 3: size \"-5\" is not a number of decimal digits");
  assert_refused("1,1634567890.2,allocate,0x7f0000100000,4 KiB,0x0\n",
                 "run.csv, line 2: size \"4 KiB\" is not a number of decimal digits");
  assert_refused("1,1634567890.2,allocate,0x7f0000100000,,0x0\n", "line 2: size \"\" is not");
  assert_refused("1,1634567890.2,allocate,0x7f0000100000,+5,0x0\n", "line 2: size \"+5\" is not");
  assert_refused("1,1634567890.2,allocate,0x7f0000100000,18446744073709551616,0x0\n",
                 "run.csv, line 2: size \"18446744073709551616\" is more than 2^64 - 1");
}

static void test_rmm_csv_refuses_other_bad_fields(void** state) {
  (void)state;
  assert_refused("1,1634567890.2,allocate,0xnothex,4096,0x0\n", "line 2: pointer \"0xnothex\" is not a hexadecimal");
  assert_refused("1,1634567890.2,allocate,0x1ffffffffffffffff,4096,0x0\n", "pointer \"0x1ffffffffffffffff\" is more");
  assert_refused("-1,1634567890.2,allocate,0x10,4096,0x0\n", "line 2: thread \"-1\" is not");
  assert_refused("1,nan,allocate,0x10,4096,0x0\n", "line 2: time \"nan\" is neither seconds since 1970 nor");
  assert_refused("1,1e9,allocate,0x10,4096,0x0\n", "line 2: time \"1e9\" is neither");
  assert_refused("1,10:00:00,allocate,0x10,4096,0x0\n", "line 2: time \"10:00:00\" is neither");
  assert_refused("1,1634567890.2,reallocate,0x10,4096,0x0\n", "line 2: action \"reallocate\" is none of");
  assert_refused("1,1634567890.2,allocate,0x10,4096\n", "line 2: not a row of " RMM_CSV_HEADER " (5 fields)");
  assert_refused("1,1634567890.2,allocate,0x10,4096,0x0,extra\n", "(more than 6 fields)");
  assert_refused("\n", "line 2: not a row of " RMM_CSV_HEADER " (1 field)");
  char row[700];
  memset(row, '1', sizeof row - 2);
  row[sizeof row - 2] = '\n';
  row[sizeof row - 1] = '\0';
  assert_refused(row, "line 2: longer than 511 bytes");
}

static void test_rmm_csv_refuses_a_nul_byte(void** state) {
  (void)state;
  static const char text[] = HEADER "1,1634567890.2,allocate,0x10\0,4096,0x0\n";
  teardown(NULL);
  file = fmemopen((void*)text, sizeof text - 1, "r");
  assert_int_equal(rmm_csv_open(&csv, file, "run.csv"), 1);
  gpumem_trace_record_t rec;
  assert_int_equal(next(&rec), -1);
  assert_non_null(strstr(error, "run.csv, line 2: a NUL byte"));
}

static void test_rmm_csv_knows_its_header(void** state) {
  (void)state;
  static const char* const not_logs[] = {"", "Thread,Time,Action,Pointer,Size\n",
                                         "Thread,Time,Action,Pointer,Size,Stream,More\n", "GPUMEMTR\1\0\0\0"};
  for (size_t i = 0; i < sizeof not_logs / sizeof not_logs[0]; i++) {
    teardown(NULL);
    file = fmemopen((void*)not_logs[i], strlen(not_logs[i]) + 1, "r");
    assert_int_equal(rmm_csv_open(&csv, file, "x"), 0);
  }
  open_log(RMM_CSV_HEADER "\r\n");
  open_log(RMM_CSV_HEADER);
  gpumem_trace_record_t rec;
  assert_int_equal(next(&rec), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_rmm_csv_reads_rows_as_records, teardown),
      cmocka_unit_test_teardown(test_rmm_csv_reads_older_times, teardown),
      cmocka_unit_test_teardown(test_rmm_csv_refuses_bad_sizes_with_their_line, teardown),
      cmocka_unit_test_teardown(test_rmm_csv_refuses_other_bad_fields, teardown),
      cmocka_unit_test_teardown(test_rmm_csv_refuses_a_nul_byte, teardown),
      cmocka_unit_test_teardown(test_rmm_csv_knows_its_header, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
