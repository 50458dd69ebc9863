/* The version macros of the headers and the version the loaded library reports. */
#include "test_util.h"

/* Callers compare versions in #if, so the macros must be integer constant expressions there. */
#if !defined(GPUMEM_VERSION_MAJOR) || !defined(GPUMEM_VERSION_MINOR) || !defined(GPUMEM_VERSION_PATCH)
#error "gpumem_version.h does not define the version components"
#endif
#if GPUMEM_VERSION_NUMBER != GPUMEM_VERSION_MAJOR * 10000 + GPUMEM_VERSION_MINOR * 100 + GPUMEM_VERSION_PATCH
#error "GPUMEM_VERSION_NUMBER is not major * 10000 + minor * 100 + patch"
#endif

static void test_version_components_fit_the_number(void** state) {
  (void)state;
  /* Beyond 99 a minor or patch would spill into the next field and two versions would collide. */
  assert_in_range(GPUMEM_VERSION_MINOR, 0, 99);
  assert_in_range(GPUMEM_VERSION_PATCH, 0, 99);
  assert_true(GPUMEM_VERSION_MAJOR >= 0);
  assert_true(GPUMEM_VERSION_NUMBER > 0);
}

static void test_version_number_matches_macros(void** state) {
  (void)state;
  const uint32_t number = gpumem_version_number();
  assert_int_equal(number, GPUMEM_VERSION_NUMBER);
  assert_int_equal(number / 10000, GPUMEM_VERSION_MAJOR);
  assert_int_equal(number / 100 % 100, GPUMEM_VERSION_MINOR);
  assert_int_equal(number % 100, GPUMEM_VERSION_PATCH);
}

static void test_version_string_matches_macros(void** state) {
  (void)state;
  char expected[64];
  snprintf(expected, sizeof expected, "%d.%d.%d", GPUMEM_VERSION_MAJOR, GPUMEM_VERSION_MINOR, GPUMEM_VERSION_PATCH);
  assert_string_equal(GPUMEM_VERSION_STRING, expected);
  const char* loaded = gpumem_version_string();
  assert_non_null(loaded);
  assert_string_equal(loaded, expected);
}

static void test_version_string_matches_number(void** state) {
  (void)state;
  const uint32_t number = gpumem_version_number();
  char decoded[64];
  snprintf(decoded, sizeof decoded, "%u.%u.%u", (unsigned)(number / 10000), (unsigned)(number / 100 % 100),
           (unsigned)(number % 100));
  assert_string_equal(gpumem_version_string(), decoded);
}

static void test_version_string_is_static(void** state) {
  (void)state;
  /* Documented as a static string: bindings keep the pointer without copying it. */
  const char* first = gpumem_version_string();
  const char* second = gpumem_version_string();
  assert_ptr_equal(first, second);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_version_components_fit_the_number), cmocka_unit_test(test_version_number_matches_macros),
      cmocka_unit_test(test_version_string_matches_macros),     cmocka_unit_test(test_version_string_matches_number),
      cmocka_unit_test(test_version_string_is_static),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
