/* Pointer attributes (pointer.h): the struct contract everywhere, and on a GPU what every kind of
 * memory answers, at its start and inside it. */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "test_cuda.h"
#include "test_util.h"

/* Where a field lies, to check the raw bytes of a struct rather than its typed fields. */
#define FIRST_FIELD_AFTER_SIZE offsetof(gpumem_pointer_info_t, memory_type)

#define INTERIOR 100

/* A bool read as its byte, so a value the library never wrote (not 0 or 1) shows as it is. */
static unsigned bool_byte(const bool* b) {
  unsigned char byte;
  memcpy(&byte, b, 1);
  return byte;
}

/* Asks about an address with every field first set to garbage, so a field left unwritten shows. */
static gpumem_pointer_info_t info_of(const void* p) {
  gpumem_pointer_info_t info;
  memset(&info, 0xAB, sizeof info);
  info.struct_size = sizeof info;
  gpumem_status_t s = gpumem_pointer_get_info(p, &info);
  if (s != GPUMEM_SUCCESS) {
    print_error("gpumem_pointer_get_info(%p) returned %s; detail: %s\n", p, gpumem_status_name(s),
                gpumem_last_error_detail());
    fail();
  }
  assert_int_equal(info.struct_size, sizeof info);
  return info;
}

/* ---------------------------------------------------------------------------------------------
 * Bad input (no driver needed)
 * ------------------------------------------------------------------------------------------- */

static void test_pointer_get_info_null_out_refused(void** state) {
  (void)state;
  int local = 0;
  assert_status(gpumem_pointer_get_info(&local, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_info is NULL");
  assert_int_equal(gpumem_last_cuda_result(), 0);
  assert_status(gpumem_pointer_get_info(NULL, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_info is NULL");
}

static const size_t too_small_sizes[] = {0, sizeof(size_t), sizeof(gpumem_pointer_info_t) - 1};

static void test_pointer_get_info_struct_size_too_small_refused(void** state) {
  (void)state;
  int local = 0;
  for (size_t i = 0; i < sizeof too_small_sizes / sizeof too_small_sizes[0]; i++) {
    gpumem_pointer_info_t info;
    memset(&info, 0xAB, sizeof info);
    info.struct_size = too_small_sizes[i];
    assert_status(gpumem_pointer_get_info(&local, &info), GPUMEM_ERROR_INVALID_ARGUMENT);
    assert_detail_contains("struct_size");
    assert_int_equal(gpumem_last_cuda_result(), 0);
    assert_int_equal(info.struct_size, too_small_sizes[i]);
    assert_status(gpumem_pointer_get_info(NULL, &info), GPUMEM_ERROR_INVALID_ARGUMENT);
    assert_detail_contains("struct_size");
    assert_int_equal(info.struct_size, too_small_sizes[i]);
  }
}

/* A struct_size no struct could have is garbage: refused, and nothing written past the field. */
static void test_pointer_get_info_struct_size_implausible_refused(void** state) {
  (void)state;
  gpumem_pointer_info_t info;
  memset(&info, 0xAB, sizeof info);
  info.struct_size = (size_t)1 << 40;
  assert_status(gpumem_pointer_get_info(&info, &info), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("more than any gpumem struct");
  assert_int_equal(info.memory_type, (int32_t)0xABABABAB);
}

/* pointer.h: "zeroed on failure as far as struct_size reaches, struct_size kept": the library
 * never writes past what the caller declared. */
static void test_pointer_get_info_struct_size_too_small_clears_struct(void** state) {
  (void)state;
  int local = 0;
  for (size_t i = 0; i < sizeof too_small_sizes / sizeof too_small_sizes[0]; i++) {
    gpumem_pointer_info_t info;
    memset(&info, 0xAB, sizeof info);
    const size_t declared = too_small_sizes[i];
    info.struct_size = declared;
    assert_status(gpumem_pointer_get_info(&local, &info), GPUMEM_ERROR_INVALID_ARGUMENT);
    assert_int_equal(info.struct_size, declared);
    const unsigned char* bytes = (const unsigned char*)&info;
    for (size_t b = FIRST_FIELD_AFTER_SIZE; b < sizeof info; b++) {
      const unsigned char want = b < declared ? 0 : 0xAB;
      if (bytes[b] != want) {
        print_error("struct_size %zu: byte %zu is 0x%02x, expected 0x%02x\n", declared, b, bytes[b], want);
        fail();
      }
    }
  }
}

/* ---------------------------------------------------------------------------------------------
 * Every kind of memory (GPU)
 * ------------------------------------------------------------------------------------------- */

typedef struct {
  int32_t memory_type;
  bool managed;
  bool pinned;
  bool host_reaches;   /* host_ptr is the address itself */
  bool device_reaches; /* device_ptr is not NULL */
} expect_t;

/* Checks an allocation at its start and 100 bytes in; returns the answer for the start. */
static gpumem_pointer_info_t expect_allocation(void* start, size_t requested, expect_t e) {
  unsigned char* const p = (unsigned char*)start;
  const gpumem_pointer_info_t at = info_of(p);
  assert_int_equal(at.memory_type, e.memory_type);
  assert_int_equal(at.device, 0);
  assert_int_equal(bool_byte(&at.is_managed), e.managed);
  assert_int_equal(bool_byte(&at.is_pinned), e.pinned);
  assert_ptr_equal(at.host_ptr, e.host_reaches ? (void*)p : NULL);
  if (e.device_reaches)
    assert_non_null(at.device_ptr);
  else
    assert_null(at.device_ptr);
  assert_ptr_equal(at.base, p);
  assert_true(at.size >= requested);

  const gpumem_pointer_info_t in = info_of(p + INTERIOR);
  assert_int_equal(in.memory_type, at.memory_type);
  assert_int_equal(in.device, at.device);
  assert_int_equal(bool_byte(&in.is_managed), e.managed);
  assert_int_equal(bool_byte(&in.is_pinned), e.pinned);
  assert_ptr_equal(in.host_ptr, e.host_reaches ? (void*)(p + INTERIOR) : NULL);
  assert_ptr_equal(in.device_ptr, e.device_reaches ? (void*)((unsigned char*)at.device_ptr + INTERIOR) : NULL);
  assert_ptr_equal(in.base, p);
  assert_int_equal(in.size, at.size);
  return at;
}

/* The device address of page-locked memory must be the one gpumem_host_get_device_pointer gives. */
static void expect_pinned(void* start, size_t requested) {
  const expect_t e = {GPUMEM_MEMORY_HOST, false, true, true, true};
  const gpumem_pointer_info_t info = expect_allocation(start, requested, e);
  void* mapped = NULL;
  assert_ok(gpumem_host_get_device_pointer(start, &mapped));
  assert_ptr_equal(info.device_ptr, mapped);
}

static void expect_plain(const void* p) {
  const gpumem_pointer_info_t info = info_of(p);
  assert_int_equal(info.memory_type, GPUMEM_MEMORY_UNREGISTERED);
  assert_int_equal(info.device, -1);
  assert_int_equal(bool_byte(&info.is_managed), 0);
  assert_int_equal(bool_byte(&info.is_pinned), 0);
  assert_null(info.device_ptr);
  assert_null(info.base);
  assert_int_equal(info.size, 0);
}

static void test_pointer_device_memory(void** state) {
  (void)state;
  require_gpu();
  const size_t n = 4096;
  void* p = NULL;
  assert_ok(gpumem_device_alloc(0, n, &p));
  const expect_t e = {GPUMEM_MEMORY_DEVICE, false, false, false, true};
  const gpumem_pointer_info_t info = expect_allocation(p, n, e);
  /* Under unified addressing the device reaches its own memory at the same address. */
  assert_ptr_equal(info.device_ptr, p);
  assert_ok(gpumem_device_free(p));
}

static void test_pointer_stream_ordered_device_memory(void** state) {
  (void)state;
  require_gpu();
  const size_t n = 4096;
  gpumem_stream_t stream = test_stream_create(0);
  void* p = NULL;
  assert_ok(gpumem_device_alloc_async(0, n, stream, &p));
  test_stream_sync(stream);
  const expect_t e = {GPUMEM_MEMORY_DEVICE, false, false, false, true};
  const gpumem_pointer_info_t info = expect_allocation(p, n, e);
  assert_ptr_equal(info.device_ptr, p);
  assert_ok(gpumem_device_free_async(p, stream));
  test_stream_sync(stream);
  test_stream_destroy(stream);
}

static void test_pointer_pool_device_memory(void** state) {
  (void)state;
  require_gpu();
  const size_t n = 4096;
  gpumem_stream_t stream = test_stream_create(0);
  void* p = NULL;
  assert_ok(gpumem_device_alloc_from_pool(test_default_pool(0), n, stream, &p));
  test_stream_sync(stream);
  const expect_t e = {GPUMEM_MEMORY_DEVICE, false, false, false, true};
  const gpumem_pointer_info_t info = expect_allocation(p, n, e);
  assert_ptr_equal(info.device_ptr, p);
  assert_ok(gpumem_device_free_async(p, stream));
  test_stream_sync(stream);
  test_stream_destroy(stream);
}

static void pinned_with_flags(uint32_t flags) {
  const size_t n = 4096;
  void* p = NULL;
  assert_ok(gpumem_host_alloc(n, flags, &p));
  expect_pinned(p, n);
  assert_ok(gpumem_host_free(p));
}

static void test_pointer_pinned_host_memory(void** state) {
  (void)state;
  require_gpu();
  pinned_with_flags(0);
}

static void test_pointer_pinned_mapped_host_memory(void** state) {
  (void)state;
  require_gpu();
  pinned_with_flags(GPUMEM_HOST_ALLOC_DEVICEMAP);
}

static void test_pointer_pinned_portable_host_memory(void** state) {
  (void)state;
  require_gpu();
  pinned_with_flags(GPUMEM_HOST_ALLOC_PORTABLE);
}

static void test_pointer_pinned_writecombined_host_memory(void** state) {
  (void)state;
  require_gpu();
  pinned_with_flags(GPUMEM_HOST_ALLOC_WRITECOMBINED);
}

static void test_pointer_registered_host_memory(void** state) {
  (void)state;
  require_gpu();
  const size_t n = 8192;
  void* p = NULL;
  assert_int_equal(posix_memalign(&p, 4096, n), 0);
  assert_ok(gpumem_host_register(p, n, 0));
  expect_pinned(p, n);
  assert_ok(gpumem_host_unregister(p));
  /* Unregistered, the same range is plain host memory again. */
  expect_plain(p);
  expect_plain((unsigned char*)p + INTERIOR);
  free(p);
}

static void test_pointer_managed_memory(void** state) {
  (void)state;
  require_gpu();
  const size_t n = 4096;
  void* p = NULL;
  assert_ok(gpumem_managed_alloc(0, n, 0, &p));
  const expect_t e = {GPUMEM_MEMORY_MANAGED, true, false, true, true};
  const gpumem_pointer_info_t info = expect_allocation(p, n, e);
  assert_ptr_equal(info.device_ptr, p);
  assert_ok(gpumem_managed_free(p));
}

static void test_pointer_plain_host_memory(void** state) {
  (void)state;
  require_gpu();
  unsigned char* heap = malloc(4096);
  assert_non_null(heap);
  int local = 0;
  expect_plain(heap);
  expect_plain(heap + INTERIOR);
  expect_plain(&local);
  expect_plain(NULL);
  assert_null(info_of(NULL).host_ptr);
  free(heap);
}

/* pointer.h: host_ptr is "the address as the host reaches it; NULL if the host cannot", and the
 * host reaches its own plain memory at the address itself. */
static void test_pointer_plain_host_memory_host_ptr_is_address(void** state) {
  (void)state;
  require_gpu();
  unsigned char* heap = malloc(4096);
  assert_non_null(heap);
  int local = 0;
  assert_ptr_equal(info_of(heap).host_ptr, heap);
  assert_ptr_equal(info_of(heap + INTERIOR).host_ptr, heap + INTERIOR);
  assert_ptr_equal(info_of(&local).host_ptr, &local);
  free(heap);
}

static void test_pointer_freed_device_memory_unregistered(void** state) {
  (void)state;
  require_gpu();
  void* p = NULL;
  assert_ok(gpumem_device_alloc(0, 4096, &p));
  assert_int_equal(info_of(p).memory_type, GPUMEM_MEMORY_DEVICE);
  assert_ok(gpumem_device_free(p));
  expect_plain(p);
  expect_plain((unsigned char*)p + INTERIOR);
}

/* A caller built against a later, larger struct: the tail it knows and gpumem does not reads 0. */
static void test_pointer_get_info_larger_struct_size_accepted(void** state) {
  (void)state;
  require_gpu();
  struct {
    gpumem_pointer_info_t info;
    unsigned char tail[16];
  } larger;
  memset(&larger, 0xCD, sizeof larger);
  larger.info.struct_size = sizeof larger.info + sizeof larger.tail;
  void* p = NULL;
  assert_ok(gpumem_device_alloc(0, 4096, &p));
  assert_ok(gpumem_pointer_get_info(p, &larger.info));
  assert_int_equal(larger.info.struct_size, sizeof larger.info + sizeof larger.tail);
  assert_int_equal(larger.info.memory_type, GPUMEM_MEMORY_DEVICE);
  assert_int_equal(larger.info.device, 0);
  assert_ptr_equal(larger.info.base, p);
  assert_true(larger.info.size >= 4096);
  for (size_t i = 0; i < sizeof larger.tail; i++) assert_int_equal(larger.tail[i], 0);
  assert_ok(gpumem_device_free(p));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pointer_get_info_null_out_refused),
      cmocka_unit_test(test_pointer_get_info_struct_size_too_small_refused),
      cmocka_unit_test(test_pointer_get_info_struct_size_too_small_clears_struct),
      cmocka_unit_test(test_pointer_get_info_larger_struct_size_accepted),
      cmocka_unit_test(test_pointer_get_info_struct_size_implausible_refused),
      cmocka_unit_test(test_pointer_device_memory),
      cmocka_unit_test(test_pointer_stream_ordered_device_memory),
      cmocka_unit_test(test_pointer_pool_device_memory),
      cmocka_unit_test(test_pointer_pinned_host_memory),
      cmocka_unit_test(test_pointer_pinned_mapped_host_memory),
      cmocka_unit_test(test_pointer_pinned_portable_host_memory),
      cmocka_unit_test(test_pointer_pinned_writecombined_host_memory),
      cmocka_unit_test(test_pointer_registered_host_memory),
      cmocka_unit_test(test_pointer_managed_memory),
      cmocka_unit_test(test_pointer_plain_host_memory),
      cmocka_unit_test(test_pointer_plain_host_memory_host_ptr_is_address),
      cmocka_unit_test(test_pointer_freed_device_memory_unregistered),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
