/* The tool's command-line conventions (tools/cli.c): sizes as the library reads them in
 * GPUMEM_GPU_MEMORY_LIMIT, and option values given as "--name value" or "--name=value". */
#include "cli.h"
#include "test_util.h"

static void test_cli_parses_sizes(void** state) {
  (void)state;
  static const struct {
    const char* text;
    uint64_t bytes;
  } sizes[] = {
      {"1073741824", 1ULL << 30},
      {"1.5GiB", 3ULL << 29},
      {"10GB", 10000000000ULL},
      {"10gb", 10000000000ULL},
      {"10Gb", 10000000000ULL},
      {"512 MB", 512000000ULL},
      {"2mib", 2ULL << 20},
      {"2MIB", 2ULL << 20},
      {"1.5KB", 1500},
      {"3kb", 3000},
      {"7b", 7},
      {"1TB", 1000000000000ULL},
      {"1.25TB", 1250000000000ULL},
      {"8388608TiB", 1ULL << 63},
      {"18446744073709551615", UINT64_MAX},
      {"18446744073709551615B", UINT64_MAX},
      {"16777215TiB", UINT64_MAX - (1ULL << 40) + 1},
      {"18446744TB", 18446744000000000000ULL},
  };
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    uint64_t v = 0;
    if (cli_parse_size(sizes[i].text, &v) != 0) fail_msg("\"%s\" was refused", sizes[i].text);
    if (v != sizes[i].bytes) fail_msg("\"%s\" read as %llu bytes", sizes[i].text, (unsigned long long)v);
  }
}

static void test_cli_refuses_what_is_no_size(void** state) {
  (void)state;
  static const char* const not_sizes[] = {"nan", "inf", "-1", "-0",  "+1",    " 1",     "1e3",    "0x10", ".5",
                                          "1.",  "GiB", "",   "1XB", "1KIBB", "NaNGiB", "infTiB", "1 G",  "1Gi"};
  for (size_t i = 0; i < sizeof not_sizes / sizeof not_sizes[0]; i++) {
    uint64_t v = 7;
    if (cli_parse_size(not_sizes[i], &v) != -1) fail_msg("\"%s\" was taken as a size", not_sizes[i]);
    assert_int_equal(v, 7); /* untouched */
  }
  static const char* const too_large[] = {"18446744073709551616", "16777216TiB", "99999999999999999999999GiB",
                                          "16777216.5TiB", "18446745TB"};
  for (size_t i = 0; i < sizeof too_large / sizeof too_large[0]; i++) {
    uint64_t v = 0;
    if (cli_parse_size(too_large[i], &v) != -2) fail_msg("\"%s\" was not refused as too large", too_large[i]);
  }
  /* The command's option: exit status 2 for every refusal, 0 bytes included. */
  uint64_t v = 0;
  assert_int_equal(cli_size_option("replay", "--device-memory", "nan", &v), 2);
  assert_int_equal(cli_size_option("replay", "--device-memory", "16777216TiB", &v), 2);
  assert_int_equal(cli_size_option("replay", "--device-memory", "0", &v), 2);
  assert_int_equal(cli_size_option("replay", "--device-memory", "0.1B", &v), 2);
  assert_int_equal(cli_size_option("replay", "--device-memory", "2GB", &v), 0);
  assert_int_equal(v, 2000000000ULL);
}

static void test_cli_takes_option_values(void** state) {
  (void)state;
  char* argv[] = {"--config", "pool", "--config=pool:vm", "--configs", "-o", "page.html", "-o=x", "--format"};
  const int argc = sizeof argv / sizeof argv[0];
  const char* v = NULL;
  int i = 0;
  assert_int_equal(cli_option(argc, argv, &i, "t", "--config", &v), 1);
  assert_string_equal(v, "pool");
  assert_int_equal(i, 1); /* the last argument it used */
  i = 2;
  assert_int_equal(cli_option(argc, argv, &i, "t", "--config", &v), 1);
  assert_string_equal(v, "pool:vm");
  assert_int_equal(i, 2);
  i = 3;
  assert_int_equal(cli_option(argc, argv, &i, "t", "--config", &v), 0);
  i = 4;
  assert_int_equal(cli_option(argc, argv, &i, "t", "-o", &v), 1);
  assert_string_equal(v, "page.html");
  i = 6; /* "=" only after a long option */
  assert_int_equal(cli_option(argc, argv, &i, "t", "-o", &v), 0);
  i = 7; /* no value after it */
  assert_int_equal(cli_option(argc, argv, &i, "t", "--format", &v), -1);
  assert_int_equal(i, 7);
  assert_true(cli_is_help("--help"));
  assert_true(cli_is_help("-h"));
  assert_false(cli_is_help("--helpme"));
  assert_int_equal(cli_unexpected("t", "--colour"), 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cli_parses_sizes),
      cmocka_unit_test(test_cli_refuses_what_is_no_size),
      cmocka_unit_test(test_cli_takes_option_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
