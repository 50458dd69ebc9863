/* Helpers shared by the cmocka suites: include this instead of <cmocka.h>. */
#ifndef GPUMEM_TEST_UTIL_H
#define GPUMEM_TEST_UTIL_H

/* cmocka.h needs these first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <gpumem/gpumem.h>

/* Asserts that a call returned the expected status; on a mismatch prints both names and the detail. */
#define assert_status(call, expected)                                                           \
  do {                                                                                          \
    gpumem_status_t got_ = (call);                                                              \
    gpumem_status_t want_ = (expected);                                                         \
    if (got_ != want_) {                                                                        \
      print_error("%s returned %s, expected %s; detail: %s\n", #call, gpumem_status_name(got_), \
                  gpumem_status_name(want_), gpumem_last_error_detail());                       \
      fail();                                                                                   \
    }                                                                                           \
  } while (0)

#define assert_ok(call) assert_status((call), GPUMEM_SUCCESS)

/* Asserts that the last failure's detail contains a piece of text. */
#define assert_detail_contains(text)                                           \
  do {                                                                         \
    const char* detail_ = gpumem_last_error_detail();                          \
    if (strstr(detail_, (text)) == NULL) {                                     \
      print_error("detail \"%s\" does not contain \"%s\"\n", detail_, (text)); \
      fail();                                                                  \
    }                                                                          \
  } while (0)

/* True when a driver and at least one device are present. */
static inline bool gpu_available(void) {
  int32_t count = 0;
  return gpumem_device_get_count(&count) == GPUMEM_SUCCESS && count > 0;
}

/* Number of devices, 0 without a driver or device. */
static inline int32_t gpu_count(void) {
  int32_t count = 0;
  return gpumem_device_get_count(&count) == GPUMEM_SUCCESS ? count : 0;
}

/* In a GPU test: skip (reported by cmocka and CTest) when there is no device. */
#define require_gpu()                                            \
  do {                                                           \
    if (!gpu_available()) {                                      \
      print_message("no GPU: %s\n", gpumem_last_error_detail()); \
      skip();                                                    \
    }                                                            \
  } while (0)

/* An allocator's statistics, with every field first set to garbage so one left unwritten shows. */
static inline gpumem_allocator_stats_t stats_of(gpumem_allocator_t* allocator) {
  gpumem_allocator_stats_t s;
  memset(&s, 0xab, sizeof s);
  s.struct_size = sizeof s;
  assert_ok(gpumem_allocator_get_stats(allocator, &s));
  assert_int_equal(s.struct_size, sizeof s);
  return s;
}

/* A pool's info, likewise. */
static inline gpumem_pool_info_t pool_info_of(gpumem_allocator_t* pool) {
  gpumem_pool_info_t i;
  memset(&i, 0xab, sizeof i);
  i.struct_size = sizeof i;
  assert_ok(gpumem_pool_get_info(pool, &i));
  return i;
}

/* Leaves a known detail ("size is 0"), so a later one shows that a call that returns no status
 * (the PyTorch and CuPy entry points) wrote its own. */
static inline void set_known_detail(void) {
  void* p = NULL;
  assert_status(gpumem_alloc(NULL, 0, NULL, &p), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("size is 0");
}

/* A pool over upstream, with the default parameters (no limit). */
static inline gpumem_allocator_t* pool_over(gpumem_allocator_t* upstream) {
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = upstream;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&params, &pool));
  return pool;
}

/* The allocation the driver says an address of device memory lies in. */
static inline void assert_pointer_range(const void* p, const void* base, size_t size) {
  gpumem_pointer_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  assert_ok(gpumem_pointer_get_info(p, &info));
  assert_int_equal(info.memory_type, GPUMEM_MEMORY_DEVICE);
  assert_ptr_equal(info.base, base);
  assert_int_equal(info.size, size);
}

/* A file name of this process under $TMPDIR (or /tmp): "<dir>/gpumem_<name>_<pid>.<ext>". */
static inline void temp_path(char* out, size_t capacity, const char* name, const char* ext) {
  const char* dir = getenv("TMPDIR");
  snprintf(out, capacity, "%s/gpumem_%s_%d.%s", dir && *dir ? dir : "/tmp", name, (int)getpid(), ext);
}

/* A trace record ready for gpumem_trace_reader_next. */
static inline gpumem_trace_record_t trace_record(void) {
  gpumem_trace_record_t rec;
  memset(&rec, 0, sizeof rec);
  rec.struct_size = sizeof rec;
  return rec;
}

#endif /* GPUMEM_TEST_UTIL_H */
