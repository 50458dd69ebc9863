/* Page-locked host memory: gpumem_host_alloc/free, gpumem_host_register/unregister and
 * gpumem_host_get_device_pointer. */
#define _POSIX_C_SOURCE 200809L

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test_util.h"

#define PAGE ((size_t)4096)
#define REGION (16 * PAGE)

static gpumem_pointer_info_t pointer_info(const void* p) {
  gpumem_pointer_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  assert_ok(gpumem_pointer_get_info(p, &info));
  return info;
}

/* Page-aligned plain host memory, as a caller registering its own buffer has. */
static uint8_t* aligned_buffer(size_t size) {
  void* p = NULL;
  assert_int_equal(posix_memalign(&p, PAGE, size), 0);
  memset(p, 0, size);
  return p;
}

/* Anonymous pages through /dev/zero, which POSIX has (MAP_ANONYMOUS is not in POSIX 2008). */
static uint8_t* mapped_buffer(size_t size) {
  const int fd = open("/dev/zero", O_RDWR);
  assert_true(fd >= 0);
  void* p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  close(fd);
  assert_true(p != MAP_FAILED);
  memset(p, 0, size); /* backed by real pages before the driver pins them */
  return p;
}

static void fill_pattern(uint8_t* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 31u + seed);
}

static void assert_pattern(const uint8_t* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    if (p[i] != (uint8_t)(i * 31u + seed)) {
      print_error("byte %zu is 0x%02x, expected 0x%02x\n", i, p[i], (uint8_t)(i * 31u + seed));
      fail();
    }
  }
}

/* Makes the device read n bytes at a device address with no kernel: a copy into device memory
 * and back to a separate host buffer. The host bytes at host_p must come back. */
static void assert_device_reads(void* device_p, const uint8_t* host_p, size_t n) {
  void* d = NULL;
  assert_ok(gpumem_device_alloc(0, n, &d));
  assert_ok(gpumem_memset(d, 0, 1, n));
  assert_ok(gpumem_copy(d, device_p, n));
  uint8_t* back = malloc(n);
  assert_non_null(back);
  memset(back, 0xff, n);
  assert_ok(gpumem_copy(back, d, n));
  assert_memory_equal(back, host_p, n);
  free(back);
  assert_ok(gpumem_device_free(d));
}

/* ---- Bad input: refused before the driver is asked, so the same with or without a GPU. ---- */

static void test_host_memory_alloc_null_out(void** state) {
  (void)state;
  assert_status(gpumem_host_alloc(16, 0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_ptr is NULL");
}

static void test_host_memory_alloc_size_zero(void** state) {
  (void)state;
  void* p = (void*)0x1;
  assert_status(gpumem_host_alloc(0, 0, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(p);
  assert_detail_contains("size is 0");
}

static void test_host_memory_alloc_unknown_flag(void** state) {
  (void)state;
  void* p = (void*)0x1;
  assert_status(gpumem_host_alloc(16, 0x10, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(p);
  assert_detail_contains("unknown");
  assert_detail_contains("0x10");
  assert_int_equal(gpumem_last_cuda_result(), 0);
  /* A known flag beside it does not make it acceptable. */
  p = (void*)0x1;
  assert_status(gpumem_host_alloc(16, GPUMEM_HOST_ALLOC_PORTABLE | 0x10, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(p);
  assert_detail_contains("unknown");
}

static void test_host_memory_free_null(void** state) {
  (void)state;
  assert_ok(gpumem_host_free(NULL));
}

static void test_host_memory_register_null(void** state) {
  (void)state;
  assert_status(gpumem_host_register(NULL, PAGE, 0), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("ptr is NULL");
}

static void test_host_memory_register_size_zero(void** state) {
  (void)state;
  uint8_t buf[16] = {0};
  assert_status(gpumem_host_register(buf, 0, 0), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("size is 0");
}

static void test_host_memory_register_unknown_flag(void** state) {
  (void)state;
  uint8_t buf[16] = {0};
  assert_status(gpumem_host_register(buf, sizeof buf, 0x10), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("unknown");
  assert_detail_contains("0x10");
}

static void test_host_memory_register_wraps_around(void** state) {
  (void)state;
  void* top = (void*)(UINTPTR_MAX - PAGE + 1);
  assert_status(gpumem_host_register(top, 2 * PAGE, 0), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("wraps around");
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

static void test_host_memory_unregister_null(void** state) {
  (void)state;
  assert_status(gpumem_host_unregister(NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("ptr is NULL");
}

static void test_host_memory_get_device_pointer_null_out(void** state) {
  (void)state;
  uint8_t buf[16] = {0};
  assert_status(gpumem_host_get_device_pointer(buf, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("out_device_ptr is NULL");
}

static void test_host_memory_get_device_pointer_null_ptr(void** state) {
  (void)state;
  void* d = (void*)0x1;
  assert_status(gpumem_host_get_device_pointer(NULL, &d), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_null(d);
  assert_detail_contains("ptr is NULL");
}

/* ---- GPU: pinned allocations. ---- */

static void test_host_memory_alloc_flags(void** state) {
  (void)state;
  require_gpu();
  static const uint32_t flags[] = {
      0,
      GPUMEM_HOST_ALLOC_PORTABLE,
      GPUMEM_HOST_ALLOC_DEVICEMAP,
      GPUMEM_HOST_ALLOC_WRITECOMBINED,
      GPUMEM_HOST_ALLOC_PORTABLE | GPUMEM_HOST_ALLOC_DEVICEMAP,
      GPUMEM_HOST_ALLOC_PORTABLE | GPUMEM_HOST_ALLOC_WRITECOMBINED,
      GPUMEM_HOST_ALLOC_DEVICEMAP | GPUMEM_HOST_ALLOC_WRITECOMBINED,
      GPUMEM_HOST_ALLOC_PORTABLE | GPUMEM_HOST_ALLOC_DEVICEMAP | GPUMEM_HOST_ALLOC_WRITECOMBINED,
  };
  const size_t size = 10000; /* not a page multiple */
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    uint8_t* p = (uint8_t*)0x1;
    assert_ok(gpumem_host_alloc(size, flags[i], (void**)&p));
    assert_non_null(p);
    const gpumem_pointer_info_t info = pointer_info(p);
    assert_int_equal(info.memory_type, GPUMEM_MEMORY_HOST);
    assert_true(info.is_pinned);
    assert_ptr_equal(info.base, p);
    fill_pattern(p, size, (unsigned)i);
    assert_pattern(p, size, (unsigned)i);
    assert_ok(gpumem_host_free(p));
  }
}

static void test_host_memory_alloc_out_of_memory(void** state) {
  (void)state;
  require_gpu();
  void* p = (void*)0x1;
  assert_status(gpumem_host_alloc(SIZE_MAX / 2, 0, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  assert_detail_contains("out of memory allocating 9,223,372,036,854,775,807 bytes of pinned host memory");
}

static void test_host_memory_free_interior_pointer(void** state) {
  (void)state;
  require_gpu();
  uint8_t* p = NULL;
  assert_ok(gpumem_host_alloc(PAGE, 0, (void**)&p));
  fill_pattern(p, PAGE, 7);
  assert_status(gpumem_host_free(p + 64), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("64 bytes inside");
  assert_pattern(p, PAGE, 7);
  assert_int_equal(pointer_info(p).memory_type, GPUMEM_MEMORY_HOST);
  assert_ok(gpumem_host_free(p));
}

static void test_host_memory_free_other_kinds(void** state) {
  (void)state;
  require_gpu();
  void* d = NULL;
  assert_ok(gpumem_device_alloc(0, PAGE, &d));
  assert_status(gpumem_host_free(d), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("device memory on device 0");
  assert_int_equal(pointer_info(d).memory_type, GPUMEM_MEMORY_DEVICE);
  assert_ok(gpumem_device_free(d));

  void* m = NULL;
  assert_ok(gpumem_managed_alloc(0, PAGE, 0, &m));
  assert_status(gpumem_host_free(m), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("managed memory");
  assert_ok(gpumem_managed_free(m));

  uint8_t* plain = malloc(PAGE);
  assert_non_null(plain);
  assert_status(gpumem_host_free(plain), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("plain host memory");
  free(plain);
}

/* Registered memory is page-locked too, but it is the caller's: host_free must not release it. */
static void test_host_memory_free_registered(void** state) {
  (void)state;
  require_gpu();
  uint8_t* buf = aligned_buffer(REGION);
  assert_ok(gpumem_host_register(buf, REGION, 0));
  assert_status(gpumem_host_free(buf), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("cuMemFreeHost");
  assert_detail_contains("gpumem_host_unregister");
  assert_int_equal(pointer_info(buf).memory_type, GPUMEM_MEMORY_HOST);
  assert_ptr_equal(pointer_info(buf).base, buf);
  assert_ok(gpumem_host_unregister(buf));
  free(buf);
}

static void test_host_memory_double_free(void** state) {
  (void)state;
  require_gpu();
  void* p = NULL;
  assert_ok(gpumem_host_alloc(PAGE, 0, &p));
  assert_ok(gpumem_host_free(p));
  assert_status(gpumem_host_free(p), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("already freed");
}

/* ---- GPU: registered ranges. ---- */

static void test_host_memory_register_flags(void** state) {
  (void)state;
  require_gpu();
  static const uint32_t flags[] = {
      0,
      GPUMEM_HOST_REGISTER_PORTABLE,
      GPUMEM_HOST_REGISTER_DEVICEMAP,
      GPUMEM_HOST_REGISTER_READ_ONLY,
      GPUMEM_HOST_REGISTER_PORTABLE | GPUMEM_HOST_REGISTER_DEVICEMAP,
      GPUMEM_HOST_REGISTER_DEVICEMAP | GPUMEM_HOST_REGISTER_READ_ONLY,
      GPUMEM_HOST_REGISTER_PORTABLE | GPUMEM_HOST_REGISTER_DEVICEMAP | GPUMEM_HOST_REGISTER_READ_ONLY,
  };
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    uint8_t* buf = aligned_buffer(REGION);
    fill_pattern(buf, REGION, (unsigned)i);
    assert_ok(gpumem_host_register(buf, REGION, flags[i]));
    const gpumem_pointer_info_t info = pointer_info(buf + PAGE);
    assert_int_equal(info.memory_type, GPUMEM_MEMORY_HOST);
    assert_true(info.is_pinned);
    assert_ptr_equal(info.base, buf);
    assert_int_equal(info.size, REGION);
    if (flags[i] & GPUMEM_HOST_REGISTER_DEVICEMAP) {
      void* d = NULL;
      assert_ok(gpumem_host_get_device_pointer(buf, &d));
      assert_non_null(d);
      assert_device_reads(d, buf, REGION);
    }
    assert_ok(gpumem_host_unregister(buf));
    assert_int_equal(pointer_info(buf).memory_type, GPUMEM_MEMORY_UNREGISTERED);
    assert_pattern(buf, REGION, (unsigned)i);
    free(buf);
  }
}

static void test_host_memory_register_mmap(void** state) {
  (void)state;
  require_gpu();
  uint8_t* buf = mapped_buffer(REGION);
  fill_pattern(buf, REGION, 3);
  assert_ok(gpumem_host_register(buf, REGION, GPUMEM_HOST_REGISTER_DEVICEMAP));
  assert_int_equal(pointer_info(buf).memory_type, GPUMEM_MEMORY_HOST);
  void* d = NULL;
  assert_ok(gpumem_host_get_device_pointer(buf, &d));
  assert_device_reads(d, buf, REGION);
  assert_ok(gpumem_host_unregister(buf));
  assert_int_equal(munmap(buf, REGION), 0);
}

/* IOMEMORY asks the driver to map a PCIe BAR; ordinary pages are not I/O memory, so the driver
 * must refuse, and nothing may be left registered. */
static void test_host_memory_register_iomemory_on_ram(void** state) {
  (void)state;
  require_gpu();
  uint8_t* buf = aligned_buffer(REGION);
  const gpumem_status_t st = gpumem_host_register(buf, REGION, GPUMEM_HOST_REGISTER_IOMEMORY);
  if (st == GPUMEM_SUCCESS) {
    gpumem_host_unregister(buf);
    free(buf);
    fail_msg("registering ordinary memory as I/O memory succeeded");
  }
  /* The H200 driver answers CUDA_ERROR_INVALID_VALUE; NOT_SUPPORTED would fit as well. */
  if (st != GPUMEM_ERROR_INVALID_ARGUMENT && st != GPUMEM_ERROR_NOT_SUPPORTED)
    fail_msg("registering ordinary memory as I/O memory gave %s: %s", gpumem_status_name(st),
             gpumem_last_error_detail());
  assert_detail_contains("flags 0x4");
  assert_int_equal(pointer_info(buf).memory_type, GPUMEM_MEMORY_UNREGISTERED);
  free(buf);
}

static void test_host_memory_register_twice(void** state) {
  (void)state;
  require_gpu();
  uint8_t* buf = aligned_buffer(REGION);
  assert_ok(gpumem_host_register(buf, REGION, 0));
  assert_status(gpumem_host_register(buf, REGION, 0), GPUMEM_ERROR_ALREADY_REGISTERED);
  assert_detail_contains("overlaps page-locked memory");
  /* Part of the range counts as well. */
  assert_status(gpumem_host_register(buf + PAGE, PAGE, 0), GPUMEM_ERROR_ALREADY_REGISTERED);
  /* The first registration is untouched: one unregister ends it. */
  assert_ptr_equal(pointer_info(buf).base, buf);
  assert_int_equal(pointer_info(buf).size, REGION);
  assert_ok(gpumem_host_unregister(buf));
  assert_int_equal(pointer_info(buf).memory_type, GPUMEM_MEMORY_UNREGISTERED);
  free(buf);
}

/* Memory from gpumem_host_alloc is page-locked already; registering it again is refused and leaves
 * the allocation as it was. */
/* A range that begins before a registered one and ends inside it. */
static void test_host_memory_register_overlapping_start(void** state) {
  (void)state;
  require_gpu();
  uint8_t* buf = aligned_buffer(3 * REGION);
  assert_ok(gpumem_host_register(buf + REGION, REGION, 0));
  assert_status(gpumem_host_register(buf, REGION + PAGE, 0), GPUMEM_ERROR_ALREADY_REGISTERED);
  assert_detail_contains("overlaps page-locked memory");
  assert_int_equal(pointer_info(buf).memory_type, GPUMEM_MEMORY_UNREGISTERED);
  assert_ok(gpumem_host_unregister(buf + REGION));
  free(buf);
}

static void test_host_memory_register_pinned_allocation(void** state) {
  (void)state;
  require_gpu();
  uint8_t* p = NULL;
  assert_ok(gpumem_host_alloc(REGION, 0, (void**)&p));
  fill_pattern(p, REGION, 11);
  assert_status(gpumem_host_register(p, REGION, 0), GPUMEM_ERROR_ALREADY_REGISTERED);
  assert_detail_contains("overlaps page-locked memory");
  /* So is a plain range whose last byte falls inside it. */
  assert_status(gpumem_host_register(p + REGION - 1, 1, 0), GPUMEM_ERROR_ALREADY_REGISTERED);
  const gpumem_pointer_info_t info = pointer_info(p);
  assert_int_equal(info.memory_type, GPUMEM_MEMORY_HOST);
  assert_ptr_equal(info.base, p);
  assert_pattern(p, REGION, 11);
  assert_ok(gpumem_host_free(p));
}

static void test_host_memory_unregister_not_registered(void** state) {
  (void)state;
  require_gpu();
  uint8_t* buf = aligned_buffer(REGION);
  assert_status(gpumem_host_unregister(buf), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("not a registered host range");
  free(buf);
}

static void test_host_memory_unregister_interior(void** state) {
  (void)state;
  require_gpu();
  uint8_t* buf = aligned_buffer(REGION);
  assert_ok(gpumem_host_register(buf, REGION, 0));
  assert_status(gpumem_host_unregister(buf + PAGE), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("inside the page-locked range");
  assert_int_equal(pointer_info(buf).memory_type, GPUMEM_MEMORY_HOST);
  assert_ok(gpumem_host_unregister(buf));
  free(buf);
}

static void test_host_memory_unregister_pinned_allocation(void** state) {
  (void)state;
  require_gpu();
  void* p = NULL;
  assert_ok(gpumem_host_alloc(PAGE, 0, &p));
  assert_status(gpumem_host_unregister(p), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("is a pinned allocation, not a registered range");
  assert_int_equal(pointer_info(p).memory_type, GPUMEM_MEMORY_HOST);
  assert_ok(gpumem_host_free(p));
}

/* ---- GPU: device addresses of mapped memory. ---- */

static void test_host_memory_get_device_pointer_devicemap(void** state) {
  (void)state;
  require_gpu();
  uint8_t* p = NULL;
  assert_ok(gpumem_host_alloc(REGION, GPUMEM_HOST_ALLOC_DEVICEMAP, (void**)&p));
  uint8_t* d = NULL;
  assert_ok(gpumem_host_get_device_pointer(p, (void**)&d));
  assert_non_null(d);
  uint8_t* inner = NULL;
  assert_ok(gpumem_host_get_device_pointer(p + 100, (void**)&inner));
  assert_ptr_equal(inner, d + 100);
  fill_pattern(p, REGION, 9);
  assert_device_reads(d, p, REGION);
  assert_device_reads(inner, p + 100, PAGE);
  assert_ok(gpumem_host_free(p));
}

/* With unified addressing every pinned allocation is mapped, DEVICEMAP or not (memory.h). */
static void test_host_memory_get_device_pointer_unified_addressing(void** state) {
  (void)state;
  require_gpu();
  gpumem_device_info_t dev;
  memset(&dev, 0, sizeof dev);
  dev.struct_size = sizeof dev;
  assert_ok(gpumem_device_get_info(0, &dev));
  if (!dev.unified_addressing) skip();
  uint8_t* p = NULL;
  assert_ok(gpumem_host_alloc(PAGE, 0, (void**)&p));
  void* d = NULL;
  assert_ok(gpumem_host_get_device_pointer(p, &d));
  assert_non_null(d);
  fill_pattern(p, PAGE, 5);
  assert_device_reads(d, p, PAGE);
  assert_ok(gpumem_host_free(p));
}

static void test_host_memory_get_device_pointer_plain_memory(void** state) {
  (void)state;
  require_gpu();
  uint8_t* plain = malloc(PAGE);
  assert_non_null(plain);
  void* d = (void*)0x1;
  assert_status(gpumem_host_get_device_pointer(plain, &d), GPUMEM_ERROR_INVALID_POINTER);
  assert_null(d);
  assert_detail_contains("not page-locked host memory");
  free(plain);
}

static void test_host_memory_get_device_pointer_device_memory(void** state) {
  (void)state;
  require_gpu();
  void* dev = NULL;
  assert_ok(gpumem_device_alloc(0, PAGE, &dev));
  void* d = (void*)0x1;
  assert_status(gpumem_host_get_device_pointer(dev, &d), GPUMEM_ERROR_INVALID_POINTER);
  assert_null(d);
  assert_detail_contains("device memory on device 0");
  assert_ok(gpumem_device_free(dev));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_host_memory_alloc_null_out),
      cmocka_unit_test(test_host_memory_alloc_size_zero),
      cmocka_unit_test(test_host_memory_alloc_unknown_flag),
      cmocka_unit_test(test_host_memory_free_null),
      cmocka_unit_test(test_host_memory_register_null),
      cmocka_unit_test(test_host_memory_register_size_zero),
      cmocka_unit_test(test_host_memory_register_unknown_flag),
      cmocka_unit_test(test_host_memory_register_wraps_around),
      cmocka_unit_test(test_host_memory_unregister_null),
      cmocka_unit_test(test_host_memory_get_device_pointer_null_out),
      cmocka_unit_test(test_host_memory_get_device_pointer_null_ptr),
      cmocka_unit_test(test_host_memory_alloc_flags),
      cmocka_unit_test(test_host_memory_alloc_out_of_memory),
      cmocka_unit_test(test_host_memory_free_interior_pointer),
      cmocka_unit_test(test_host_memory_free_other_kinds),
      cmocka_unit_test(test_host_memory_free_registered),
      cmocka_unit_test(test_host_memory_double_free),
      cmocka_unit_test(test_host_memory_register_flags),
      cmocka_unit_test(test_host_memory_register_mmap),
      cmocka_unit_test(test_host_memory_register_iomemory_on_ram),
      cmocka_unit_test(test_host_memory_register_twice),
      cmocka_unit_test(test_host_memory_register_overlapping_start),
      cmocka_unit_test(test_host_memory_register_pinned_allocation),
      cmocka_unit_test(test_host_memory_unregister_not_registered),
      cmocka_unit_test(test_host_memory_unregister_interior),
      cmocka_unit_test(test_host_memory_unregister_pinned_allocation),
      cmocka_unit_test(test_host_memory_get_device_pointer_devicemap),
      cmocka_unit_test(test_host_memory_get_device_pointer_unified_addressing),
      cmocka_unit_test(test_host_memory_get_device_pointer_plain_memory),
      cmocka_unit_test(test_host_memory_get_device_pointer_device_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
