// C++ callers: the headers give C linkage (extern "C"), so these calls link against the C symbols
// the library exports; with C++ linkage they would look for mangled names and fail to link. Built
// once as C++11 and once as C++20.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

// cmocka 1.1.5's header has no extern "C" guard of its own (gpumem's headers must, and do).
extern "C" {
#include <cmocka.h>
}

#include "test_util.h"

#include <type_traits>

// The status type and codes cross the ABI as int32_t, whatever the language's enum rules.
static_assert(std::is_same<gpumem_status_t, int32_t>::value, "gpumem_status_t must be int32_t");
static_assert(sizeof(gpumem_status_t) == 4, "gpumem_status_t must be 4 bytes");
static_assert(GPUMEM_VERSION_NUMBER == GPUMEM_VERSION_MAJOR * 10000 + GPUMEM_VERSION_MINOR * 100 + GPUMEM_VERSION_PATCH,
              "GPUMEM_VERSION_NUMBER must be a constant expression in C++ too");

// Function types spelled with C language linkage, as a C++ binding declares them.
extern "C" {
typedef const char* status_name_fn(gpumem_status_t);
typedef uint32_t version_number_fn(void);
}

static void test_cxx_linkage_status_names(void** state) {
  (void)state;
  assert_string_equal(gpumem_status_name(GPUMEM_SUCCESS), "GPUMEM_SUCCESS");
  assert_string_equal(gpumem_status_name(GPUMEM_ERROR_OUT_OF_MEMORY), "GPUMEM_ERROR_OUT_OF_MEMORY");
  assert_string_equal(gpumem_status_name(GPUMEM_ERROR_INTERNAL), "GPUMEM_ERROR_INTERNAL");
  assert_string_equal(gpumem_status_name(-12345), "GPUMEM_UNKNOWN_STATUS");
  assert_string_equal(gpumem_status_string(GPUMEM_ERROR_OUT_OF_MEMORY), "out of memory");
}

static void test_cxx_linkage_version_matches_headers(void** state) {
  (void)state;
  assert_int_equal(gpumem_version_number(), GPUMEM_VERSION_NUMBER);
  assert_string_equal(gpumem_version_string(), GPUMEM_VERSION_STRING);
}

static void test_cxx_linkage_function_pointers(void** state) {
  (void)state;
  status_name_fn* status_name = &gpumem_status_name;
  version_number_fn* version_number = &gpumem_version_number;
  assert_string_equal(status_name(GPUMEM_ERROR_NO_DEVICE), "GPUMEM_ERROR_NO_DEVICE");
  assert_int_equal(version_number(), GPUMEM_VERSION_NUMBER);
}

static void test_cxx_linkage_error_detail(void** state) {
  (void)state;
  assert_status(gpumem_device_get_count(nullptr), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_count is NULL");
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

static void test_cxx_linkage_macros_compile_as_cxx(void** state) {
  (void)state;
  // Brace initializers and casts in the headers' macros must be valid C++, not C-only syntax.
  gpumem_array_desc_t desc = GPUMEM_ARRAY_DESC_INIT;
  assert_int_equal(desc.struct_size, sizeof(gpumem_array_desc_t));
  assert_int_equal(desc.format, GPUMEM_FORMAT_F32);
  assert_int_equal(desc.channels, 1);
  const gpumem_stream_t legacy = GPUMEM_STREAM_LEGACY;
  const gpumem_stream_t per_thread = GPUMEM_STREAM_PER_THREAD;
  assert_true(legacy != per_thread);
  assert_non_null(legacy);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cxx_linkage_status_names),
      cmocka_unit_test(test_cxx_linkage_version_matches_headers),
      cmocka_unit_test(test_cxx_linkage_function_pointers),
      cmocka_unit_test(test_cxx_linkage_error_detail),
      cmocka_unit_test(test_cxx_linkage_macros_compile_as_cxx),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
