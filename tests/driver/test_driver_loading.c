/* The driver loader against a fake driver (fake_cuda.c): the cases a real machine seldom shows (a
 * stub library, an old driver, entry points missing, cuInit failing, no device), on any machine.
 * gpumem loads the driver once per process, so CTest runs this binary once per scenario: the
 * argument names the scenario, and the environment set in CMakeLists.txt points GPUMEM_CUDA_DRIVER
 * at the fake and configures it. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>

#include "test_fake_cuda.h"
#include "test_util.h"

#define FAKE_VERSION 13000
#define FAKE_TOTAL ((size_t)1 << 30)
#define FAKE_FREE ((size_t)1 << 29)

static const char* driver_path(void) { return getenv("GPUMEM_CUDA_DRIVER"); }

/* The range the fake reports as managed memory on device 0 (1 MiB). Never dereferenced. */
static void* managed_address(void) {
  void* (*get)(void) = (void* (*)(void))fake_symbol("fake_cuda_managed_address");
  return get();
}

/* A failure gpumem refuses on its own first, so the next call must write a fresh detail. */
static void reset_detail(void) {
  assert_status(gpumem_device_alloc(0, 0, NULL), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

/* NO_DRIVER (naming the fake, where `names_path`) from every call that needs the driver. */
static void assert_every_call_no_driver(bool names_path) {
  int32_t version = 7, count = 7;
  reset_detail();
  assert_status(gpumem_driver_get_version(&version), GPUMEM_ERROR_NO_DRIVER);
  if (names_path) assert_detail_contains(driver_path());
  assert_int_equal(version, 0);
  reset_detail();
  assert_status(gpumem_device_get_count(&count), GPUMEM_ERROR_NO_DRIVER);
  if (names_path) assert_detail_contains(driver_path());
  assert_int_equal(count, 0);
  assert_false(gpu_available());

  void* p = (void*)0x1;
  assert_status(gpumem_device_alloc(0, 4096, &p), GPUMEM_ERROR_NO_DRIVER);
  assert_null(p);
  size_t free_bytes = 1, total = 1;
  assert_status(gpumem_device_query_memory(0, &free_bytes, &total), GPUMEM_ERROR_NO_DRIVER);
  assert_int_equal(free_bytes, 0);
  assert_int_equal(total, 0);
}

/* ---- healthy: a CUDA 13.0 driver with one device -------------------------------------------------- */

static void test_driver_loading_healthy_driver_version(void** state) {
  (void)state;
  int32_t version = 0;
  assert_ok(gpumem_driver_get_version(&version));
  assert_int_equal(version, FAKE_VERSION);
}

static void test_driver_loading_healthy_device_count(void** state) {
  (void)state;
  int32_t count = 0;
  assert_ok(gpumem_device_get_count(&count));
  assert_int_equal(count, 1);
  assert_true(gpu_available());
}

static void test_driver_loading_healthy_device_info(void** state) {
  (void)state;
  gpumem_device_info_t info;
  memset(&info, 0xa5, sizeof info);
  info.struct_size = sizeof info;
  assert_ok(gpumem_device_get_info(0, &info));
  assert_string_equal(info.name, "Fake GPU");
  assert_int_equal(info.total_memory, FAKE_TOTAL);
  assert_int_equal(info.compute_capability_major, 1);
  assert_int_equal(info.compute_capability_minor, 1);
  assert_true(info.unified_addressing);
  assert_true(info.managed_memory);
  assert_true(info.concurrent_managed_access);
  assert_true(info.memory_pools);
  assert_true(info.pageable_memory_access);
  assert_true(info.host_register);
  assert_true(info.can_map_host_memory);
}

static void test_driver_loading_healthy_query_memory(void** state) {
  (void)state;
  size_t free_bytes = 0, total = 0;
  assert_ok(gpumem_device_query_memory(0, &free_bytes, &total));
  assert_int_equal(free_bytes, FAKE_FREE);
  assert_int_equal(total, FAKE_TOTAL);
  assert_contexts_restored();
}

/* The fake never hands out memory; the detail carries the free memory cuMemGetInfo reported. */
static void test_driver_loading_healthy_alloc_out_of_memory(void** state) {
  (void)state;
  void* p = (void*)0x1;
  assert_status(gpumem_device_alloc(0, 4096, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  assert_detail_contains("out of memory allocating 4,096 bytes on device 0");
  assert_detail_contains("536,870,912");
  assert_detail_contains("1,073,741,824");
  assert_int_equal(gpumem_last_cuda_result(), 2);
  assert_contexts_restored();
}

static void test_driver_loading_healthy_invalid_device(void** state) {
  (void)state;
  void* p = (void*)0x1;
  assert_status(gpumem_device_alloc(1, 4096, &p), GPUMEM_ERROR_INVALID_DEVICE);
  assert_null(p);
  assert_detail_contains("device 1 does not exist");
  size_t free_bytes = 1;
  assert_status(gpumem_device_query_memory(1, &free_bytes, NULL), GPUMEM_ERROR_INVALID_DEVICE);
  assert_int_equal(free_bytes, 0);
  gpumem_device_info_t info;
  memset(&info, 0xa5, sizeof info);
  info.struct_size = sizeof info;
  assert_status(gpumem_device_get_info(1, &info), GPUMEM_ERROR_INVALID_DEVICE);
  assert_int_equal(info.name[0], '\0');
  assert_int_equal(info.total_memory, 0);
  assert_contexts_restored();
}

/* The fake's managed range reads back as managed memory on device 0, through gpumem. */
static void test_driver_loading_healthy_managed_pointer_info(void** state) {
  (void)state;
  char* base = managed_address();
  gpumem_pointer_info_t info;
  memset(&info, 0xa5, sizeof info);
  info.struct_size = sizeof info;
  assert_ok(gpumem_pointer_get_info(base + 4096, &info));
  assert_int_equal(info.memory_type, GPUMEM_MEMORY_MANAGED);
  assert_int_equal(info.device, 0);
  assert_true(info.is_managed);
  assert_false(info.is_pinned);
  assert_ptr_equal(info.base, base);
  assert_int_equal(info.size, (size_t)1 << 20);
  assert_ptr_equal(info.device_ptr, base + 4096);
  assert_contexts_restored();
}

/* With a 13.0 driver the 12.2 entry points resolve, and prefetch and advice reach the driver. */
static void test_driver_loading_healthy_managed_prefetch_and_advise(void** state) {
  (void)state;
  void* p = managed_address();
  assert_ok(gpumem_managed_prefetch(p, 4096, 0, NULL));
  assert_ok(gpumem_managed_prefetch(p, 4096, GPUMEM_LOCATION_HOST, NULL));
  assert_ok(gpumem_managed_advise(p, 4096, GPUMEM_ADVICE_SET_READ_MOSTLY, 0));
  assert_ok(gpumem_managed_advise(p, 4096, GPUMEM_ADVICE_SET_PREFERRED_LOCATION, 0));
  assert_contexts_restored();
}

/* A driver error's detail names the CUDA error and its number; the fake refuses every memset. */
static void test_driver_loading_healthy_driver_error_detail(void** state) {
  (void)state;
  reset_detail();
  assert_status(gpumem_memset(managed_address(), 0, 1, 16), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("memset of 16 elements");
  assert_detail_contains("CUDA_ERROR_INVALID_VALUE");
  assert_detail_contains("invalid argument");
  assert_detail_contains("CUresult 1");
  assert_int_equal(gpumem_last_cuda_result(), 1);
  assert_contexts_restored();
}

/* ---- missing_symbols: cuMemAlloc and cuMemFree do not resolve ---------------------------------- */

static void test_driver_loading_missing_symbols_named(void** state) {
  (void)state;
  int32_t count = 7;
  assert_status(gpumem_device_get_count(&count), GPUMEM_ERROR_NO_DRIVER);
  assert_int_equal(count, 0);
  assert_detail_contains(driver_path());
  assert_detail_contains("lacks cuMemAlloc, cuMemFree");
  /* Only what is missing: a neighbour that resolved is not named. */
  assert_null(strstr(gpumem_last_error_detail(), "cuMemGetInfo"));
}

static void test_driver_loading_missing_symbols_every_call(void** state) {
  (void)state;
  assert_every_call_no_driver(true);
  assert_detail_contains("cuMemAlloc, cuMemFree");
}

/* ---- old_driver: a driver for CUDA 11.8 ------------------------------------------------------- */

static void test_driver_loading_old_driver_refused(void** state) {
  (void)state;
  assert_every_call_no_driver(false);
  assert_detail_contains("supports CUDA 11.8; gpumem needs 12.0 or newer");
}

/* ---- no_device: cuInit returns CUDA_ERROR_NO_DEVICE ------------------------------------------- */

/* The driver itself works: its version needs no device. */
static void test_driver_loading_no_device_driver_version(void** state) {
  (void)state;
  int32_t version = 0;
  assert_ok(gpumem_driver_get_version(&version));
  assert_int_equal(version, FAKE_VERSION);
}

static void test_driver_loading_no_device_device_count(void** state) {
  (void)state;
  int32_t count = 7;
  reset_detail();
  assert_status(gpumem_device_get_count(&count), GPUMEM_ERROR_NO_DEVICE);
  assert_int_equal(count, 0);
  assert_detail_contains("no device");
  assert_int_equal(gpumem_last_cuda_result(), 100);
  assert_false(gpu_available());
}

static void test_driver_loading_no_device_alloc(void** state) {
  (void)state;
  void* p = (void*)0x1;
  assert_status(gpumem_device_alloc(0, 4096, &p), GPUMEM_ERROR_NO_DEVICE);
  assert_null(p);
  assert_int_equal(gpumem_last_cuda_result(), 100);
}

/* ---- zero_devices: cuInit succeeds, cuDeviceGetCount reports 0 --------------------------------- */

static void test_driver_loading_zero_devices(void** state) {
  (void)state;
  int32_t version = 0, count = 7;
  assert_ok(gpumem_driver_get_version(&version));
  assert_int_equal(version, FAKE_VERSION);
  assert_status(gpumem_device_get_count(&count), GPUMEM_ERROR_NO_DEVICE);
  assert_int_equal(count, 0);
  assert_detail_contains("no device");
  /* cuDeviceGetCount itself succeeded. */
  assert_int_equal(gpumem_last_cuda_result(), 0);
}

/* ---- init_failure: cuInit returns CUDA_ERROR_INVALID_VALUE ------------------------------------ */

static void test_driver_loading_init_failure(void** state) {
  (void)state;
  assert_every_call_no_driver(true);
  int32_t version = 7;
  assert_status(gpumem_driver_get_version(&version), GPUMEM_ERROR_NO_DRIVER);
  assert_detail_contains("cuInit");
  assert_detail_contains("CUDA_ERROR_INVALID_VALUE");
  assert_detail_contains("CUresult 1");
  assert_int_equal(gpumem_last_cuda_result(), 1);
}

/* ---- cuda_12_1: a 12.1 driver, without the 12.2 prefetch and advice entry points ---------------- */

/* The optional entry points are not required: the driver loads and answers. */
static void test_driver_loading_cuda_12_1_loads(void** state) {
  (void)state;
  int32_t version = 0, count = 0;
  assert_ok(gpumem_driver_get_version(&version));
  assert_int_equal(version, 12010);
  assert_ok(gpumem_device_get_count(&count));
  assert_int_equal(count, 1);
  void* p = (void*)0x1;
  assert_status(gpumem_device_alloc(0, 4096, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
}

static void test_driver_loading_cuda_12_1_prefetch_not_supported(void** state) {
  (void)state;
  void* p = managed_address();
  assert_status(gpumem_managed_prefetch(p, 4096, 0, NULL), GPUMEM_ERROR_NOT_SUPPORTED);
  assert_detail_contains("needs a CUDA 12.2 or newer driver");
  assert_status(gpumem_managed_prefetch(p, 4096, GPUMEM_LOCATION_HOST, NULL), GPUMEM_ERROR_NOT_SUPPORTED);
  assert_detail_contains("needs a CUDA 12.2 or newer driver");
  assert_contexts_restored();
}

static void test_driver_loading_cuda_12_1_advise_not_supported(void** state) {
  (void)state;
  assert_status(gpumem_managed_advise(managed_address(), 4096, GPUMEM_ADVICE_SET_READ_MOSTLY, 0),
                GPUMEM_ERROR_NOT_SUPPORTED);
  assert_detail_contains("needs a CUDA 12.2 or newer driver");
  assert_contexts_restored();
}

/* The argument and pointer checks come first: their answers do not depend on the driver version. */
static void test_driver_loading_cuda_12_1_checks_before_not_supported(void** state) {
  (void)state;
  char plain[64];
  assert_status(gpumem_managed_prefetch(plain, sizeof plain, 0, NULL), GPUMEM_ERROR_INVALID_POINTER);
  assert_detail_contains("not managed memory");
  assert_status(gpumem_managed_advise(plain, sizeof plain, GPUMEM_ADVICE_SET_READ_MOSTLY, 0),
                GPUMEM_ERROR_INVALID_POINTER);
  assert_status(gpumem_managed_prefetch(managed_address(), 4096, 1, NULL), GPUMEM_ERROR_INVALID_DEVICE);
  assert_status(gpumem_managed_advise(managed_address(), 4096, 99, 0), GPUMEM_ERROR_INVALID_ARGUMENT);
}

/* ---- stub: nothing resolves, as with the CUDA Toolkit's stub libcuda.so ----------------------- */

static void test_driver_loading_stub_library(void** state) {
  (void)state;
  assert_every_call_no_driver(true);
  assert_detail_contains("stub");
}

/* ---- not_a_driver: a library without cuGetProcAddress_v2 (gpumem itself stands in) ------------ */

static void test_driver_loading_not_a_driver(void** state) {
  (void)state;
  assert_every_call_no_driver(true);
  assert_detail_contains("older than CUDA 12.0 (it has no cuGetProcAddress_v2)");
}

/* Runs the tests of the scenario named `scenario`, if that is the one asked for. */
#define RUN_SCENARIO(scenario, ...)                                  \
  if (strcmp(wanted, scenario) == 0) {                               \
    const struct CMUnitTest tests[] = {__VA_ARGS__};                 \
    return cmocka_run_group_tests_name(scenario, tests, NULL, NULL); \
  }

int main(int argc, char** argv) {
  /* Without GPUMEM_CUDA_DRIVER this would test whatever driver the machine has. */
  if (argc != 2 || driver_path() == NULL) {
    fprintf(stderr, "usage: GPUMEM_CUDA_DRIVER=<fake_cuda module> %s SCENARIO (run it through CTest)\n", argv[0]);
    return 2;
  }
  const char* wanted = argv[1];
  RUN_SCENARIO("healthy", cmocka_unit_test(test_driver_loading_healthy_driver_version),
               cmocka_unit_test(test_driver_loading_healthy_device_count),
               cmocka_unit_test(test_driver_loading_healthy_device_info),
               cmocka_unit_test(test_driver_loading_healthy_query_memory),
               cmocka_unit_test(test_driver_loading_healthy_alloc_out_of_memory),
               cmocka_unit_test(test_driver_loading_healthy_invalid_device),
               cmocka_unit_test(test_driver_loading_healthy_managed_pointer_info),
               cmocka_unit_test(test_driver_loading_healthy_managed_prefetch_and_advise),
               cmocka_unit_test(test_driver_loading_healthy_driver_error_detail))
  RUN_SCENARIO("missing_symbols", cmocka_unit_test(test_driver_loading_missing_symbols_named),
               cmocka_unit_test(test_driver_loading_missing_symbols_every_call))
  RUN_SCENARIO("old_driver", cmocka_unit_test(test_driver_loading_old_driver_refused))
  RUN_SCENARIO("no_device", cmocka_unit_test(test_driver_loading_no_device_driver_version),
               cmocka_unit_test(test_driver_loading_no_device_device_count),
               cmocka_unit_test(test_driver_loading_no_device_alloc))
  RUN_SCENARIO("zero_devices", cmocka_unit_test(test_driver_loading_zero_devices))
  RUN_SCENARIO("init_failure", cmocka_unit_test(test_driver_loading_init_failure))
  RUN_SCENARIO("cuda_12_1", cmocka_unit_test(test_driver_loading_cuda_12_1_loads),
               cmocka_unit_test(test_driver_loading_cuda_12_1_prefetch_not_supported),
               cmocka_unit_test(test_driver_loading_cuda_12_1_advise_not_supported),
               cmocka_unit_test(test_driver_loading_cuda_12_1_checks_before_not_supported))
  RUN_SCENARIO("stub", cmocka_unit_test(test_driver_loading_stub_library))
  RUN_SCENARIO("not_a_driver", cmocka_unit_test(test_driver_loading_not_a_driver))
  fprintf(stderr, "unknown scenario \"%s\"\n", wanted);
  return 2;
}
