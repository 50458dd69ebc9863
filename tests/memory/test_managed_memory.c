/* Managed (unified) memory: gpumem_managed_alloc/free, gpumem_managed_prefetch,
 * gpumem_managed_advise and gpumem_managed_get_range_info. */
#include <stdlib.h>

#include "test_cuda.h"
#include "test_util.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define SIZE (64 * KIB)

static gpumem_managed_range_info_t range_info(const void* p, size_t size) {
  gpumem_managed_range_info_t info;
  memset(&info, 0x5a, sizeof info); /* garbage the call must overwrite */
  info.struct_size = sizeof info;
  assert_ok(gpumem_managed_get_range_info(p, size, &info));
  assert_int_equal(info.struct_size, sizeof info);
  return info;
}

/* Asserts a failing range query left the struct cleared, struct_size kept. */
static void assert_range_info_cleared(const gpumem_managed_range_info_t* info) {
  assert_int_equal(info->struct_size, sizeof *info);
  assert_false(info->read_mostly);
  assert_int_equal(info->preferred_location, 0);
  assert_int_equal(info->last_prefetch_location, 0);
  assert_int_equal(info->accessed_by, 0);
}

static void prefill(gpumem_managed_range_info_t* info) {
  info->struct_size = sizeof *info;
  info->read_mostly = true;
  info->preferred_location = 7;
  info->last_prefetch_location = 7;
  info->accessed_by = ~(uint64_t)0;
}

static void fill_pattern(uint8_t* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 13u + seed);
}

static void assert_pattern(const uint8_t* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    if (p[i] != (uint8_t)(i * 13u + seed)) {
      print_error("byte %zu is 0x%02x, expected 0x%02x\n", i, p[i], (uint8_t)(i * 13u + seed));
      fail();
    }
  }
}

static void* managed(size_t size) {
  void* p = NULL;
  assert_ok(gpumem_managed_alloc(0, size, 0, &p));
  assert_non_null(p);
  return p;
}

/* Prefetch needs the device to share managed pages with a running host (memory.h). */
static void require_concurrent_managed_access(void) {
  gpumem_device_info_t dev;
  memset(&dev, 0, sizeof dev);
  dev.struct_size = sizeof dev;
  assert_ok(gpumem_device_get_info(0, &dev));
  if (!dev.concurrent_managed_access) {
    print_message("device 0 has no concurrent managed access\n");
    skip();
  }
}

/* ---- Bad input: refused before the driver is asked, so the same with or without a GPU. ---- */

static void test_managed_memory_alloc_null_out(void** state) {
  (void)state;
  assert_status(gpumem_managed_alloc(0, 16, 0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_ptr is NULL");
}

static void test_managed_memory_alloc_size_zero(void** state) {
  (void)state;
  void* p = (void*)0x1;
  assert_status(gpumem_managed_alloc(0, 0, 0, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(p);
  assert_detail_contains("size is 0");
}

static void test_managed_memory_alloc_bad_flags(void** state) {
  (void)state;
  static const uint32_t bad[] = {3, 4};
  for (int i = 0; i < 2; i++) {
    char text[32];
    snprintf(text, sizeof text, "managed flags 0x%x", (unsigned)bad[i]);
    void* p = (void*)0x1;
    assert_status(gpumem_managed_alloc(0, 16, bad[i], &p), GPUMEM_ERROR_INVALID_ARGUMENT);
    assert_null(p);
    assert_detail_contains(text);
    assert_int_equal(gpumem_last_cuda_result(), 0);
  }
}

static void test_managed_memory_free_null(void** state) {
  (void)state;
  assert_ok(gpumem_managed_free(NULL));
}

static void test_managed_memory_prefetch_bad_arguments(void** state) {
  (void)state;
  uint8_t buf[16] = {0};
  assert_status(gpumem_managed_prefetch(NULL, 16, 0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("ptr is NULL");
  assert_status(gpumem_managed_prefetch(buf, 0, 0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("size is 0");
  assert_status(gpumem_managed_prefetch(buf, sizeof buf, -3, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("location -3 is neither a device nor GPUMEM_LOCATION_HOST");
  /* "No location" is something range info reports, not a place to send pages. */
  assert_status(gpumem_managed_prefetch(buf, sizeof buf, GPUMEM_LOCATION_NONE, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("location -2");
}

static void test_managed_memory_advise_bad_advice(void** state) {
  (void)state;
  uint8_t buf[16] = {0};
  static const int32_t bad[] = {0, 7};
  for (int i = 0; i < 2; i++) {
    char text[32];
    snprintf(text, sizeof text, "unknown advice %d", (int)bad[i]);
    assert_status(gpumem_managed_advise(buf, sizeof buf, bad[i], 0), GPUMEM_ERROR_INVALID_ARGUMENT);
    assert_detail_contains(text);
    assert_int_equal(gpumem_last_cuda_result(), 0);
  }
}

static void test_managed_memory_advise_bad_arguments(void** state) {
  (void)state;
  uint8_t buf[16] = {0};
  assert_status(gpumem_managed_advise(NULL, 16, GPUMEM_ADVICE_SET_READ_MOSTLY, 0), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("ptr is NULL");
  assert_status(gpumem_managed_advise(buf, 0, GPUMEM_ADVICE_SET_READ_MOSTLY, 0), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("size is 0");
  assert_status(gpumem_managed_advise(buf, sizeof buf, GPUMEM_ADVICE_SET_PREFERRED_LOCATION, -3),
                GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("location -3 is neither a device nor GPUMEM_LOCATION_HOST");
  assert_status(gpumem_managed_advise(buf, sizeof buf, GPUMEM_ADVICE_SET_ACCESSED_BY, -3),
                GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("location -3");
}

static void test_managed_memory_range_info_null_out(void** state) {
  (void)state;
  uint8_t buf[16] = {0};
  assert_status(gpumem_managed_get_range_info(buf, sizeof buf, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_info is NULL");
}

static void test_managed_memory_range_info_struct_size_zero(void** state) {
  (void)state;
  uint8_t buf[16] = {0};
  gpumem_managed_range_info_t info;
  prefill(&info);
  info.struct_size = 0;
  assert_status(gpumem_managed_get_range_info(buf, sizeof buf, &info), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("struct_size is 0");
  assert_int_equal(info.struct_size, 0);
}

static void test_managed_memory_range_info_bad_range(void** state) {
  (void)state;
  uint8_t buf[16] = {0};
  gpumem_managed_range_info_t info;
  prefill(&info);
  assert_status(gpumem_managed_get_range_info(NULL, 16, &info), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("ptr is NULL");
  assert_range_info_cleared(&info);
  prefill(&info);
  assert_status(gpumem_managed_get_range_info(buf, 0, &info), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("size is 0");
  assert_range_info_cleared(&info);
}

/* ---- GPU: allocation. ---- */

static void test_managed_memory_alloc_flags(void** state) {
  (void)state;
  require_gpu();
  static const uint32_t flags[] = {0, GPUMEM_MANAGED_ATTACH_GLOBAL, GPUMEM_MANAGED_ATTACH_HOST};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    uint8_t* p = (uint8_t*)0x1;
    assert_ok(gpumem_managed_alloc(0, SIZE + 3, flags[i], (void**)&p));
    assert_non_null(p);
    gpumem_pointer_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    assert_ok(gpumem_pointer_get_info(p, &info));
    assert_int_equal(info.memory_type, GPUMEM_MEMORY_MANAGED);
    assert_true(info.is_managed);
    fill_pattern(p, SIZE + 3, (unsigned)i);
    assert_pattern(p, SIZE + 3, (unsigned)i);
    assert_ok(gpumem_managed_free(p));
  }
}

static void test_managed_memory_alloc_invalid_device(void** state) {
  (void)state;
  require_gpu();
  const int32_t bad[2] = {-1, gpu_count()};
  for (int i = 0; i < 2; i++) {
    char text[64];
    snprintf(text, sizeof text, "device %d does not exist", (int)bad[i]);
    void* p = (void*)0x1;
    assert_status(gpumem_managed_alloc(bad[i], SIZE, 0, &p), GPUMEM_ERROR_INVALID_DEVICE);
    assert_null(p);
    assert_detail_contains(text);
  }
}

static void test_managed_memory_free_interior_pointer(void** state) {
  (void)state;
  require_gpu();
  uint8_t* p = managed(SIZE);
  fill_pattern(p, SIZE, 1);
  assert_status(gpumem_managed_free(p + 128), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("128 bytes inside");
  assert_pattern(p, SIZE, 1);
  fill_pattern(p, SIZE, 2);
  assert_ok(gpumem_managed_free(p));
}

static void test_managed_memory_free_other_kinds(void** state) {
  (void)state;
  require_gpu();
  void* d = NULL;
  assert_ok(gpumem_device_alloc(0, SIZE, &d));
  assert_status(gpumem_managed_free(d), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("device memory on device 0");
  assert_ok(gpumem_device_free(d));

  void* h = NULL;
  assert_ok(gpumem_host_alloc(SIZE, 0, &h));
  assert_status(gpumem_managed_free(h), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("page-locked host memory");
  assert_ok(gpumem_host_free(h));
}

static void test_managed_memory_double_free(void** state) {
  (void)state;
  require_gpu();
  void* p = managed(SIZE);
  assert_ok(gpumem_managed_free(p));
  assert_status(gpumem_managed_free(p), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("already freed");
}

/* ---- GPU: range info, prefetch and advice. ---- */

static void test_managed_memory_range_info_fresh(void** state) {
  (void)state;
  require_gpu();
  void* p = managed(SIZE);
  const gpumem_managed_range_info_t info = range_info(p, SIZE);
  assert_false(info.read_mostly);
  assert_int_equal(info.preferred_location, GPUMEM_LOCATION_NONE);
  assert_int_equal(info.last_prefetch_location, GPUMEM_LOCATION_NONE);
  assert_int_equal(info.accessed_by, 0);
  assert_ok(gpumem_managed_free(p));
}

static void test_managed_memory_prefetch(void** state) {
  (void)state;
  require_gpu();
  require_concurrent_managed_access();
  gpumem_stream_t s = test_stream_create(0);
  uint8_t* p = managed(SIZE);
  fill_pattern(p, SIZE, 4);

  assert_ok(gpumem_managed_prefetch(p, SIZE, 0, s));
  test_stream_sync(s);
  assert_int_equal(range_info(p, SIZE).last_prefetch_location, 0);
  /* The device holds the bytes the host wrote: read them through a device copy. */
  uint8_t* back = malloc(SIZE);
  assert_non_null(back);
  memset(back, 0, SIZE);
  void* d = NULL;
  assert_ok(gpumem_device_alloc(0, SIZE, &d));
  assert_ok(gpumem_copy(d, p, SIZE));
  assert_ok(gpumem_copy(back, d, SIZE));
  assert_pattern(back, SIZE, 4);
  assert_ok(gpumem_device_free(d));
  free(back);

  assert_ok(gpumem_managed_prefetch(p, SIZE, GPUMEM_LOCATION_HOST, s));
  test_stream_sync(s);
  assert_int_equal(range_info(p, SIZE).last_prefetch_location, GPUMEM_LOCATION_HOST);
  assert_pattern(p, SIZE, 4);

  assert_ok(gpumem_managed_free(p));
  test_stream_destroy(s);
}

static void test_managed_memory_advise_read_mostly(void** state) {
  (void)state;
  require_gpu();
  void* p = managed(SIZE);
  assert_ok(gpumem_managed_advise(p, SIZE, GPUMEM_ADVICE_SET_READ_MOSTLY, 0));
  assert_true(range_info(p, SIZE).read_mostly);
  assert_ok(gpumem_managed_advise(p, SIZE, GPUMEM_ADVICE_UNSET_READ_MOSTLY, 0));
  assert_false(range_info(p, SIZE).read_mostly);
  /* The read-mostly advice takes no location, so even a bad one is ignored (memory.h). */
  assert_ok(gpumem_managed_advise(p, SIZE, GPUMEM_ADVICE_SET_READ_MOSTLY, -3));
  assert_true(range_info(p, SIZE).read_mostly);
  assert_ok(gpumem_managed_advise(p, SIZE, GPUMEM_ADVICE_UNSET_READ_MOSTLY, 1000));
  assert_false(range_info(p, SIZE).read_mostly);
  assert_ok(gpumem_managed_free(p));
}

static void test_managed_memory_advise_preferred_location(void** state) {
  (void)state;
  require_gpu();
  void* p = managed(SIZE);
  assert_ok(gpumem_managed_advise(p, SIZE, GPUMEM_ADVICE_SET_PREFERRED_LOCATION, 0));
  assert_int_equal(range_info(p, SIZE).preferred_location, 0);
  assert_ok(gpumem_managed_advise(p, SIZE, GPUMEM_ADVICE_UNSET_PREFERRED_LOCATION, 0));
  assert_int_equal(range_info(p, SIZE).preferred_location, GPUMEM_LOCATION_NONE);
  assert_ok(gpumem_managed_advise(p, SIZE, GPUMEM_ADVICE_SET_PREFERRED_LOCATION, GPUMEM_LOCATION_HOST));
  assert_int_equal(range_info(p, SIZE).preferred_location, GPUMEM_LOCATION_HOST);
  assert_ok(gpumem_managed_advise(p, SIZE, GPUMEM_ADVICE_UNSET_PREFERRED_LOCATION, GPUMEM_LOCATION_HOST));
  assert_int_equal(range_info(p, SIZE).preferred_location, GPUMEM_LOCATION_NONE);
  assert_ok(gpumem_managed_free(p));
}

/* Advice on half a range: the half answers with it, the whole range as mixed (NONE). */
static void test_managed_memory_advise_part_of_range(void** state) {
  (void)state;
  require_gpu();
  const size_t size = 4 * MIB;
  uint8_t* p = managed(size);
  assert_ok(gpumem_managed_advise(p, size / 2, GPUMEM_ADVICE_SET_PREFERRED_LOCATION, 0));
  assert_int_equal(range_info(p, size / 2).preferred_location, 0);
  assert_int_equal(range_info(p + size / 2, size / 2).preferred_location, GPUMEM_LOCATION_NONE);
  assert_int_equal(range_info(p, size).preferred_location, GPUMEM_LOCATION_NONE);
  assert_ok(gpumem_managed_free(p));
}

static void test_managed_memory_advise_accessed_by(void** state) {
  (void)state;
  require_gpu();
  void* p = managed(SIZE);
  assert_ok(gpumem_managed_advise(p, SIZE, GPUMEM_ADVICE_SET_ACCESSED_BY, 0));
  assert_int_equal(range_info(p, SIZE).accessed_by, 1);
  assert_ok(gpumem_managed_advise(p, SIZE, GPUMEM_ADVICE_UNSET_ACCESSED_BY, 0));
  assert_int_equal(range_info(p, SIZE).accessed_by, 0);
  assert_ok(gpumem_managed_free(p));
}

static void test_managed_memory_location_not_present(void** state) {
  (void)state;
  require_gpu();
  void* p = managed(SIZE);
  assert_status(gpumem_managed_prefetch(p, SIZE, 1000, NULL), GPUMEM_ERROR_INVALID_DEVICE);
  assert_detail_contains("device 1000 does not exist");
  assert_status(gpumem_managed_advise(p, SIZE, GPUMEM_ADVICE_SET_PREFERRED_LOCATION, 1000),
                GPUMEM_ERROR_INVALID_DEVICE);
  assert_detail_contains("device 1000 does not exist");
  assert_status(gpumem_managed_advise(p, SIZE, GPUMEM_ADVICE_SET_ACCESSED_BY, 1000), GPUMEM_ERROR_INVALID_DEVICE);
  assert_detail_contains("device 1000 does not exist");
  /* Nothing was set by the refused calls. */
  const gpumem_managed_range_info_t info = range_info(p, SIZE);
  assert_int_equal(info.preferred_location, GPUMEM_LOCATION_NONE);
  assert_int_equal(info.last_prefetch_location, GPUMEM_LOCATION_NONE);
  assert_int_equal(info.accessed_by, 0);
  assert_ok(gpumem_managed_free(p));
}

/* Prefetch, advice and range info all refuse memory of another kind, and name the kind. */
static void assert_not_managed(void* p, const char* kind) {
  assert_status(gpumem_managed_prefetch(p, 4096, 0, NULL), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains(kind);
  assert_detail_contains("not managed memory");
  assert_status(gpumem_managed_advise(p, 4096, GPUMEM_ADVICE_SET_READ_MOSTLY, 0), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("not managed memory");
  assert_status(gpumem_managed_advise(p, 4096, GPUMEM_ADVICE_SET_PREFERRED_LOCATION, 0), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("not managed memory");
  gpumem_managed_range_info_t info;
  prefill(&info);
  assert_status(gpumem_managed_get_range_info(p, 4096, &info), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("not managed memory");
  assert_range_info_cleared(&info);
}

static void test_managed_memory_device_memory_refused(void** state) {
  (void)state;
  require_gpu();
  void* d = NULL;
  assert_ok(gpumem_device_alloc(0, SIZE, &d));
  assert_not_managed(d, "device memory on device 0");
  assert_ok(gpumem_device_free(d));
}

static void test_managed_memory_plain_memory_refused(void** state) {
  (void)state;
  require_gpu();
  uint8_t* plain = malloc(SIZE);
  assert_non_null(plain);
  memset(plain, 0, SIZE);
  assert_not_managed(plain, "plain host memory");
  free(plain);
}

static void test_managed_memory_range_past_end(void** state) {
  (void)state;
  require_gpu();
  uint8_t* p = managed(SIZE);
  uint8_t* start = p + SIZE - 4 * KIB;
  const size_t size = 8 * KIB; /* 4 KiB past the end */
  assert_status(gpumem_managed_prefetch(start, size, 0, NULL), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("4,096 bytes past the end");
  assert_status(gpumem_managed_advise(start, size, GPUMEM_ADVICE_SET_READ_MOSTLY, 0), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("4,096 bytes past the end");
  gpumem_managed_range_info_t info;
  prefill(&info);
  assert_status(gpumem_managed_get_range_info(start, size, &info), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("4,096 bytes past the end");
  assert_range_info_cleared(&info);
  /* One byte over is enough; up to the last byte is fine. */
  assert_status(gpumem_managed_get_range_info(p, SIZE + 1, &info), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("1 byte past the end");
  assert_false(range_info(start, 4 * KIB).read_mostly);
  assert_ok(gpumem_managed_free(p));
}

int main(void) {
  /* test_cuda.h's helpers are plain static functions; this file needs no pool. */
  (void)test_default_pool;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_managed_memory_alloc_null_out),
      cmocka_unit_test(test_managed_memory_alloc_size_zero),
      cmocka_unit_test(test_managed_memory_alloc_bad_flags),
      cmocka_unit_test(test_managed_memory_free_null),
      cmocka_unit_test(test_managed_memory_prefetch_bad_arguments),
      cmocka_unit_test(test_managed_memory_advise_bad_advice),
      cmocka_unit_test(test_managed_memory_advise_bad_arguments),
      cmocka_unit_test(test_managed_memory_range_info_null_out),
      cmocka_unit_test(test_managed_memory_range_info_struct_size_zero),
      cmocka_unit_test(test_managed_memory_range_info_bad_range),
      cmocka_unit_test(test_managed_memory_alloc_flags),
      cmocka_unit_test(test_managed_memory_alloc_invalid_device),
      cmocka_unit_test(test_managed_memory_free_interior_pointer),
      cmocka_unit_test(test_managed_memory_free_other_kinds),
      cmocka_unit_test(test_managed_memory_double_free),
      cmocka_unit_test(test_managed_memory_range_info_fresh),
      cmocka_unit_test(test_managed_memory_prefetch),
      cmocka_unit_test(test_managed_memory_advise_read_mostly),
      cmocka_unit_test(test_managed_memory_advise_preferred_location),
      cmocka_unit_test(test_managed_memory_advise_part_of_range),
      cmocka_unit_test(test_managed_memory_advise_accessed_by),
      cmocka_unit_test(test_managed_memory_location_not_present),
      cmocka_unit_test(test_managed_memory_device_memory_refused),
      cmocka_unit_test(test_managed_memory_plain_memory_refused),
      cmocka_unit_test(test_managed_memory_range_past_end),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
