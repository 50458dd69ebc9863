/* Status names and messages, and the calling thread's record of its last failure. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>

#include "test_util.h"

#define CUDA_ERROR_OUT_OF_MEMORY_VALUE 2 /* CUresult CUDA_ERROR_OUT_OF_MEMORY */

struct status_row {
  gpumem_status_t status;
  int32_t pinned_value; /* values are part of the ABI: never renumbered */
  const char* name;
};

/* The enumerator is spelled out by hand rather than stringified, so a wrong name in the library
 * cannot be mirrored here. */
static const struct status_row kStatuses[] = {
    {GPUMEM_SUCCESS, 0, "GPUMEM_SUCCESS"},
    {GPUMEM_ERROR_INVALID_ARGUMENT, -1, "GPUMEM_ERROR_INVALID_ARGUMENT"},
    {GPUMEM_ERROR_OUT_OF_MEMORY, -2, "GPUMEM_ERROR_OUT_OF_MEMORY"},
    {GPUMEM_ERROR_NO_DRIVER, -3, "GPUMEM_ERROR_NO_DRIVER"},
    {GPUMEM_ERROR_NO_DEVICE, -4, "GPUMEM_ERROR_NO_DEVICE"},
    {GPUMEM_ERROR_INVALID_DEVICE, -5, "GPUMEM_ERROR_INVALID_DEVICE"},
    {GPUMEM_ERROR_NOT_SUPPORTED, -6, "GPUMEM_ERROR_NOT_SUPPORTED"},
    {GPUMEM_ERROR_INVALID_POINTER, -7, "GPUMEM_ERROR_INVALID_POINTER"},
    {GPUMEM_ERROR_INVALID_HANDLE, -8, "GPUMEM_ERROR_INVALID_HANDLE"},
    {GPUMEM_ERROR_ALREADY_REGISTERED, -9, "GPUMEM_ERROR_ALREADY_REGISTERED"},
    {GPUMEM_ERROR_STREAM_CAPTURE, -10, "GPUMEM_ERROR_STREAM_CAPTURE"},
    {GPUMEM_ERROR_DRIVER, -11, "GPUMEM_ERROR_DRIVER"},
    {GPUMEM_ERROR_INTERNAL, -12, "GPUMEM_ERROR_INTERNAL"},
    {GPUMEM_ERROR_NOT_OWNED, -13, "GPUMEM_ERROR_NOT_OWNED"},
    {GPUMEM_ERROR_BUSY, -14, "GPUMEM_ERROR_BUSY"},
    {GPUMEM_ERROR_IO, -15, "GPUMEM_ERROR_IO"},
};
#define STATUS_COUNT (sizeof kStatuses / sizeof kStatuses[0])

static void test_status_values_are_pinned(void** state) {
  (void)state;
  for (size_t i = 0; i < STATUS_COUNT; ++i) assert_int_equal(kStatuses[i].status, kStatuses[i].pinned_value);
}

static void test_status_names_match_enumerators(void** state) {
  (void)state;
  for (size_t i = 0; i < STATUS_COUNT; ++i) {
    const char* name = gpumem_status_name(kStatuses[i].status);
    assert_non_null(name);
    assert_string_equal(name, kStatuses[i].name);
  }
}

static void test_status_messages_nonempty_and_distinct(void** state) {
  (void)state;
  for (size_t i = 0; i < STATUS_COUNT; ++i) {
    const char* message = gpumem_status_string(kStatuses[i].status);
    assert_non_null(message);
    assert_true(message[0] != '\0');
    assert_string_not_equal(message, "unknown status");
    for (size_t j = 0; j < i; ++j) assert_string_not_equal(message, gpumem_status_string(kStatuses[j].status));
  }
}

static void test_status_unknown_values(void** state) {
  (void)state;
  const gpumem_status_t unknown[] = {1, -16, 100, -100, INT32_MIN, INT32_MAX};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; ++i) {
    assert_string_equal(gpumem_status_name(unknown[i]), "GPUMEM_UNKNOWN_STATUS");
    assert_string_equal(gpumem_status_string(unknown[i]), "unknown status");
  }
}

struct fresh_thread_view {
  char detail[256];
  int32_t cuda_result;
  bool detail_null;
};

static void* read_fresh_thread(void* arg) {
  struct fresh_thread_view* view = arg;
  const char* detail = gpumem_last_error_detail();
  view->detail_null = detail == NULL;
  if (detail) snprintf(view->detail, sizeof view->detail, "%s", detail);
  view->cuda_result = gpumem_last_cuda_result();
  return NULL;
}

static void test_status_detail_empty_on_fresh_thread(void** state) {
  (void)state;
  /* A failure on this thread first, so an empty detail on the new one shows it is not shared. */
  void* p = (void*)0x1;
  assert_status(gpumem_device_alloc(0, 0, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_true(gpumem_last_error_detail()[0] != '\0');

  struct fresh_thread_view view;
  memset(&view, 0x5a, sizeof view);
  view.detail[sizeof view.detail - 1] = '\0';
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, read_fresh_thread, &view), 0);
  assert_int_equal(pthread_join(thread, NULL), 0);
  assert_false(view.detail_null);
  assert_string_equal(view.detail, "");
  assert_int_equal(view.cuda_result, 0);
}

static void test_status_detail_after_failure(void** state) {
  (void)state;
  void* p = (void*)0x1;
  assert_status(gpumem_device_alloc(0, 0, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(p);
  assert_detail_contains("size is 0");
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

static void test_status_next_failure_replaces_detail(void** state) {
  (void)state;
  void* p = (void*)0x1;
  assert_status(gpumem_device_alloc(0, 0, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("size is 0");
  assert_status(gpumem_device_alloc(0, 16, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_ptr is NULL");
  assert_null(strstr(gpumem_last_error_detail(), "size is 0"));
}

static void test_status_success_keeps_detail(void** state) {
  (void)state;
  void* p = (void*)0x1;
  assert_status(gpumem_device_alloc(0, 0, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  char before[512];
  snprintf(before, sizeof before, "%s", gpumem_last_error_detail());
  const int32_t cuda_before = gpumem_last_cuda_result();

  gpumem_array_desc_t desc;
  assert_ok(gpumem_array_desc_init(&desc, sizeof desc));
  assert_ok(gpumem_device_free(NULL));
  assert_ok(gpumem_host_free(NULL));
  assert_ok(gpumem_array_destroy(NULL));
  char dst[4] = {0}, src[4] = {1, 2, 3, 4};
  assert_ok(gpumem_copy(dst, src, 0)); /* a zero-byte copy succeeds without touching the driver */

  assert_string_equal(gpumem_last_error_detail(), before);
  assert_int_equal(gpumem_last_cuda_result(), cuda_before);
}

static void test_status_detail_stays_valid_until_next_failure(void** state) {
  (void)state;
  void* p = (void*)0x1;
  assert_status(gpumem_device_alloc(0, 0, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  const char* detail = gpumem_last_error_detail();
  gpumem_array_desc_t desc;
  assert_ok(gpumem_array_desc_init(&desc, sizeof desc));
  assert_string_equal(detail, gpumem_last_error_detail());
  assert_non_null(strstr(detail, "size is 0"));
}

static void test_status_cuda_result_zero_for_refusal(void** state) {
  (void)state;
  gpumem_array_t* array = (gpumem_array_t*)0x1;
  assert_status(gpumem_array_create(NULL, &array), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(array);
  assert_detail_contains("desc is NULL");
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

/* GPU: a failure the driver reported keeps its CUresult; a later refusal by gpumem resets it to 0. */
static void test_status_cuda_result_follows_last_failure(void** state) {
  (void)state;
  require_gpu();
  void* p = (void*)0x1;
  /* 1 PiB: more than any device has, so the driver itself refuses it. */
  assert_status(gpumem_device_alloc(0, (size_t)1 << 50, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  assert_detail_contains("out of memory allocating 1,125,899,906,842,624 bytes on device 0");
  assert_int_equal(gpumem_last_cuda_result(), CUDA_ERROR_OUT_OF_MEMORY_VALUE);

  assert_ok(gpumem_device_free(NULL));
  assert_int_equal(gpumem_last_cuda_result(), CUDA_ERROR_OUT_OF_MEMORY_VALUE);

  p = (void*)0x1;
  assert_status(gpumem_device_alloc(0, 0, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_status_values_are_pinned),
      cmocka_unit_test(test_status_names_match_enumerators),
      cmocka_unit_test(test_status_messages_nonempty_and_distinct),
      cmocka_unit_test(test_status_unknown_values),
      cmocka_unit_test(test_status_detail_empty_on_fresh_thread),
      cmocka_unit_test(test_status_detail_after_failure),
      cmocka_unit_test(test_status_next_failure_replaces_detail),
      cmocka_unit_test(test_status_success_keeps_detail),
      cmocka_unit_test(test_status_detail_stays_valid_until_next_failure),
      cmocka_unit_test(test_status_cuda_result_zero_for_refusal),
      cmocka_unit_test(test_status_cuda_result_follows_last_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
