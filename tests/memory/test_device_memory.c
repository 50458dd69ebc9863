/* Device memory, synchronous and stream-ordered: gpumem_device_alloc/free,
 * gpumem_device_alloc_async, gpumem_device_alloc_from_pool, gpumem_device_free_async. */
#include <stdlib.h>

#include "test_cuda.h"
#include "test_util.h"

#define MIB ((size_t)1 << 20)

/* The CUresult gpumem keeps for a driver out-of-memory (CUDA_ERROR_OUT_OF_MEMORY). */
#define CUDA_RESULT_OUT_OF_MEMORY 2

/* A count as the details print it: 1073741824 -> "1,073,741,824". */
static const char* grouped(size_t n, char* buf, size_t len) {
  char digits[32];
  snprintf(digits, sizeof digits, "%zu", n);
  const size_t nd = strlen(digits);
  size_t o = 0;
  for (size_t i = 0; i < nd && o + 2 < len; i++) {
    if (i > 0 && (nd - i) % 3 == 0) buf[o++] = ',';
    buf[o++] = digits[i];
  }
  buf[o] = '\0';
  return buf;
}

/* Reads back the first and last bytes of a device range (up to 4 KiB each) and checks them. */
static void assert_device_bytes(const void* d, size_t size, uint8_t value) {
  enum { WINDOW = 4096 };
  static uint8_t host[WINDOW];
  const size_t n = size < WINDOW ? size : WINDOW;
  const size_t starts[2] = {0, size - n};
  for (int w = 0; w < 2; w++) {
    memset(host, (uint8_t)~value, n);
    assert_ok(gpumem_copy(host, (const uint8_t*)d + starts[w], n));
    for (size_t i = 0; i < n; i++) {
      if (host[i] != value) {
        print_error("byte %zu of %zu is 0x%02x, expected 0x%02x\n", starts[w] + i, size, host[i], value);
        fail();
      }
    }
  }
}

static int32_t memory_type_of(const void* p) {
  gpumem_pointer_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  assert_ok(gpumem_pointer_get_info(p, &info));
  return info.memory_type;
}

/* Waits for a default stream, which needs a context current on the thread. */
static void sync_default_stream(gpumem_stream_t s) {
  test_cu_push(0);
  test_stream_sync(s);
  test_cu_pop();
}

/* ---- Bad input: refused before the driver is asked, so the same with or without a GPU. ---- */

static void test_device_memory_alloc_null_out(void** state) {
  (void)state;
  assert_status(gpumem_device_alloc(0, 16, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_ptr is NULL");
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

static void test_device_memory_alloc_size_zero(void** state) {
  (void)state;
  void* p = (void*)0x1;
  assert_status(gpumem_device_alloc(0, 0, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(p);
  assert_detail_contains("size is 0");
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

static void test_device_memory_free_null(void** state) {
  (void)state;
  assert_ok(gpumem_device_free(NULL));
}

static void test_device_memory_alloc_async_null_out(void** state) {
  (void)state;
  assert_status(gpumem_device_alloc_async(0, 16, NULL, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_ptr is NULL");
}

static void test_device_memory_alloc_async_size_zero(void** state) {
  (void)state;
  void* p = (void*)0x1;
  assert_status(gpumem_device_alloc_async(0, 0, NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(p);
  assert_detail_contains("size is 0");
}

static void test_device_memory_alloc_from_pool_null_out(void** state) {
  (void)state;
  assert_status(gpumem_device_alloc_from_pool((gpumem_cuda_pool_t)0x1, 16, NULL, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_ptr is NULL");
}

static void test_device_memory_alloc_from_pool_size_zero(void** state) {
  (void)state;
  void* p = (void*)0x1;
  assert_status(gpumem_device_alloc_from_pool((gpumem_cuda_pool_t)0x1, 0, NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(p);
  assert_detail_contains("size is 0");
}

static void test_device_memory_alloc_from_pool_null_pool(void** state) {
  (void)state;
  void* p = (void*)0x1;
  assert_status(gpumem_device_alloc_from_pool(NULL, 16, NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(p);
  assert_detail_contains("pool is NULL");
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

static void test_device_memory_free_async_null(void** state) {
  (void)state;
  assert_ok(gpumem_device_free_async(NULL, NULL));
  assert_ok(gpumem_device_free_async(NULL, GPUMEM_STREAM_LEGACY));
  assert_ok(gpumem_device_free_async(NULL, GPUMEM_STREAM_PER_THREAD));
}

/* ---- GPU: synchronous allocation. ---- */

static void test_device_memory_alloc_sizes(void** state) {
  (void)state;
  require_gpu();
  static const size_t sizes[] = {1, 2, 3, 255, 4096, 4097, 65537, MIB, 64 * MIB};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void* p = NULL;
    assert_ok(gpumem_device_alloc(0, sizes[i], &p));
    assert_non_null(p);
    assert_int_equal(memory_type_of(p), GPUMEM_MEMORY_DEVICE);
    const uint8_t value = (uint8_t)(0x11 * (i + 1));
    assert_ok(gpumem_memset(p, value, 1, sizes[i]));
    assert_device_bytes(p, sizes[i], value);
    assert_ok(gpumem_device_free(p));
  }
}

static void test_device_memory_alloc_invalid_device(void** state) {
  (void)state;
  require_gpu();
  const int32_t bad[2] = {-1, gpu_count()};
  for (int i = 0; i < 2; i++) {
    char text[64];
    snprintf(text, sizeof text, "device %d does not exist", (int)bad[i]);
    void* p = (void*)0x1;
    assert_status(gpumem_device_alloc(bad[i], 16, &p), GPUMEM_ERROR_INVALID_DEVICE);
    assert_null(p);
    assert_detail_contains(text);
    p = (void*)0x1;
    assert_status(gpumem_device_alloc_async(bad[i], 16, NULL, &p), GPUMEM_ERROR_INVALID_DEVICE);
    assert_null(p);
    assert_detail_contains(text);
  }
}

static void test_device_memory_alloc_out_of_memory(void** state) {
  (void)state;
  require_gpu();
  const size_t size = SIZE_MAX / 2;
  char bytes[40];
  void* p = (void*)0x1;
  assert_status(gpumem_device_alloc(0, size, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  assert_detail_contains("out of memory");
  assert_detail_contains(grouped(size, bytes, sizeof bytes));
  assert_detail_contains("on device 0");
  assert_int_equal(gpumem_last_cuda_result(), CUDA_RESULT_OUT_OF_MEMORY);
}

static void test_device_memory_free_interior_pointer(void** state) {
  (void)state;
  require_gpu();
  void* p = NULL;
  assert_ok(gpumem_device_alloc(0, 4096, &p));
  assert_status(gpumem_device_free((uint8_t*)p + 16), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("16 bytes inside");
  /* The refused free must have left the allocation whole. */
  assert_ok(gpumem_memset(p, 0x3c, 1, 4096));
  assert_device_bytes(p, 4096, 0x3c);
  assert_ok(gpumem_device_free(p));
}

static void test_device_memory_double_free(void** state) {
  (void)state;
  require_gpu();
  void* p = NULL;
  assert_ok(gpumem_device_alloc(0, 4096, &p));
  assert_ok(gpumem_device_free(p));
  assert_status(gpumem_device_free(p), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("already freed");
}

static void test_device_memory_free_other_kinds(void** state) {
  (void)state;
  require_gpu();
  void* host = NULL;
  assert_ok(gpumem_host_alloc(4096, 0, &host));
  assert_status(gpumem_device_free(host), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("page-locked host memory, not device memory");
  assert_status(gpumem_device_free_async(host, NULL), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("page-locked host memory, not device memory");
  assert_ok(gpumem_host_free(host));

  void* managed = NULL;
  assert_ok(gpumem_managed_alloc(0, 4096, 0, &managed));
  assert_status(gpumem_device_free(managed), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("managed memory, not device memory");
  /* Still there: the host can write it. */
  memset(managed, 0x7e, 4096);
  assert_ok(gpumem_managed_free(managed));

  uint8_t* plain = malloc(4096);
  assert_non_null(plain);
  assert_status(gpumem_device_free(plain), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("plain host memory");
  free(plain);
}

static void test_device_memory_free_memory_accounting(void** state) {
  (void)state;
  require_gpu();
  const size_t size = 256 * MIB;
  const size_t tolerance = 4 * MIB;
  size_t before = 0, during = 0, after = 0, total = 0;
  assert_ok(gpumem_device_query_memory(0, &before, &total));
  void* p = NULL;
  assert_ok(gpumem_device_alloc(0, size, &p));
  assert_ok(gpumem_device_query_memory(0, &during, NULL));
  assert_ok(gpumem_device_free(p));
  assert_ok(gpumem_device_query_memory(0, &after, NULL));
  if (before < during || before - during < size) {
    print_error("free memory went from %zu to %zu bytes for a %zu-byte allocation\n", before, during, size);
    fail();
  }
  if (after + tolerance < before) {
    print_error("free memory was %zu bytes before and %zu after the free\n", before, after);
    fail();
  }
}

/* ---- GPU: stream-ordered allocation. ---- */

static void test_device_memory_alloc_async_on_stream(void** state) {
  (void)state;
  require_gpu();
  enum { SIZE = 4096, HEAD = 100 };
  gpumem_stream_t s = test_stream_create(0);
  uint8_t* host = NULL;
  assert_ok(gpumem_host_alloc(SIZE, 0, (void**)&host));
  memset(host, 0, SIZE);
  void* d = (void*)0x1;
  assert_ok(gpumem_device_alloc_async(0, SIZE, s, &d));
  assert_non_null(d);
  /* Two memsets so the bytes show that both ran, in order, before the copy. */
  assert_ok(gpumem_memset_async(d, 0xdeadbeefu, 4, SIZE / 4, s));
  assert_ok(gpumem_memset_async(d, 0x5a, 1, HEAD, s));
  assert_ok(gpumem_copy_async(host, d, SIZE, s));
  assert_ok(gpumem_device_free_async(d, s));
  test_stream_sync(s);
  static const uint8_t word[4] = {0xef, 0xbe, 0xad, 0xde}; /* 0xdeadbeef, little-endian */
  for (size_t i = 0; i < SIZE; i++) {
    const uint8_t want = i < HEAD ? 0x5a : word[i % 4];
    if (host[i] != want) {
      print_error("byte %zu is 0x%02x, expected 0x%02x\n", i, host[i], want);
      fail();
    }
  }
  assert_ok(gpumem_host_free(host));
  test_stream_destroy(s);
}

static void test_device_memory_alloc_async_default_streams(void** state) {
  (void)state;
  require_gpu();
  const gpumem_stream_t streams[3] = {NULL, GPUMEM_STREAM_LEGACY, GPUMEM_STREAM_PER_THREAD};
  for (int i = 0; i < 3; i++) {
    void* d = NULL;
    assert_ok(gpumem_device_alloc_async(0, 4096, streams[i], &d));
    assert_non_null(d);
    assert_ok(gpumem_memset_async(d, 0x21, 1, 4096, streams[i]));
    sync_default_stream(streams[i]);
    assert_device_bytes(d, 4096, 0x21);
    assert_ok(gpumem_device_free_async(d, streams[i]));
    sync_default_stream(streams[i]);
  }
}

static void test_device_memory_alloc_async_stream_of_other_device(void** state) {
  (void)state;
  require_gpu();
  if (gpu_count() < 2) skip();
  gpumem_stream_t s = test_stream_create(1);
  void* d = (void*)0x1;
  assert_status(gpumem_device_alloc_async(0, 4096, s, &d), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(d);
  assert_detail_contains("belongs to device 1, not device 0");
  test_stream_destroy(s);
}

static void test_device_memory_alloc_from_pool(void** state) {
  (void)state;
  require_gpu();
  enum { SIZE = 8192 };
  gpumem_cuda_pool_t pool = test_default_pool(0);
  gpumem_stream_t s = test_stream_create(0);
  uint8_t* host = NULL;
  assert_ok(gpumem_host_alloc(SIZE, 0, (void**)&host));
  memset(host, 0, SIZE);
  void* d = (void*)0x1;
  assert_ok(gpumem_device_alloc_from_pool(pool, SIZE, s, &d));
  assert_non_null(d);
  assert_ok(gpumem_memset_async(d, 0x6b, 1, SIZE, s));
  assert_ok(gpumem_copy_async(host, d, SIZE, s));
  assert_ok(gpumem_device_free_async(d, s));
  test_stream_sync(s);
  for (size_t i = 0; i < SIZE; i++) assert_int_equal(host[i], 0x6b);
  assert_ok(gpumem_host_free(host));
  test_stream_destroy(s);
}

static void test_device_memory_free_async_of_sync_allocation(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t s = test_stream_create(0);
  void* d = NULL;
  assert_ok(gpumem_device_alloc(0, 4096, &d));
  assert_ok(gpumem_device_free_async(d, s));
  test_stream_sync(s);
  /* Gone once the stream has reached the free. */
  assert_int_equal(memory_type_of(d), GPUMEM_MEMORY_UNREGISTERED);
  test_stream_destroy(s);
}

static void test_device_memory_free_async_interior_pointer(void** state) {
  (void)state;
  require_gpu();
  gpumem_stream_t s = test_stream_create(0);
  void* d = NULL;
  assert_ok(gpumem_device_alloc_async(0, 4096, s, &d));
  assert_status(gpumem_device_free_async((uint8_t*)d + 256, s), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("256 bytes inside");
  assert_ok(gpumem_device_free_async(d, s));
  test_stream_sync(s);
  test_stream_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_memory_alloc_null_out),
      cmocka_unit_test(test_device_memory_alloc_size_zero),
      cmocka_unit_test(test_device_memory_free_null),
      cmocka_unit_test(test_device_memory_alloc_async_null_out),
      cmocka_unit_test(test_device_memory_alloc_async_size_zero),
      cmocka_unit_test(test_device_memory_alloc_from_pool_null_out),
      cmocka_unit_test(test_device_memory_alloc_from_pool_size_zero),
      cmocka_unit_test(test_device_memory_alloc_from_pool_null_pool),
      cmocka_unit_test(test_device_memory_free_async_null),
      cmocka_unit_test(test_device_memory_alloc_sizes),
      cmocka_unit_test(test_device_memory_alloc_invalid_device),
      cmocka_unit_test(test_device_memory_alloc_out_of_memory),
      cmocka_unit_test(test_device_memory_free_interior_pointer),
      cmocka_unit_test(test_device_memory_double_free),
      cmocka_unit_test(test_device_memory_free_other_kinds),
      cmocka_unit_test(test_device_memory_free_memory_accounting),
      cmocka_unit_test(test_device_memory_alloc_async_on_stream),
      cmocka_unit_test(test_device_memory_alloc_async_default_streams),
      cmocka_unit_test(test_device_memory_alloc_async_stream_of_other_device),
      cmocka_unit_test(test_device_memory_alloc_from_pool),
      cmocka_unit_test(test_device_memory_free_async_of_sync_allocation),
      cmocka_unit_test(test_device_memory_free_async_interior_pointer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
