/* Allocators on a machine with two GPUs: each device's pool holds its own device's memory, a NULL
 * allocator follows the current device, and peer access opens an allocator's memory to the other
 * device (checked with the driver's own answers, since copies work without it). Every test needs
 * two devices; with fewer the binary returns 77 (a skip). */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>

#include "test_bytes.h"
#include "test_cuda.h"

#define MiB ((size_t)1 << 20)

/* What cuda.h declares and the tests do not include: CUmemLocation, and the values used here. */
typedef struct test_mem_location {
  int type; /* CUmemLocationType */
  int id;
} test_mem_location_t;
enum {
  TEST_MEM_LOCATION_TYPE_DEVICE = 1,                /* CU_MEM_LOCATION_TYPE_DEVICE */
  TEST_MEM_ACCESS_NONE = 0,                         /* CU_MEM_ACCESS_FLAGS_PROT_NONE */
  TEST_MEM_ACCESS_READ_WRITE = 3,                   /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE */
  TEST_CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704 /* CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED */
};
typedef int (*test_cu_fn_pool_get_access)(int* flags, gpumem_cuda_pool_t pool, test_mem_location_t* location);
typedef int (*test_cu_fn_can_access_peer)(int* can, int device, int peer);
typedef int (*test_cu_fn_enable_peer_access)(void* peer_context, unsigned flags);

/* ---- Helpers ---- */

/* Whether `device`'s kernels can reach `owner`'s memory at all. */
static bool can_access_peer(int device, int owner) {
  int can = 0;
  assert_int_equal(((test_cu_fn_can_access_peer)test_cu_symbol("cuDeviceCanAccessPeer"))(&can, device, owner), 0);
  return can != 0;
}

/* What the CUDA pool lets `device` do with its memory. */
static int pool_access(gpumem_cuda_pool_t pool, int device) {
  test_mem_location_t location = {TEST_MEM_LOCATION_TYPE_DEVICE, device};
  int flags = -1;
  assert_int_equal(((test_cu_fn_pool_get_access)test_cu_symbol("cuMemPoolGetAccess"))(&flags, pool, &location), 0);
  return flags;
}

static int32_t device_of(const void* p) {
  gpumem_pointer_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  assert_ok(gpumem_pointer_get_info(p, &info));
  assert_int_equal(info.memory_type, GPUMEM_MEMORY_DEVICE);
  return info.device;
}

static gpumem_allocator_t* new_cuda_pool(int32_t device) {
  gpumem_cuda_pool_params_t params = GPUMEM_CUDA_POOL_PARAMS_INIT;
  params.source = GPUMEM_CUDA_POOL_NEW;
  params.device = device;
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_allocator_create_cuda_pool(&params, &a));
  return a;
}

/* ---- Tests ---- */

/* First in the binary: nothing has enabled peer access between the devices' contexts before it,
 * so the driver's "already enabled" afterwards is the allocator's doing. */
static void test_multi_gpu_device_allocator_enables_context_peer_access(void** state) {
  (void)state;
  gpumem_allocator_t* device0 = NULL;
  assert_ok(gpumem_allocator_create_device(0, &device0));
  assert_status(gpumem_allocator_set_peer_access(device0, 0, GPUMEM_PEER_ACCESS_READ_WRITE),
                GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("own device");
  if (!can_access_peer(1, 0) || !can_access_peer(0, 1)) {
    assert_status(gpumem_allocator_set_peer_access(device0, 1, GPUMEM_PEER_ACCESS_READ_WRITE),
                  GPUMEM_ERROR_NOT_SUPPORTED);
    assert_detail_contains("cannot reach each other's memory");
    assert_ok(gpumem_allocator_destroy(device0));
    return;
  }
  assert_ok(gpumem_allocator_set_peer_access(device0, 1, GPUMEM_PEER_ACCESS_READ_WRITE));
  /* Both ways, between the primary contexts. */
  void* context0 = NULL;
  void* context1 = NULL;
  assert_int_equal(((test_cu_fn_ctx_retain)test_cu_symbol("cuDevicePrimaryCtxRetain"))(&context0, 0), 0);
  assert_int_equal(((test_cu_fn_ctx_retain)test_cu_symbol("cuDevicePrimaryCtxRetain"))(&context1, 1), 0);
  test_cu_push(1);
  const int from1 = ((test_cu_fn_enable_peer_access)test_cu_symbol("cuCtxEnablePeerAccess"))(context0, 0);
  test_cu_pop();
  test_cu_push(0);
  const int from0 = ((test_cu_fn_enable_peer_access)test_cu_symbol("cuCtxEnablePeerAccess"))(context1, 0);
  test_cu_pop();
  assert_int_equal(from1, TEST_CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  assert_int_equal(from0, TEST_CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);

  assert_status(gpumem_allocator_set_peer_access(device0, 1, GPUMEM_PEER_ACCESS_NONE), GPUMEM_ERROR_NOT_SUPPORTED);
  assert_detail_contains("cannot be taken away");
  assert_ok(gpumem_allocator_destroy(device0));
}

static void test_multi_gpu_device_pools_hold_their_devices_memory(void** state) {
  (void)state;
  gpumem_allocator_t* pool0 = NULL;
  gpumem_allocator_t* pool1 = NULL;
  assert_ok(gpumem_pool_get_device(0, &pool0));
  assert_ok(gpumem_pool_get_device(1, &pool1));
  assert_ptr_not_equal(pool0, pool1);
  int32_t device = -1;
  assert_ok(gpumem_allocator_get_device(pool1, &device));
  assert_int_equal(device, 1);

  void* p0 = NULL;
  void* p1 = NULL;
  assert_ok(gpumem_alloc(pool0, MiB, NULL, &p0));
  assert_ok(gpumem_alloc(pool1, MiB, NULL, &p1));
  assert_int_equal(device_of(p0), 0);
  assert_int_equal(device_of(p1), 1);
  expect_round_trip(p1, MiB, 1);
  /* Each pool refuses the other's memory. */
  assert_status(gpumem_free(pool0, p1, NULL), GPUMEM_ERROR_NOT_OWNED);
  assert_ok(gpumem_free(pool1, p1, NULL));
  assert_ok(gpumem_free(pool0, p0, NULL));
}

static void test_multi_gpu_null_allocator_follows_current_device(void** state) {
  (void)state;
  test_cu_push(1);
  void* p = NULL;
  assert_ok(gpumem_alloc(NULL, MiB, NULL, &p));
  assert_int_equal(device_of(p), 1);
  gpumem_allocator_t* pool1 = NULL;
  assert_ok(gpumem_pool_get_device(1, &pool1));
  assert_int_equal(stats_of(pool1).bytes_requested, MiB);
  assert_ok(gpumem_free(NULL, p, NULL)); /* resolves to the same pool while device 1 is current */
  test_cu_pop();

  assert_ok(gpumem_alloc(NULL, MiB, NULL, &p));
  assert_int_equal(device_of(p), 0);
  assert_ok(gpumem_free(NULL, p, NULL));
  assert_int_equal(stats_of(pool1).bytes_requested, 0);
}

static void test_multi_gpu_cuda_pool_on_second_device(void** state) {
  (void)state;
  gpumem_allocator_t* a = new_cuda_pool(1);
  int32_t device = -1;
  assert_ok(gpumem_allocator_get_device(a, &device));
  assert_int_equal(device, 1);
  void* p = NULL;
  assert_ok(gpumem_alloc(a, 3 * MiB, NULL, &p));
  assert_int_equal(device_of(p), 1);
  expect_round_trip(p, 3 * MiB, 2);
  assert_ok(gpumem_free(a, p, NULL));
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_multi_gpu_external_pool_of_other_device_refused(void** state) {
  (void)state;
  gpumem_allocator_t* owner = new_cuda_pool(0);
  gpumem_cuda_pool_params_t params = GPUMEM_CUDA_POOL_PARAMS_INIT;
  params.source = GPUMEM_CUDA_POOL_EXTERNAL;
  assert_ok(gpumem_cuda_pool_get(owner, &params.pool));
  params.device = 1;
  gpumem_allocator_t* a = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_allocator_create_cuda_pool(&params, &a), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("is not a pool of device 1");
  assert_null(a);
  assert_ok(gpumem_allocator_destroy(owner));
}

static void test_multi_gpu_cuda_pool_peer_access_through_a_pool(void** state) {
  (void)state;
  gpumem_allocator_t* upstream = new_cuda_pool(0);
  gpumem_pool_params_t params = GPUMEM_POOL_PARAMS_INIT;
  params.upstream = upstream;
  gpumem_allocator_t* pool = NULL;
  assert_ok(gpumem_pool_create(&params, &pool));
  gpumem_cuda_pool_t cuda_pool = NULL;
  assert_ok(gpumem_cuda_pool_get(upstream, &cuda_pool));
  assert_int_equal(pool_access(cuda_pool, 0), TEST_MEM_ACCESS_READ_WRITE);
  assert_int_equal(pool_access(cuda_pool, 1), TEST_MEM_ACCESS_NONE); /* a new pool is its device's alone */

  if (!can_access_peer(1, 0)) {
    assert_status(gpumem_allocator_set_peer_access(pool, 1, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_NOT_SUPPORTED);
    assert_detail_contains("device 1 cannot reach device 0's memory");
  } else {
    /* Set on the gpumem pool, which passes it to the CUDA pool under it. */
    assert_ok(gpumem_allocator_set_peer_access(pool, 1, GPUMEM_PEER_ACCESS_READ_WRITE));
    assert_int_equal(pool_access(cuda_pool, 1), TEST_MEM_ACCESS_READ_WRITE);
    void* p = NULL;
    assert_ok(gpumem_alloc(pool, MiB, NULL, &p));
    expect_round_trip(p, MiB, 3);
    assert_ok(gpumem_free(pool, p, NULL));
    assert_ok(gpumem_allocator_set_peer_access(pool, 1, GPUMEM_PEER_ACCESS_NONE));
    assert_int_equal(pool_access(cuda_pool, 1), TEST_MEM_ACCESS_NONE);
  }
  assert_int_equal(pool_access(cuda_pool, 0), TEST_MEM_ACCESS_READ_WRITE);
  assert_ok(gpumem_allocator_destroy(pool));
  assert_ok(gpumem_allocator_destroy(upstream));
}

static void test_multi_gpu_peer_access_of_other_kinds(void** state) {
  (void)state;
  gpumem_allocator_t* managed = NULL;
  assert_ok(gpumem_allocator_create_managed(0, GPUMEM_MANAGED_ATTACH_GLOBAL, &managed));
  assert_ok(gpumem_allocator_set_peer_access(managed, 1, GPUMEM_PEER_ACCESS_READ_WRITE));
  assert_status(gpumem_allocator_set_peer_access(managed, 1, GPUMEM_PEER_ACCESS_NONE), GPUMEM_ERROR_NOT_SUPPORTED);
  assert_detail_contains("reachable from every device");
  assert_status(gpumem_allocator_set_peer_access(managed, 0, GPUMEM_PEER_ACCESS_READ_WRITE),
                GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("own device");
  assert_ok(gpumem_allocator_destroy(managed));

  gpumem_allocator_t* host = NULL;
  assert_ok(gpumem_allocator_create_host(0, &host));
  assert_status(gpumem_allocator_set_peer_access(host, 1, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_NOT_SUPPORTED);
  assert_detail_contains("the host allocator's memory cannot be opened to device 1");
  assert_ok(gpumem_allocator_destroy(host));

  gpumem_allocator_t* pinned = NULL;
  assert_ok(gpumem_allocator_create_pinned(0, &pinned));
  assert_status(gpumem_allocator_set_peer_access(pinned, 1, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_NOT_SUPPORTED);
  assert_detail_contains("pinned host allocator");
  assert_ok(gpumem_allocator_destroy(pinned));
}

int main(void) {
  const int32_t count = gpu_count();
  if (count < 2) {
    printf("these tests need 2 GPUs; %d found%s%s\n", count, count ? "" : ": ",
           count ? "" : gpumem_last_error_detail());
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_multi_gpu_device_allocator_enables_context_peer_access),
      cmocka_unit_test(test_multi_gpu_device_pools_hold_their_devices_memory),
      cmocka_unit_test(test_multi_gpu_null_allocator_follows_current_device),
      cmocka_unit_test(test_multi_gpu_cuda_pool_on_second_device),
      cmocka_unit_test(test_multi_gpu_external_pool_of_other_device_refused),
      cmocka_unit_test(test_multi_gpu_cuda_pool_peer_access_through_a_pool),
      cmocka_unit_test(test_multi_gpu_peer_access_of_other_kinds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
