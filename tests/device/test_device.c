/* The driver version, the device count, device properties and free memory. */
#include "test_cuda.h"
#include "test_util.h"

#define FILL 0xa5

/* A caller built against a newer header, whose struct has grown. */
struct grown_info {
  gpumem_device_info_t info;
  unsigned char extra[64];
};

static void fill_info(gpumem_device_info_t* info, size_t struct_size) {
  memset(info, FILL, sizeof *info);
  info->struct_size = struct_size;
}

static void assert_info_cleared(const gpumem_device_info_t* info, size_t struct_size) {
  gpumem_device_info_t zero;
  memset(&zero, 0, sizeof zero);
  zero.struct_size = struct_size;
  assert_memory_equal(info, &zero, sizeof zero);
}

static void assert_all_bytes(const void* p, unsigned char value, size_t n) {
  const unsigned char* b = p;
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != value) {
      print_error("byte %zu is 0x%02x, expected 0x%02x\n", i, b[i], value);
      fail();
    }
  }
}

/* The detail of an invalid device names the device and how many there are. */
static void assert_invalid_device_detail(int32_t device, int32_t count) {
  char fragment[64];
  snprintf(fragment, sizeof fragment, "device %d ", (int)device);
  assert_detail_contains(fragment);
  snprintf(fragment, sizeof fragment, "there %s %d", count == 1 ? "is" : "are", (int)count);
  assert_detail_contains(fragment);
}

/* ---- bad input: refused before the driver is asked, with or without one ---- */

static void test_device_driver_version_null_out(void** state) {
  (void)state;
  assert_status(gpumem_driver_get_version(NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_version is NULL");
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

static void test_device_get_count_null_out(void** state) {
  (void)state;
  assert_status(gpumem_device_get_count(NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_count is NULL");
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

static void test_device_get_info_null_out(void** state) {
  (void)state;
  assert_status(gpumem_device_get_info(0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_info is NULL");
}

static void test_device_get_info_struct_size_zero(void** state) {
  (void)state;
  gpumem_device_info_t info;
  fill_info(&info, 0);
  assert_status(gpumem_device_get_info(0, &info), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("struct_size is 0");
  assert_int_equal(info.struct_size, 0);
  /* A struct_size of 0 says the caller's struct has no room: nothing past it may be written. */
  assert_all_bytes((const unsigned char*)&info + sizeof info.struct_size, FILL, sizeof info - sizeof info.struct_size);
}

static void test_device_get_info_struct_size_too_small(void** state) {
  (void)state;
  const size_t sizes[] = {sizeof(size_t), sizeof(gpumem_device_info_t) - 1};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    gpumem_device_info_t info;
    fill_info(&info, sizes[i]);
    assert_status(gpumem_device_get_info(0, &info), GPUMEM_ERROR_INVALID_ARGUMENT);
    char fragment[64];
    snprintf(fragment, sizeof fragment, "struct_size is %zu", sizes[i]);
    assert_detail_contains(fragment);
    assert_int_equal(info.struct_size, sizes[i]);
    /* Nothing is written past the size the caller declared. */
    assert_all_bytes((const unsigned char*)&info + sizes[i], FILL, sizeof info - sizes[i]);
  }
}

static void test_device_query_memory_both_outputs_null(void** state) {
  (void)state;
  assert_status(gpumem_device_query_memory(0, NULL, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_free and out_total are both NULL");
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

/* ---- with a GPU ---- */

static void test_device_driver_version(void** state) {
  (void)state;
  require_gpu();
  int32_t version = -1;
  assert_ok(gpumem_driver_get_version(&version));
  assert_true(version >= 12000);
  assert_true(version < 100000);
  assert_int_equal(version % 10, 0); /* 1000 * major + 10 * minor */
  int32_t again = -1;
  assert_ok(gpumem_driver_get_version(&again));
  assert_int_equal(again, version);
}

static void test_device_get_count(void** state) {
  (void)state;
  require_gpu();
  int32_t count = -1;
  assert_ok(gpumem_device_get_count(&count));
  assert_in_range(count, 1, 64);
}

static void test_device_get_info_each_device(void** state) {
  (void)state;
  require_gpu();
  const int32_t count = gpu_count();
  for (int32_t d = 0; d < count; ++d) {
    gpumem_device_info_t info;
    fill_info(&info, sizeof info);
    assert_ok(gpumem_device_get_info(d, &info));
    print_message("device %d: %s, compute capability %d.%d, %zu bytes\n", (int)d, info.name,
                  (int)info.compute_capability_major, (int)info.compute_capability_minor, info.total_memory);
    assert_int_equal(info.struct_size, sizeof info);
    assert_non_null(memchr(info.name, '\0', sizeof info.name));
    assert_true(strlen(info.name) > 0);
    assert_true(info.total_memory > 0);

    size_t total = 0;
    assert_ok(gpumem_device_query_memory(d, NULL, &total));
    assert_int_equal(info.total_memory, total);

    /* Volta (7.0) is the oldest device the CUDA 12 and later drivers support. */
    assert_in_range(info.compute_capability_major, 7, 20);
    assert_in_range(info.compute_capability_minor, 0, 9);
    if (strstr(info.name, "H100") || strstr(info.name, "H200")) {
      assert_int_equal(info.compute_capability_major, 9);
      assert_int_equal(info.compute_capability_minor, 0);
    }

    assert_true(info.unified_addressing);
    assert_true(info.managed_memory);
    assert_true(info.memory_pools);
    assert_true(info.host_register);
    assert_true(info.can_map_host_memory);

    /* Every field is written, so two calls over different garbage agree. */
    gpumem_device_info_t again;
    memset(&again, 0x5a, sizeof again);
    again.struct_size = sizeof again;
    assert_ok(gpumem_device_get_info(d, &again));
    assert_string_equal(again.name, info.name);
    assert_int_equal(again.total_memory, info.total_memory);
    assert_int_equal(again.compute_capability_major, info.compute_capability_major);
    assert_int_equal(again.compute_capability_minor, info.compute_capability_minor);
    assert_int_equal(again.unified_addressing, info.unified_addressing);
    assert_int_equal(again.managed_memory, info.managed_memory);
    assert_int_equal(again.concurrent_managed_access, info.concurrent_managed_access);
    assert_int_equal(again.memory_pools, info.memory_pools);
    assert_int_equal(again.pageable_memory_access, info.pageable_memory_access);
    assert_int_equal(again.host_register, info.host_register);
    assert_int_equal(again.can_map_host_memory, info.can_map_host_memory);
  }
}

static void test_device_query_memory(void** state) {
  (void)state;
  require_gpu();
  const int32_t count = gpu_count();
  for (int32_t d = 0; d < count; ++d) {
    size_t free_bytes = 0, total = 0;
    assert_ok(gpumem_device_query_memory(d, &free_bytes, &total));
    assert_true(total > 0);
    assert_true(free_bytes > 0);
    assert_true(free_bytes <= total);

    size_t free_only = 0;
    assert_ok(gpumem_device_query_memory(d, &free_only, NULL));
    assert_true(free_only > 0);
    assert_true(free_only <= total);
    size_t total_only = 0;
    assert_ok(gpumem_device_query_memory(d, NULL, &total_only));
    assert_int_equal(total_only, total);
  }
}

static void test_device_invalid_device(void** state) {
  (void)state;
  require_gpu();
  const int32_t count = gpu_count();
  const int32_t bad[] = {-1, count, INT32_MIN, INT32_MAX};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    gpumem_device_info_t info;
    fill_info(&info, sizeof info);
    assert_status(gpumem_device_get_info(bad[i], &info), GPUMEM_ERROR_INVALID_DEVICE);
    assert_invalid_device_detail(bad[i], count);
    assert_int_equal(gpumem_last_cuda_result(), 0);
    assert_info_cleared(&info, sizeof info);

    size_t free_bytes = 1, total = 1;
    assert_status(gpumem_device_query_memory(bad[i], &free_bytes, &total), GPUMEM_ERROR_INVALID_DEVICE);
    assert_invalid_device_detail(bad[i], count);
    assert_int_equal(free_bytes, 0);
    assert_int_equal(total, 0);
  }
}

/* A caller built against a later, larger struct: the fields this library does not know read 0. */
static void test_device_get_info_larger_struct_zeroes_unknown_fields(void** state) {
  (void)state;
  require_gpu();
  struct grown_info grown;
  memset(&grown, FILL, sizeof grown);
  grown.info.struct_size = sizeof grown;
  assert_ok(gpumem_device_get_info(0, &grown.info));
  assert_int_equal(grown.info.struct_size, sizeof grown);
  assert_true(strlen(grown.info.name) > 0);
  assert_true(grown.info.total_memory > 0);
  assert_all_bytes(grown.extra, 0, sizeof grown.extra);

  /* On failure too, and nothing past struct_size is written. */
  memset(&grown, FILL, sizeof grown);
  grown.info.struct_size = sizeof grown;
  assert_status(gpumem_device_get_info(-1, &grown.info), GPUMEM_ERROR_INVALID_DEVICE);
  assert_info_cleared(&grown.info, sizeof grown);
  assert_all_bytes(grown.extra, 0, sizeof grown.extra);
  memset(&grown, FILL, sizeof grown);
  grown.info.struct_size = sizeof grown - 8;
  assert_status(gpumem_device_get_info(-1, &grown.info), GPUMEM_ERROR_INVALID_DEVICE);
  assert_all_bytes(grown.extra, 0, sizeof grown.extra - 8);
  assert_all_bytes(grown.extra + sizeof grown.extra - 8, FILL, 8);
}

/* A copy on one stream of bytes another stream is still writing: ordered by gpumem_stream_wait(),
 * it reads the last value written. Without the wait it would start at once, in the first memset. */
static void test_device_stream_wait_orders_streams(void** state) {
  (void)state;
  require_gpu();
  const size_t size = (size_t)1 << 30, tail = 4096;
  void* src = NULL;
  void* dst = NULL;
  assert_ok(gpumem_device_alloc(0, size, &src));
  assert_ok(gpumem_device_alloc(0, tail, &dst));
  gpumem_stream_t writer = test_stream_create(0), reader = test_stream_create(0);
  static unsigned char host[4096];
  for (uint32_t round = 1; round <= 3; ++round) {
    assert_ok(gpumem_memset(dst, 0, 1, tail));
    for (uint32_t value = 1; value <= 8; ++value) /* about 2 ms of writing */
      assert_ok(gpumem_memset_async(src, (round * 16 + value) & 0xff, 1, size, writer));
    assert_ok(gpumem_stream_wait(reader, writer));
    assert_ok(gpumem_copy_async(dst, (char*)src + size - tail, tail, reader));
    test_stream_sync(reader);
    assert_ok(gpumem_copy(host, dst, tail));
    assert_all_bytes(host, (unsigned char)(round * 16 + 8), tail);
    test_stream_sync(writer);
  }
  assert_ok(gpumem_stream_wait(reader, reader)); /* the same stream: nothing to do */
  assert_ok(gpumem_stream_wait(reader, NULL));   /* the legacy stream of the current device */
  test_stream_sync(reader);
  test_stream_destroy(writer);
  test_stream_destroy(reader);
  assert_ok(gpumem_device_free(dst));
  assert_ok(gpumem_device_free(src));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_driver_version_null_out),
      cmocka_unit_test(test_device_get_count_null_out),
      cmocka_unit_test(test_device_get_info_null_out),
      cmocka_unit_test(test_device_get_info_struct_size_zero),
      cmocka_unit_test(test_device_get_info_struct_size_too_small),
      cmocka_unit_test(test_device_query_memory_both_outputs_null),
      cmocka_unit_test(test_device_driver_version),
      cmocka_unit_test(test_device_get_count),
      cmocka_unit_test(test_device_get_info_each_device),
      cmocka_unit_test(test_device_query_memory),
      cmocka_unit_test(test_device_invalid_device),
      cmocka_unit_test(test_device_get_info_larger_struct_zeroes_unknown_fields),
      cmocka_unit_test(test_device_stream_wait_orders_streams),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
