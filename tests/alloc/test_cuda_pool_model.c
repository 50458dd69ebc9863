/* CUDA-pool allocators against the fake driver (tests/driver/fake_cuda.c), with two devices, on
 * any machine: which pool each source takes, the rule for the release threshold, the checks that
 * need the driver, what an out-of-memory detail says, and peer access between devices that have
 * no peer path. The fake's pools hold no memory, so nothing here allocates successfully; that is
 * test_cuda_pool's part, on a GPU. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>

#include "test_fake_cuda.h"
#include "test_util.h"

static gpumem_allocator_t* create_from(uint32_t source, int32_t device, uint64_t release_threshold) {
  gpumem_cuda_pool_params_t params = GPUMEM_CUDA_POOL_PARAMS_INIT;
  params.source = source;
  params.device = device;
  params.release_threshold = release_threshold;
  gpumem_allocator_t* a = NULL;
  assert_ok(gpumem_allocator_create_cuda_pool(&params, &a));
  assert_non_null(a);
  assert_contexts_restored();
  return a;
}

static gpumem_cuda_pool_t pool_of(gpumem_allocator_t* a) {
  gpumem_cuda_pool_t pool = NULL;
  assert_ok(gpumem_cuda_pool_get(a, &pool));
  assert_non_null(pool);
  return pool;
}

static uint64_t threshold_of(gpumem_allocator_t* a) {
  gpumem_cuda_pool_info_t info;
  memset(&info, 0xab, sizeof info);
  info.struct_size = sizeof info;
  assert_ok(gpumem_cuda_pool_get_info(a, &info));
  assert_contexts_restored();
  assert_int_equal(info.reserved, 0);
  assert_int_equal(info.used, 0);
  return info.release_threshold;
}

static void test_cuda_pool_model_sources_take_the_devices_pool(void** state) {
  (void)state;
  gpumem_allocator_t* current0 = create_from(GPUMEM_CUDA_POOL_CURRENT, 0, GPUMEM_CUDA_POOL_KEEP_THRESHOLD);
  gpumem_allocator_t* default0 = create_from(GPUMEM_CUDA_POOL_DEFAULT, 0, GPUMEM_CUDA_POOL_KEEP_THRESHOLD);
  gpumem_allocator_t* default1 = create_from(GPUMEM_CUDA_POOL_DEFAULT, 1, GPUMEM_CUDA_POOL_KEEP_THRESHOLD);
  /* The fake's current pool is its default one. */
  assert_ptr_equal(pool_of(current0), pool_of(default0));
  assert_ptr_not_equal(pool_of(default0), pool_of(default1));
  int32_t device = -1;
  assert_ok(gpumem_allocator_get_device(default1, &device));
  assert_int_equal(device, 1);
  assert_ok(gpumem_allocator_destroy(current0));
  assert_ok(gpumem_allocator_destroy(default0));
  assert_ok(gpumem_allocator_destroy(default1));
  assert_contexts_restored();
}

static void test_cuda_pool_model_threshold_changed_only_when_given(void** state) {
  (void)state;
  gpumem_allocator_t* first = create_from(GPUMEM_CUDA_POOL_DEFAULT, 0, 4096);
  assert_int_equal(threshold_of(first), 4096);
  /* Another allocator over the same pool leaves it as it is... */
  gpumem_allocator_t* second = create_from(GPUMEM_CUDA_POOL_CURRENT, 0, GPUMEM_CUDA_POOL_KEEP_THRESHOLD);
  assert_int_equal(threshold_of(second), 4096);
  /* ...and a change through either is the pool's, which both see. */
  assert_ok(gpumem_cuda_pool_set_release_threshold(second, UINT64_MAX));
  assert_true(threshold_of(first) == UINT64_MAX);
  assert_ok(gpumem_cuda_pool_set_release_threshold(first, 0));
  assert_int_equal(threshold_of(second), 0);
  assert_ok(gpumem_allocator_destroy(first));
  assert_ok(gpumem_allocator_destroy(second));
}

static void test_cuda_pool_model_checks_needing_the_driver(void** state) {
  (void)state;
  gpumem_cuda_pool_params_t params = GPUMEM_CUDA_POOL_PARAMS_INIT;
  gpumem_allocator_t* a = (gpumem_allocator_t*)0x1;
  params.device = 2;
  assert_status(gpumem_allocator_create_cuda_pool(&params, &a), GPUMEM_ERROR_INVALID_DEVICE);
  assert_detail_contains("device 2 does not exist (there are 2");
  assert_null(a);

  /* The fake's pools are reachable from their own device alone. */
  gpumem_allocator_t* owner = create_from(GPUMEM_CUDA_POOL_DEFAULT, 0, GPUMEM_CUDA_POOL_KEEP_THRESHOLD);
  params.source = GPUMEM_CUDA_POOL_EXTERNAL;
  params.pool = pool_of(owner);
  params.device = 1;
  a = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_allocator_create_cuda_pool(&params, &a), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("is not a pool of device 1: the device's access to it is none");
  assert_null(a);
  params.device = 0;
  assert_ok(gpumem_allocator_create_cuda_pool(&params, &a));
  assert_ptr_equal(pool_of(a), pool_of(owner));
  assert_ok(gpumem_allocator_destroy(a));
  assert_ok(gpumem_allocator_destroy(owner));

  /* The fake has no memory for a new pool: nothing is created. */
  params = (gpumem_cuda_pool_params_t)GPUMEM_CUDA_POOL_PARAMS_INIT;
  params.source = GPUMEM_CUDA_POOL_NEW;
  params.max_size = (uint64_t)1 << 20;
  a = (gpumem_allocator_t*)0x1;
  assert_status(gpumem_allocator_create_cuda_pool(&params, &a), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_detail_contains("out of memory creating a CUDA pool on device 0 (cuMemPoolCreate)");
  assert_null(a);
  assert_contexts_restored();
}

static void test_cuda_pool_model_out_of_memory_detail(void** state) {
  (void)state;
  gpumem_allocator_t* a = create_from(GPUMEM_CUDA_POOL_DEFAULT, 1, GPUMEM_CUDA_POOL_KEEP_THRESHOLD);
  void* p = (void*)0x1;
  assert_status(gpumem_alloc(a, 3000, NULL, &p), GPUMEM_ERROR_OUT_OF_MEMORY);
  assert_null(p);
  assert_detail_contains("out of memory allocating 3,000 bytes from the CUDA pool");
  assert_detail_contains(
      "of device 1 (cuMemAllocFromPoolAsync; the pool reserves 0 bytes, 0 of them in use; "
      "536,870,912 of 1,073,741,824 bytes free on the device)");
  assert_contexts_restored();
  const gpumem_allocator_stats_t s = stats_of(a);
  assert_int_equal(s.oom_count, 1);
  assert_int_equal(s.alloc_count, 0);
  assert_int_equal(s.bytes_reserved, 0);
  assert_ok(gpumem_allocator_destroy(a));
}

static void test_cuda_pool_model_peer_access_without_peer_path(void** state) {
  (void)state;
  gpumem_allocator_t* a = create_from(GPUMEM_CUDA_POOL_DEFAULT, 0, GPUMEM_CUDA_POOL_KEEP_THRESHOLD);
  assert_status(gpumem_allocator_set_peer_access(a, 1, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_NOT_SUPPORTED);
  assert_detail_contains("device 1 cannot reach device 0's memory");
  /* Device 1 has no access to take away. */
  assert_ok(gpumem_allocator_set_peer_access(a, 1, GPUMEM_PEER_ACCESS_NONE));
  assert_status(gpumem_allocator_set_peer_access(a, 0, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_INVALID_ARGUMENT);
  assert_detail_contains("is this CUDA pool's own device");
  assert_status(gpumem_allocator_set_peer_access(a, 2, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_INVALID_DEVICE);
  assert_detail_contains("device 2 does not exist");
  assert_contexts_restored();
  assert_ok(gpumem_allocator_destroy(a));

  gpumem_allocator_t* device = NULL;
  assert_ok(gpumem_allocator_create_device(0, &device));
  assert_status(gpumem_allocator_set_peer_access(device, 1, GPUMEM_PEER_ACCESS_READ_WRITE), GPUMEM_ERROR_NOT_SUPPORTED);
  assert_detail_contains("devices 0 and 1 cannot reach each other's memory");
  assert_status(gpumem_allocator_set_peer_access(device, 1, GPUMEM_PEER_ACCESS_NONE), GPUMEM_ERROR_NOT_SUPPORTED);
  assert_detail_contains("cannot be taken away");
  assert_ok(gpumem_allocator_destroy(device));

  /* Managed memory needs no peer path: the driver moves it. */
  gpumem_allocator_t* managed = NULL;
  assert_ok(gpumem_allocator_create_managed(0, 0, &managed));
  assert_ok(gpumem_allocator_set_peer_access(managed, 1, GPUMEM_PEER_ACCESS_READ_WRITE));
  assert_status(gpumem_allocator_set_peer_access(managed, 2, GPUMEM_PEER_ACCESS_READ_WRITE),
                GPUMEM_ERROR_INVALID_DEVICE);
  assert_ok(gpumem_allocator_destroy(managed));
  assert_contexts_restored();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cuda_pool_model_sources_take_the_devices_pool),
      cmocka_unit_test(test_cuda_pool_model_threshold_changed_only_when_given),
      cmocka_unit_test(test_cuda_pool_model_checks_needing_the_driver),
      cmocka_unit_test(test_cuda_pool_model_out_of_memory_detail),
      cmocka_unit_test(test_cuda_pool_model_peer_access_without_peer_path),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
