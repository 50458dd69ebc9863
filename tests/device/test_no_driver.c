/* Every GPU call without a driver: GPUMEM_CUDA_DRIVER names a file that does not exist, so this
 * runs the same on a machine with a GPU. Host-only calls keep working. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>

#include "test_util.h"

#define MISSING_DRIVER "/nonexistent/libcuda.so.1"

/* The status, the driver path in the detail, and no CUDA result: the driver never answered. */
static void assert_no_driver(gpumem_status_t got) {
  assert_status(got, GPUMEM_ERROR_NO_DRIVER);
  assert_detail_contains(MISSING_DRIVER);
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

/* A failure gpumem refuses on its own first, so the next call must write a fresh detail. */
static void reset_detail(void) {
  assert_status(gpumem_device_alloc(0, 0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(strstr(gpumem_last_error_detail(), MISSING_DRIVER));
}

static void test_no_driver_driver_get_version(void** state) {
  (void)state;
  reset_detail();
  int32_t version = 12345;
  assert_no_driver(gpumem_driver_get_version(&version));
  assert_int_equal(version, 0);
  assert_detail_contains("cannot load the CUDA driver");
}

static void test_no_driver_device_get_count(void** state) {
  (void)state;
  reset_detail();
  int32_t count = 7;
  assert_no_driver(gpumem_device_get_count(&count));
  assert_int_equal(count, 0);
  assert_false(gpu_available());
  assert_int_equal(gpu_count(), 0);
}

static void test_no_driver_device_get_info(void** state) {
  (void)state;
  reset_detail();
  gpumem_device_info_t info;
  memset(&info, 0xa5, sizeof info);
  info.struct_size = sizeof info;
  assert_no_driver(gpumem_device_get_info(0, &info));
  gpumem_device_info_t zero;
  memset(&zero, 0, sizeof zero);
  zero.struct_size = sizeof zero;
  assert_memory_equal(&info, &zero, sizeof info);
}

static void test_no_driver_device_query_memory(void** state) {
  (void)state;
  reset_detail();
  size_t free_bytes = 1, total = 1;
  assert_no_driver(gpumem_device_query_memory(0, &free_bytes, &total));
  assert_int_equal(free_bytes, 0);
  assert_int_equal(total, 0);
  reset_detail();
  total = 1;
  assert_no_driver(gpumem_device_query_memory(0, NULL, &total));
  assert_int_equal(total, 0);
}

static void test_no_driver_device_alloc(void** state) {
  (void)state;
  reset_detail();
  void* p = (void*)0x1;
  assert_no_driver(gpumem_device_alloc(0, 1, &p));
  assert_null(p);
  reset_detail();
  p = (void*)0x1;
  assert_no_driver(gpumem_device_alloc_async(0, 1, NULL, &p));
  assert_null(p);
}

static void test_no_driver_host_alloc(void** state) {
  (void)state;
  reset_detail();
  void* p = (void*)0x1;
  assert_no_driver(gpumem_host_alloc(64, 0, &p));
  assert_null(p);
  reset_detail();
  p = (void*)0x1;
  assert_no_driver(gpumem_host_alloc(64, GPUMEM_HOST_ALLOC_PORTABLE | GPUMEM_HOST_ALLOC_DEVICEMAP, &p));
  assert_null(p);
}

static void test_no_driver_host_register(void** state) {
  (void)state;
  char buf[64];
  reset_detail();
  assert_no_driver(gpumem_host_register(buf, sizeof buf, 0));
  reset_detail();
  void* d = (void*)0x1;
  assert_no_driver(gpumem_host_get_device_pointer(buf, &d));
  assert_null(d);
}

static void test_no_driver_managed_alloc(void** state) {
  (void)state;
  reset_detail();
  void* p = (void*)0x1;
  assert_no_driver(gpumem_managed_alloc(0, 64, 0, &p));
  assert_null(p);
}

static void test_no_driver_pointer_get_info(void** state) {
  (void)state;
  char buf[16];
  reset_detail();
  gpumem_pointer_info_t info;
  memset(&info, 0xa5, sizeof info);
  info.struct_size = sizeof info;
  assert_no_driver(gpumem_pointer_get_info(buf, &info));
  gpumem_pointer_info_t zero;
  memset(&zero, 0, sizeof zero);
  zero.struct_size = sizeof zero;
  assert_memory_equal(&info, &zero, sizeof info);
}

static void test_no_driver_copy(void** state) {
  (void)state;
  unsigned char src[32], dst[32];
  for (size_t i = 0; i < sizeof src; ++i) src[i] = (unsigned char)i;
  memset(dst, 0xee, sizeof dst);
  reset_detail();
  assert_no_driver(gpumem_copy(dst, src, sizeof dst));
  reset_detail();
  assert_no_driver(gpumem_copy_async(dst, src, sizeof dst, NULL));
  /* Nothing was copied, not even by a host fallback. */
  for (size_t i = 0; i < sizeof dst; ++i) assert_int_equal(dst[i], 0xee);
}

static void test_no_driver_memset(void** state) {
  (void)state;
  uint32_t buf[8];
  memset(buf, 0xee, sizeof buf);
  reset_detail();
  assert_no_driver(gpumem_memset(buf, 0x11, 1, sizeof buf));
  reset_detail();
  assert_no_driver(gpumem_memset(buf, 0x2222, 2, sizeof buf / 2));
  reset_detail();
  assert_no_driver(gpumem_memset_async(buf, 0x33333333u, 4, sizeof buf / 4, NULL));
  const unsigned char* bytes = (const unsigned char*)buf;
  for (size_t i = 0; i < sizeof buf; ++i) assert_int_equal(bytes[i], 0xee);
}

static void test_no_driver_array_create(void** state) {
  (void)state;
  gpumem_array_desc_t desc = GPUMEM_ARRAY_DESC_INIT;
  desc.width = 64;
  desc.height = 32;
  gpumem_array_t* array = (gpumem_array_t*)0x1;
  reset_detail();
  assert_no_driver(gpumem_array_create(&desc, &array));
  assert_null(array);
}

static void test_no_driver_frees_of_pointers(void** state) {
  (void)state;
  /* Freeing a real pointer needs the driver to tell what it is; NULL does not (below). */
  char buf[16];
  reset_detail();
  assert_no_driver(gpumem_device_free(buf));
  reset_detail();
  assert_no_driver(gpumem_host_free(buf));
  reset_detail();
  assert_no_driver(gpumem_managed_free(buf));
  reset_detail();
  assert_no_driver(gpumem_host_unregister(buf));
}

static void test_no_driver_host_only_calls_succeed(void** state) {
  (void)state;
  assert_int_equal(gpumem_version_number(), GPUMEM_VERSION_NUMBER);
  assert_string_equal(gpumem_version_string(), GPUMEM_VERSION_STRING);
  assert_string_equal(gpumem_status_name(GPUMEM_ERROR_NO_DRIVER), "GPUMEM_ERROR_NO_DRIVER");
  assert_true(gpumem_status_string(GPUMEM_ERROR_NO_DRIVER)[0] != '\0');

  gpumem_array_desc_t desc;
  memset(&desc, 0xa5, sizeof desc);
  assert_ok(gpumem_array_desc_init(&desc, sizeof desc));
  assert_int_equal(desc.struct_size, sizeof desc);
  assert_int_equal(desc.format, GPUMEM_FORMAT_F32);
  assert_int_equal(desc.channels, 1);

  assert_ok(gpumem_device_free(NULL));
  assert_ok(gpumem_device_free_async(NULL, NULL));
  assert_ok(gpumem_host_free(NULL));
  assert_ok(gpumem_managed_free(NULL));
  assert_ok(gpumem_array_destroy(NULL));

  /* Zero-length work is done without asking the driver anything. */
  unsigned char src[4] = {1, 2, 3, 4}, dst[4] = {9, 9, 9, 9};
  assert_ok(gpumem_copy(dst, src, 0));
  assert_ok(gpumem_memset(dst, 0, 1, 0));
  assert_int_equal(dst[0], 9);
}

/* Bad arguments are refused before the driver is looked for: the caller's mistake is reported,
 * not the missing driver. */
static void test_no_driver_bad_arguments_before_driver(void** state) {
  (void)state;
  void* p = (void*)0x1;
  assert_status(gpumem_device_alloc(0, 0, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("size is 0");
  assert_null(p);
  p = (void*)0x1;
  assert_status(gpumem_host_alloc(64, 0x100, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("flags");
  assert_null(p);
  p = (void*)0x1;
  assert_status(gpumem_managed_alloc(0, 64, 0x7, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(p);
  assert_status(gpumem_copy(NULL, &p, 8), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("dst is NULL");
  assert_status(gpumem_device_query_memory(0, NULL, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);

  gpumem_array_desc_t desc = GPUMEM_ARRAY_DESC_INIT;
  gpumem_array_t* array = (gpumem_array_t*)0x1;
  assert_status(gpumem_array_create(&desc, &array), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("width is 0");
  assert_null(array);

  int local = 0;
  assert_status(gpumem_array_destroy((gpumem_array_t*)&local), GPUMEM_ERROR_INVALID_HANDLE);
}

/* The load is attempted once; every later call reports the same reason. */
static void test_no_driver_detail_is_repeated(void** state) {
  (void)state;
  int32_t count = 0;
  reset_detail();
  assert_no_driver(gpumem_device_get_count(&count));
  char first[512];
  snprintf(first, sizeof first, "%s", gpumem_last_error_detail());
  reset_detail();
  assert_no_driver(gpumem_device_get_count(&count));
  assert_string_equal(gpumem_last_error_detail(), first);
}

int main(void) {
  /* Set here too, so the binary tests the missing driver however it is started. */
  if (setenv("GPUMEM_CUDA_DRIVER", MISSING_DRIVER, 1) != 0) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_driver_driver_get_version),
      cmocka_unit_test(test_no_driver_device_get_count),
      cmocka_unit_test(test_no_driver_device_get_info),
      cmocka_unit_test(test_no_driver_device_query_memory),
      cmocka_unit_test(test_no_driver_device_alloc),
      cmocka_unit_test(test_no_driver_host_alloc),
      cmocka_unit_test(test_no_driver_host_register),
      cmocka_unit_test(test_no_driver_managed_alloc),
      cmocka_unit_test(test_no_driver_pointer_get_info),
      cmocka_unit_test(test_no_driver_copy),
      cmocka_unit_test(test_no_driver_memset),
      cmocka_unit_test(test_no_driver_array_create),
      cmocka_unit_test(test_no_driver_frees_of_pointers),
      cmocka_unit_test(test_no_driver_host_only_calls_succeed),
      cmocka_unit_test(test_no_driver_bad_arguments_before_driver),
      cmocka_unit_test(test_no_driver_detail_is_repeated),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
